import PortcullisCore

/// A command in argv form, as text or as raw bytes (binary-safe values).
enum CommandArguments: Sendable {
    case strings([String])
    case bytes([[UInt8]])

    func encode(into out: inout ByteBuffer) {
        switch self {
        case .strings(let a): RESPEncoder.append(a, to: &out)
        case .bytes(let a): RESPEncoder.append(bytes: a, to: &out)
        }
    }
}
