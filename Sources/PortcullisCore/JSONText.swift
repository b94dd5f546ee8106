/// JSON string quoting (RFC 8259 §7): for bodies and logs the gateway writes, and for
/// the JSON the token minter serializes.
public enum JSONText {
    private static let hexDigits: [UInt8] = Array("0123456789abcdef".utf8)

    public static func quoted(_ s: String) -> String {
        var out = [UInt8]()
        appendQuoted(s, to: &out)
        return String(decoding: out, as: UTF8.self)
    }

    /// Appends `s` quoted, byte by byte over its UTF-8: only `"`, `\` and the C0 controls
    /// are escaped (everything else, non-ASCII included, is copied as is).
    public static func appendQuoted(_ s: String, to out: inout [UInt8]) {
        var s = s
        out.reserveCapacity(out.count + s.utf8.count + 2)
        out.append(UInt8(ascii: "\""))
        s.withUTF8 { bytes in
            for byte in bytes {
                switch byte {
                case UInt8(ascii: "\""), UInt8(ascii: "\\"):
                    out.append(UInt8(ascii: "\\")); out.append(byte)
                case 0x0A: out.append(UInt8(ascii: "\\")); out.append(UInt8(ascii: "n"))
                case 0x0D: out.append(UInt8(ascii: "\\")); out.append(UInt8(ascii: "r"))
                case 0x09: out.append(UInt8(ascii: "\\")); out.append(UInt8(ascii: "t"))
                case 0..<0x20:
                    out += "\\u00".utf8
                    out.append(hexDigits[Int(byte >> 4)])
                    out.append(hexDigits[Int(byte & 15)])
                default: out.append(byte)
                }
            }
        }
        out.append(UInt8(ascii: "\""))
    }
}
