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
        return decodeTable.withUnsafeBufferPointer { table -> Int? in
            var inIndex = 0
            var outIndex = 0
            let fullGroups = input.count >> 2
            for _ in 0..<fullGroups {
                let a = table[Int(input[inIndex])], b = table[Int(input[inIndex + 1])]
                let c = table[Int(input[inIndex + 2])], d = table[Int(input[inIndex + 3])]
                if (a | b | c | d) & 0xC0 != 0 { return nil }
                let word = UInt32(a) << 18 | UInt32(b) << 12 | UInt32(c) << 6 | UInt32(d)
                output[outIndex] = UInt8(truncatingIfNeeded: word >> 16)
                output[outIndex + 1] = UInt8(truncatingIfNeeded: word >> 8)
                output[outIndex + 2] = UInt8(truncatingIfNeeded: word)
                inIndex += 4
                outIndex += 3
            }
            switch input.count - inIndex {
            case 2:
                let a = table[Int(input[inIndex])], b = table[Int(input[inIndex + 1])]
                if (a | b) & 0xC0 != 0 || b & 0x0F != 0 { return nil }
                output[outIndex] = a << 2 | b >> 4
                outIndex += 1
            case 3:
                let a = table[Int(input[inIndex])], b = table[Int(input[inIndex + 1])]
                let c = table[Int(input[inIndex + 2])]
                if (a | b | c) & 0xC0 != 0 || c & 0x03 != 0 { return nil }
                output[outIndex] = a << 2 | b >> 4
                output[outIndex + 1] = (b & 0x0F) << 4 | c >> 2
                outIndex += 2
            default:
                break
            }
            return outIndex
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
