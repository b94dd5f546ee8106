/// Decoding of string and number tokens from the bytes they point into.
enum JSONDocumentBytes {
    /// The string's content with escapes resolved (UTF-8 bytes).
    static func unescapedBytes(_ bytes: UnsafeBufferPointer<UInt8>, _ token: JSONToken) -> [UInt8] {
        let start = Int(token.start), end = Int(token.end)
        guard token.flag else { return Array(bytes[start..<end]) }
        var out = [UInt8]()
        out.reserveCapacity(end - start)
        var index = start
        while index < end {
            let byte = bytes[index]
            guard byte == UInt8(ascii: "\\") else {
                out.append(byte)
                index += 1
                continue
            }
            let escape = bytes[index + 1]
            index += 2
            switch escape {
            case UInt8(ascii: "b"): out.append(0x08)
            case UInt8(ascii: "f"): out.append(0x0C)
            case UInt8(ascii: "n"): out.append(0x0A)
            case UInt8(ascii: "r"): out.append(0x0D)
            case UInt8(ascii: "t"): out.append(0x09)
            case UInt8(ascii: "u"):
                var scalar = hex4(bytes, index)
                index += 4
                if scalar >= 0xD800 && scalar < 0xDC00 {  // validated by the parser: a low surrogate follows
                    let low = hex4(bytes, index + 2)
                    index += 6
                    scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                }
                appendUTF8(scalar, to: &out)
            default: out.append(escape)  // " \ /
            }
        }
        return out
    }

    private static func hex4(_ bytes: UnsafeBufferPointer<UInt8>, _ offset: Int) -> UInt32 {
        var value: UInt32 = 0
        for index in offset..<(offset + 4) { value = value << 4 | UInt32(JSONParser.hexValue(bytes[index]) ?? 0) }
        return value
    }

    private static func appendUTF8(_ scalar: UInt32, to out: inout [UInt8]) {
        switch scalar {
        case 0..<0x80:
            out.append(UInt8(scalar))
        case 0x80..<0x800:
            out.append(UInt8(0xC0 | scalar >> 6)); out.append(UInt8(0x80 | scalar & 0x3F))
        case 0x800..<0x10000:
            out.append(UInt8(0xE0 | scalar >> 12)); out.append(UInt8(0x80 | scalar >> 6 & 0x3F))
            out.append(UInt8(0x80 | scalar & 0x3F))
        default:
            out.append(UInt8(0xF0 | scalar >> 18)); out.append(UInt8(0x80 | scalar >> 12 & 0x3F))
            out.append(UInt8(0x80 | scalar >> 6 & 0x3F)); out.append(UInt8(0x80 | scalar & 0x3F))
        }
    }

    /// Compares two string tokens by content.
    static func stringsEqual(_ bytes: UnsafeBufferPointer<UInt8>, _ a: JSONToken, _ b: JSONToken) -> Bool {
        if !a.flag && !b.flag {
            let length = Int(a.end - a.start)
            guard length == Int(b.end - b.start) else { return false }
            return memoryEqual(bytes.baseAddress! + Int(a.start), bytes.baseAddress! + Int(b.start), length)
        }
        return unescapedBytes(bytes, a) == unescapedBytes(bytes, b)
    }

    /// Compares a string token's content with `other` without allocating when
    /// the token has no escapes.
    static func stringEquals(_ bytes: UnsafeBufferPointer<UInt8>, _ token: JSONToken, _ other: UnsafeRawBufferPointer) -> Bool {
        if !token.flag {
            let length = Int(token.end - token.start)
            guard length == other.count else { return false }
            guard length > 0 else { return true }
            return memoryEqual(bytes.baseAddress! + Int(token.start), other.baseAddress!.assumingMemoryBound(to: UInt8.self), length)
        }
        let content = unescapedBytes(bytes, token)
        return content.elementsEqual(other)
    }

    @inline(__always)
    static func memoryEqual(_ a: UnsafePointer<UInt8>, _ b: UnsafePointer<UInt8>, _ count: Int) -> Bool {
        for index in 0..<count where a[index] != b[index] { return false }
        return true
    }

    /// The value of a number token. Integers of up to 15 digits are decoded
    /// directly; anything else goes through the standard library's parser.
    static func number(_ bytes: UnsafeBufferPointer<UInt8>, _ token: JSONToken) -> Double? {
        let start = Int(token.start), end = Int(token.end)
        var index = start
        let negative = bytes[index] == UInt8(ascii: "-")
        if negative { index += 1 }
        if end - index <= 15 {
            var value: Int64 = 0
            var plain = true
            while index < end {
                let digit = bytes[index] &- UInt8(ascii: "0")
                if digit > 9 { plain = false; break }
                value = value * 10 + Int64(digit)
                index += 1
            }
            if plain { return Double(negative ? -value : value) }
        }
        return Double(String(decoding: bytes[start..<end], as: UTF8.self))
    }
}
