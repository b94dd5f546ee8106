#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A parsed JSON text: its bytes plus tokens. Lookups scan an object's members
/// (claim sets are small) and compare names byte-wise without allocating.
/// A class: the claim checks pass it around, and one reference is cheaper
/// than copying two arrays each time.
final class JSONDocument: Sendable {
    let bytes: [UInt8]
    let tokens: [JSONToken]

    /// Parses `bytes[range]`, requiring the root to be an object; returns the
    /// document and the root token index.
    static func parseObject(_ bytes: [UInt8], range: Range<Int>, tokens: inout [JSONToken]) throws(JSONError) -> Int {
        let root = try bytes.withUnsafeBufferPointer { buffer throws(JSONError) -> Int in
            try JSONParser.parse(buffer, range: range, tokens: &tokens)
        }
        guard tokens[root].kind == .object else { throw .notAnObject }
        return root
    }

    /// Parses a whole byte array whose root must be an object.
    convenience init(parsingObject bytes: [UInt8]) throws(JSONError) {
        var tokens = [JSONToken]()
        tokens.reserveCapacity(32)
        _ = try JSONDocument.parseObject(bytes, range: 0..<bytes.count, tokens: &tokens)
        self.init(bytes: bytes, tokens: tokens)
    }

    init(bytes: [UInt8], tokens: [JSONToken]) {
        self.bytes = bytes
        self.tokens = tokens
    }


    subscript(_ index: Int) -> JSONToken { tokens[index] }

    func string(_ index: Int) -> String? {
        let token = tokens[index]
        guard token.kind == .string else { return nil }
        if !token.flag {
            return String(decoding: bytes[Int(token.start)..<Int(token.end)], as: UTF8.self)
        }
        return bytes.withUnsafeBufferPointer { String(decoding: JSONDocumentBytes.unescapedBytes($0, token), as: UTF8.self) }
    }

    func stringBytes(_ index: Int) -> [UInt8]? {
        let token = tokens[index]
        guard token.kind == .string else { return nil }
        return bytes.withUnsafeBufferPointer { JSONDocumentBytes.unescapedBytes($0, token) }
    }

    func number(_ index: Int) -> Double? {
        let token = tokens[index]
        guard token.kind == .number else { return nil }
        return bytes.withUnsafeBufferPointer { JSONDocumentBytes.number($0, token) }
    }

    func bool(_ index: Int) -> Bool? {
        let token = tokens[index]
        return token.kind == .bool ? token.flag : nil
    }

    /// Whether the string token equals `other` (UTF-8).
    func stringEquals(_ index: Int, _ other: [UInt8]) -> Bool {
        let token = tokens[index]
        guard token.kind == .string else { return false }
        return bytes.withUnsafeBufferPointer { buffer in
            other.withUnsafeBytes { JSONDocumentBytes.stringEquals(buffer, token, $0) }
        }
    }

    /// Token indices of an array's elements.
    func elements(_ index: Int) -> [Int] {
        let token = tokens[index]
        guard token.kind == .array else { return [] }
        var result = [Int]()
        result.reserveCapacity(Int(token.count))
        var element = index + 1
        for _ in 0..<Int(token.count) {
            result.append(element)
            element += Int(tokens[element].span)
        }
        return result
    }

    /// Calls `body` with each element index of an array, without allocating.
    @inline(__always)
    func forEachElement(_ index: Int, _ body: (Int) -> Bool) {
        let token = tokens[index]
        guard token.kind == .array else { return }
        var element = index + 1
        for _ in 0..<Int(token.count) {
            if !body(element) { return }
            element += Int(tokens[element].span)
        }
    }

    /// The value token of member `name` in object `object`. Compares the
    /// length first, then the bytes; escaped names (rare) are unescaped.
    func member(_ object: Int, _ name: UnsafeRawBufferPointer) -> Int? {
        tokens.withUnsafeBufferPointer { tokens -> Int? in
            let token = tokens[object]
            guard token.kind == .object else { return nil }
            let count = Int(token.count)
            let length = name.count
            return bytes.withUnsafeBufferPointer { buffer -> Int? in
                let base = buffer.baseAddress!
                var key = object + 1
                for _ in 0..<count {
                    let keyToken = tokens[key]
                    if keyToken.flag {
                        if JSONDocumentBytes.stringEquals(buffer, keyToken, name) { return key + 1 }
                    } else if Int(keyToken.end &- keyToken.start) == length,
                              length == 0 || memcmp(base + Int(keyToken.start), name.baseAddress!, length) == 0 {
                        return key + 1
                    }
                    key += 1 + Int(tokens[key + 1].span)
                }
                return nil
            }
        }
    }

    @inline(__always)
    func member(_ object: Int, _ name: StaticString) -> Int? {
        member(object, UnsafeRawBufferPointer(start: name.utf8Start, count: name.utf8CodeUnitCount))
    }

    func member(_ object: Int, _ name: [UInt8]) -> Int? {
        name.withUnsafeBytes { member(object, $0) }
    }

    /// All (name, value index) pairs of an object (cold paths).
    func members(_ object: Int) -> [(name: String, value: Int)] {
        let token = tokens[object]
        guard token.kind == .object else { return [] }
        var result = [(name: String, value: Int)]()
        var key = object + 1
        for _ in 0..<Int(token.count) {
            result.append((string(key) ?? "", key + 1))
            key += 1 + Int(tokens[key + 1].span)
        }
        return result
    }
}

