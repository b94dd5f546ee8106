import PortcullisCore

/// Encodes commands as RESP arrays of bulk strings (the argv form every Redis
/// command accepts), straight into an output buffer.
enum RESPEncoder {
    static func append(_ arguments: [String], to out: inout ByteBuffer) {
        out.append(UInt8(ascii: "*"))
        out.appendDecimal(arguments.count)
        out.append("\r\n" as StaticString)
        for var argument in arguments {
            argument.withUTF8 { appendBulk(UnsafeRawBufferPointer($0), to: &out) }
        }
    }

    static func append(bytes arguments: [[UInt8]], to out: inout ByteBuffer) {
        out.append(UInt8(ascii: "*"))
        out.appendDecimal(arguments.count)
        out.append("\r\n" as StaticString)
        for argument in arguments {
            argument.withUnsafeBytes { appendBulk($0, to: &out) }
        }
    }

    private static func appendBulk(_ bytes: UnsafeRawBufferPointer, to out: inout ByteBuffer) {
        out.append(UInt8(ascii: "$"))
        out.appendDecimal(bytes.count)
        out.append("\r\n" as StaticString)
        out.append(bytes)
        out.append("\r\n" as StaticString)
    }
}
