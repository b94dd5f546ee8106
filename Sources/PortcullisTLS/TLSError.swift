internal import COpenSSL

/// A TLS failure: what was being done and OpenSSL's drained error stack (or the
/// certificate verification result), as text a user can act on.
public struct TLSError: Error, CustomStringConvertible, Sendable, Equatable {
    public var operation: String
    public var reason: String

    public init(_ operation: String, reason: String) {
        self.operation = operation
        self.reason = reason
    }

    public var description: String { operation.isEmpty ? reason : "\(operation): \(reason)" }

    /// Drains this thread's OpenSSL error queue into one error (the queue is
    /// thread-local, so a failure never leaks into another connection's answer).
    static func drain(_ operation: String) -> TLSError {
        TLSError(operation, reason: drainQueue())
    }

    static func drainQueue() -> String {
        guard ERR_peek_error() != 0 else { return "unknown error" }
        var parts: [String] = []
        var buffer = [CChar](repeating: 0, count: 256)
        while case let code = ERR_get_error(), code != 0 {
            ERR_error_string_n(code, &buffer, buffer.count)
            let text = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
            // "error:0A000086:SSL routines::certificate verify failed" → the readable tail.
            parts.append(text.split(separator: ":", omittingEmptySubsequences: false).last.map(String.init) ?? text)
        }
        return parts.isEmpty ? "unknown error" : parts.joined(separator: "; ")
    }

    /// Empties the thread's error queue when its text is not needed (a peer that closed
    /// without close_notify: every such connection would otherwise build strings).
    static func discardQueue() {
        if ERR_peek_error() != 0 { ERR_clear_error() }
    }
}

/// A configuration file that cannot be used: which file and why.
public struct TLSFileError: Error, CustomStringConvertible, Sendable, Equatable {
    public var file: String
    public var reason: String
    public init(file: String, reason: String) {
        self.file = file
        self.reason = reason
    }
    public var description: String { "\(file): \(reason)" }
}
