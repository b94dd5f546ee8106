/// A small strict JSON parser (RFC 8259) for JOSE headers and JWT claim sets.
///
/// - UTF-8 is validated (overlong forms, surrogates and code points above
///   U+10FFFF are refused), including `\u` escapes (lone surrogates refused).
/// - Duplicate member names are refused (RFC 7515 §4, RFC 8725 §3.7).
/// - Nesting depth and token count are bounded.
/// It records offsets only; strings and numbers are decoded on demand.
struct JSONParser {
    static let defaultMaxDepth = 16
    static let defaultMaxTokens = 2048

    private let base: UnsafePointer<UInt8>
    private var position: Int
    private let end: Int
    private let maxDepth: Int
    /// Caller-owned token storage: `count` initialized, room for `capacity`.
    private let tokens: UnsafeMutablePointer<JSONToken>
    private let capacity: Int
    private(set) var count: Int

    /// The most tokens a `byteCount`-byte JSON text can produce: every
    /// value takes at least one byte, every container two, and siblings are
    /// separated by a byte, so a text of B bytes has at most (B + 1) / 2
    /// tokens. Token storage sized by this bound never runs out before the
    /// parser's own limit.
    static func tokenBound(byteCount: Int) -> Int { (byteCount + 1) / 2 + 1 }

    /// Parses `bytes[range]`; token offsets are relative to `bytes.baseAddress`.
    /// Tokens are written to `tokens[count...]` and `count` advanced; at most
    /// `min(tokens.count, maxTokens)` tokens in all (else `.tooLarge`).
    /// Returns the index of the root token.
    static func parse(
        _ bytes: UnsafeBufferPointer<UInt8>, range: Range<Int>, tokens: UnsafeMutableBufferPointer<JSONToken>, count: inout Int,
        maxDepth: Int = defaultMaxDepth, maxTokens: Int = defaultMaxTokens
    ) throws(JSONError) -> Int {
        guard let base = bytes.baseAddress, let storage = tokens.baseAddress, range.upperBound <= bytes.count,
              range.count < Int(Int32.max), count <= tokens.count else {
            throw .syntax
        }
        var parser = JSONParser(base: base, position: range.lowerBound, end: range.upperBound, maxDepth: maxDepth,
                                tokens: storage, capacity: min(tokens.count, maxTokens), count: count)
        let root = parser.count
        parser.skipWhitespace()
        try parser.parseValue(depth: 0)
        parser.skipWhitespace()
        guard parser.position == parser.end else { throw .syntax }
        count = parser.count
        return root
    }

    @inline(__always)
    private func peek() -> UInt8? { position < end ? base[position] : nil }

    @inline(__always)
    private mutating func skipWhitespace() {
        while position < end {
            switch base[position] {
            case 0x20, 0x09, 0x0A, 0x0D: position += 1
            default: return
            }
        }
    }

    private mutating func appendToken(_ kind: JSONToken.Kind, flag: Bool = false, start: Int, end: Int) throws(JSONError) -> Int {
        guard count < capacity else { throw .tooLarge }
        (tokens + count).initialize(to: JSONToken(kind: kind, flag: flag, start: Int32(start), end: Int32(end), span: 1, count: 0))
        count += 1
        return count - 1
    }

    private mutating func parseValue(depth: Int) throws(JSONError) {
        guard let byte = peek() else { throw .syntax }
        switch byte {
        case UInt8(ascii: "{"): try parseObject(depth: depth + 1)
        case UInt8(ascii: "["): try parseArray(depth: depth + 1)
        case UInt8(ascii: "\""): try parseString()
        case UInt8(ascii: "t"): try parseLiteral("true", kind: .bool, flag: true)
        case UInt8(ascii: "f"): try parseLiteral("false", kind: .bool, flag: false)
        case UInt8(ascii: "n"): try parseLiteral("null", kind: .null, flag: false)
        default: try parseNumber()
        }
    }

    private mutating func parseLiteral(_ literal: StaticString, kind: JSONToken.Kind, flag: Bool) throws(JSONError) {
        let length = literal.utf8CodeUnitCount
        guard end - position >= length else { throw .syntax }
        let literalBytes = literal.utf8Start
        for offset in 0..<length where base[position + offset] != literalBytes[offset] { throw .syntax }
        _ = try appendToken(kind, flag: flag, start: position, end: position + length)
        position += length
    }

    private mutating func parseObject(depth: Int) throws(JSONError) {
        guard depth <= maxDepth else { throw .tooDeep }
        let index = try appendToken(.object, start: position, end: position)
        position += 1
        var count: Int32 = 0
        skipWhitespace()
        if peek() == UInt8(ascii: "}") {
            position += 1
        } else {
            while true {
                skipWhitespace()
                guard peek() == UInt8(ascii: "\"") else { throw .syntax }
                try parseString()
                skipWhitespace()
                guard peek() == UInt8(ascii: ":") else { throw .syntax }
                position += 1
                skipWhitespace()
                try parseValue(depth: depth)
                count += 1
                skipWhitespace()
                guard let next = peek() else { throw .syntax }
                position += 1
                if next == UInt8(ascii: ",") { continue }
                if next == UInt8(ascii: "}") { break }
                throw .syntax
            }
        }
        tokens[index].end = Int32(position)
        tokens[index].count = count
        tokens[index].span = Int32(self.count - index)
        if count > 1 { try checkDuplicateMembers(object: index) }
    }

    private mutating func parseArray(depth: Int) throws(JSONError) {
        guard depth <= maxDepth else { throw .tooDeep }
        let index = try appendToken(.array, start: position, end: position)
        position += 1
        var count: Int32 = 0
        skipWhitespace()
        if peek() == UInt8(ascii: "]") {
            position += 1
        } else {
            while true {
                skipWhitespace()
                try parseValue(depth: depth)
                count += 1
                skipWhitespace()
                guard let next = peek() else { throw .syntax }
                position += 1
                if next == UInt8(ascii: ",") { continue }
                if next == UInt8(ascii: "]") { break }
                throw .syntax
            }
        }
        tokens[index].end = Int32(position)
        tokens[index].count = count
        tokens[index].span = Int32(self.count - index)
    }

    private mutating func parseString() throws(JSONError) {
        position += 1  // opening quote
        let start = position
        var escaped = false
        while true {
            // Fast path: plain ASCII that needs no attention (the common case
            // in claims), scanned with a local cursor kept in a register.
            var cursor = position
            // Eight bytes at a time while eight remain, then byte by byte.
            while cursor &+ 8 <= end {
                let special = JSONParser.specialBytes(UInt64(littleEndian: UnsafeRawPointer(base + cursor).loadUnaligned(as: UInt64.self)))
                if special != 0 {
                    cursor &+= special.trailingZeroBitCount >> 3
                    break
                }
                cursor &+= 8
            }
            while cursor < end, JSONParser.isPlain(base[cursor]) { cursor &+= 1 }
            position = cursor
            guard position < end else { throw .syntax }
            let byte = base[position]
            if byte == UInt8(ascii: "\"") { break }
            if byte < 0x20 { throw .syntax }
            if byte == UInt8(ascii: "\\") {
                escaped = true
                try scanEscape()
            } else if byte < 0x80 {
                position += 1
            } else {
                try scanMultibyte()
            }
        }
        _ = try appendToken(.string, flag: escaped, start: start, end: position)
        position += 1  // closing quote
    }

    /// Validates one escape at `position` (which holds the backslash).
    private mutating func scanEscape() throws(JSONError) {
        guard position + 1 < end else { throw .syntax }
        switch base[position + 1] {
        case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"), UInt8(ascii: "b"),
             UInt8(ascii: "f"), UInt8(ascii: "n"), UInt8(ascii: "r"), UInt8(ascii: "t"):
            position += 2
        case UInt8(ascii: "u"):
            guard let unit = hex4(at: position + 2) else { throw .syntax }
            position += 6
            if unit >= 0xD800 && unit < 0xDC00 {
                // A high surrogate must be followed by an escaped low surrogate.
                guard position + 1 < end, base[position] == UInt8(ascii: "\\"), base[position + 1] == UInt8(ascii: "u"),
                      let low = hex4(at: position + 2), low >= 0xDC00 && low < 0xE000 else { throw .invalidUTF8 }
                position += 6
            } else if unit >= 0xDC00 && unit < 0xE000 {
                throw .invalidUTF8
            }
        default:
            throw .syntax
        }
    }

    private func hex4(at offset: Int) -> UInt32? {
        guard offset + 4 <= end else { return nil }
        var value: UInt32 = 0
        for index in offset..<(offset + 4) {
            guard let digit = JSONParser.hexValue(base[index]) else { return nil }
            value = value << 4 | UInt32(digit)
        }
        return value
    }

    /// A mask with bit 7 of each byte of `word` (little-endian) set where
    /// that byte is not plain (see `isPlain`). Bits above the first such
    /// byte may be set spuriously (borrows), so only the lowest set bit is
    /// meaningful: it locates the first byte that needs a closer look.
    @inline(__always)
    static func specialBytes(_ word: UInt64) -> UInt64 {
        let ones: UInt64 = 0x0101_0101_0101_0101, highs: UInt64 = 0x8080_8080_8080_8080
        @inline(__always) func zeroBytes(_ x: UInt64) -> UInt64 { (x &- ones) & ~x & highs }
        let control = (word &- ones &* 0x20) & ~word & highs  // bytes < 0x20
        return control | (word & highs) | zeroBytes(word ^ (ones &* 0x22)) | zeroBytes(word ^ (ones &* 0x5C))
    }

    /// Bytes a string can contain without a closer look: printable ASCII
    /// other than `"` and `\\`.
    @inline(__always)
    static func isPlain(_ byte: UInt8) -> Bool {
        byte >= 0x20 && byte < 0x80 && byte != UInt8(ascii: "\"") && byte != UInt8(ascii: "\\")
    }

    @inline(__always)
    static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return byte &- UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return byte &- UInt8(ascii: "a") &+ 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): return byte &- UInt8(ascii: "A") &+ 10
        default: return nil
        }
    }

    /// Validates one multi-byte UTF-8 sequence (RFC 3629 table).
    private mutating func scanMultibyte() throws(JSONError) {
        let lead = base[position]
        @inline(__always) func continuation(_ offset: Int, _ range: ClosedRange<UInt8> = 0x80...0xBF) -> Bool {
            position + offset < end && range.contains(base[position + offset])
        }
        switch lead {
        case 0xC2...0xDF:
            guard continuation(1) else { throw .invalidUTF8 }
            position += 2
        case 0xE0:
            guard continuation(1, 0xA0...0xBF), continuation(2) else { throw .invalidUTF8 }
            position += 3
        case 0xE1...0xEC, 0xEE...0xEF:
            guard continuation(1), continuation(2) else { throw .invalidUTF8 }
            position += 3
        case 0xED:
            guard continuation(1, 0x80...0x9F), continuation(2) else { throw .invalidUTF8 }
            position += 3
        case 0xF0:
            guard continuation(1, 0x90...0xBF), continuation(2), continuation(3) else { throw .invalidUTF8 }
            position += 4
        case 0xF1...0xF3:
            guard continuation(1), continuation(2), continuation(3) else { throw .invalidUTF8 }
            position += 4
        case 0xF4:
            guard continuation(1, 0x80...0x8F), continuation(2), continuation(3) else { throw .invalidUTF8 }
            position += 4
        default:
            throw .invalidUTF8
        }
    }

    private mutating func parseNumber() throws(JSONError) {
        let start = position
        if peek() == UInt8(ascii: "-") { position += 1 }
        guard let first = peek() else { throw .syntax }
        if first == UInt8(ascii: "0") {
            position += 1
        } else if first >= UInt8(ascii: "1") && first <= UInt8(ascii: "9") {
            skipDigits()
        } else {
            throw .syntax
        }
        if peek() == UInt8(ascii: ".") {
            position += 1
            guard skipDigits() > 0 else { throw .syntax }
        }
        if peek() == UInt8(ascii: "e") || peek() == UInt8(ascii: "E") {
            position += 1
            if peek() == UInt8(ascii: "+") || peek() == UInt8(ascii: "-") { position += 1 }
            guard skipDigits() > 0 else { throw .syntax }
        }
        _ = try appendToken(.number, start: start, end: position)
    }

    @discardableResult
    private mutating func skipDigits() -> Int {
        let start = position
        while position < end, base[position] >= UInt8(ascii: "0"), base[position] <= UInt8(ascii: "9") { position += 1 }
        return position - start
    }

    /// Refuses objects that name a member twice, comparing names after
    /// unescaping.
    ///
    /// Objects of up to 16 members without escaped names (every claim set
    /// and header seen in practice) take one pass: each name's first 16
    /// bytes and length hash to one of 64 bits, and only a name whose bit is
    /// already set is compared byte-wise with the names before it. Other
    /// small objects compare all pairs; large ones use a set so a hostile
    /// 16 KiB object cannot cost quadratic time.
    private func checkDuplicateMembers(object: Int) throws(JSONError) {
        let count = Int(tokens[object].count)
        let buffer = UnsafeBufferPointer(start: base, count: end)
        if count <= 16 {
            var seen: UInt64 = 0
            var key = object + 1
            for position in 0..<count {
                let name = tokens[key]
                if name.flag { return try comparePairwise(object: object, count: count, buffer: buffer) }
                let bytes = UnsafeRawBufferPointer(start: base + Int(name.start), count: Int(name.end &- name.start))
                let bit: UInt64 = 1 << PackedMemberName.bucket(bytes)
                if seen & bit != 0 {
                    var earlier = object + 1
                    for _ in 0..<position {
                        if JSONDocumentBytes.stringsEqual(buffer, name, tokens[earlier]) { throw .duplicateMember }
                        earlier += 1 + Int(tokens[earlier + 1].span)
                    }
                }
                seen |= bit
                key += 1 + Int(tokens[key + 1].span)
            }
        } else {
            var seen = Set<[UInt8]>()
            var key = object + 1
            for _ in 0..<count {
                guard seen.insert(JSONDocumentBytes.unescapedBytes(buffer, tokens[key])).inserted else {
                    throw .duplicateMember
                }
                key += 1 + Int(tokens[key + 1].span)
            }
        }
    }

    /// Every pair of an object's member names, compared after unescaping.
    private func comparePairwise(object: Int, count: Int, buffer: UnsafeBufferPointer<UInt8>) throws(JSONError) {
        var later = object + 1
        for laterPosition in 0..<count {
            let name = tokens[later]
            var earlier = object + 1
            for _ in 0..<laterPosition {
                if JSONDocumentBytes.stringsEqual(buffer, name, tokens[earlier]) { throw .duplicateMember }
                earlier += 1 + Int(tokens[earlier + 1].span)
            }
            later += 1 + Int(tokens[later + 1].span)
        }
    }
}
