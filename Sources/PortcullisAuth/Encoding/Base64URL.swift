/// Strict base64url (RFC 4648 §5) as JOSE requires (RFC 7515 §2, App. C):
/// no `=` padding, no `+` `/`, no whitespace, `len % 4 != 1`, and the unused
/// low bits of the last character must be zero (so every byte string has
/// exactly one accepted encoding).
enum Base64URL {
    /// 0...63 for alphabet characters, 0xFF otherwise.
    private static let decodeTable: [UInt8] = {
        var table = [UInt8](repeating: 0xFF, count: 256)
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)
        for (index, character) in alphabet.enumerated() { table[Int(character)] = UInt8(index) }
        return table
    }()
    private static let encodeTable: [UInt8] =
        Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)

    /// The number of bytes `count` characters decode to, or nil when no
    /// unpadded encoding has that length.
    @inline(__always)
    static func decodedLength(_ count: Int) -> Int? {
        let remainder = count & 3
        if remainder == 1 { return nil }
        return (count >> 2) * 3 + (remainder == 0 ? 0 : remainder - 1)
    }

    /// Decodes `input` into `output`, which must hold at least
    /// `decodedLength(input.count)` bytes. Returns the number of bytes written,
    /// or nil on any character outside the alphabet or non-zero pad bits.
    static func decode(_ input: UnsafeRawBufferPointer, into output: UnsafeMutableRawBufferPointer) -> Int? {
        guard let length = decodedLength(input.count), output.count >= length else { return nil }
        guard length > 0 else { return input.isEmpty ? 0 : nil }
        return decodeTable.withUnsafeBufferPointer { table -> Int? in
            let table = table.baseAddress!
            let source = input.baseAddress!.assumingMemoryBound(to: UInt8.self)
            let target = output.baseAddress!.assumingMemoryBound(to: UInt8.self)
            @inline(__always) func sextet(_ offset: Int) -> UInt32 { UInt32(table[Int(source[offset])]) }
            var inIndex = 0
            var outIndex = 0
            let fullGroups = input.count >> 2
            // Characters outside the alphabet map to 0xFF; OR-ing every
            // looked-up value and testing bits 6-7 once at the end finds them
            // without a branch per group.
            var invalid: UInt32 = 0
            for _ in 0..<fullGroups {
                let a = sextet(inIndex), b = sextet(inIndex &+ 1), c = sextet(inIndex &+ 2), d = sextet(inIndex &+ 3)
                invalid |= a | b | c | d
                let word = a << 18 | b << 12 | c << 6 | d
                target[outIndex] = UInt8(truncatingIfNeeded: word >> 16)
                target[outIndex &+ 1] = UInt8(truncatingIfNeeded: word >> 8)
                target[outIndex &+ 2] = UInt8(truncatingIfNeeded: word)
                inIndex &+= 4
                outIndex &+= 3
            }
            switch input.count - inIndex {
            case 2:
                let a = sextet(inIndex), b = sextet(inIndex &+ 1)
                invalid |= a | b | (b & 0x0F == 0 ? 0 : 0xC0)
                target[outIndex] = UInt8(truncatingIfNeeded: a << 2 | b >> 4)
                outIndex &+= 1
            case 3:
                let a = sextet(inIndex), b = sextet(inIndex &+ 1), c = sextet(inIndex &+ 2)
                invalid |= a | b | c | (c & 0x03 == 0 ? 0 : 0xC0)
                target[outIndex] = UInt8(truncatingIfNeeded: a << 2 | b >> 4)
                target[outIndex &+ 1] = UInt8(truncatingIfNeeded: (b & 0x0F) << 4 | c >> 2)
                outIndex &+= 2
            default:
                break
            }
            return invalid & 0xC0 == 0 ? outIndex : nil
        }
    }

    /// Decodes into a new array (key-load time and cold paths).
    static func decode<Bytes: Collection<UInt8>>(_ input: Bytes) -> [UInt8]? {
        let contiguous = Array(input)
        guard let length = decodedLength(contiguous.count) else { return nil }
        var output = [UInt8](repeating: 0, count: length)
        let written = contiguous.withUnsafeBytes { source in
            output.withUnsafeMutableBytes { decode(source, into: $0) }
        }
        return written == length ? output : nil
    }

    static func decode(_ string: String) -> [UInt8]? { decode(Array(string.utf8)) }

    /// Encodes without padding.
    static func encode<Bytes: Collection<UInt8>>(_ input: Bytes) -> String {
        let bytes = Array(input)
        var out = [UInt8]()
        out.reserveCapacity((bytes.count + 2) / 3 * 4)
        var index = 0
        while index + 3 <= bytes.count {
            let word = UInt32(bytes[index]) << 16 | UInt32(bytes[index + 1]) << 8 | UInt32(bytes[index + 2])
            out.append(encodeTable[Int(word >> 18 & 63)])
            out.append(encodeTable[Int(word >> 12 & 63)])
            out.append(encodeTable[Int(word >> 6 & 63)])
            out.append(encodeTable[Int(word & 63)])
            index += 3
        }
        switch bytes.count - index {
        case 1:
            let word = UInt32(bytes[index]) << 16
            out.append(encodeTable[Int(word >> 18 & 63)])
            out.append(encodeTable[Int(word >> 12 & 63)])
        case 2:
            let word = UInt32(bytes[index]) << 16 | UInt32(bytes[index + 1]) << 8
            out.append(encodeTable[Int(word >> 18 & 63)])
            out.append(encodeTable[Int(word >> 12 & 63)])
            out.append(encodeTable[Int(word >> 6 & 63)])
        default:
            break
        }
        return String(decoding: out, as: UTF8.self)
    }
}
