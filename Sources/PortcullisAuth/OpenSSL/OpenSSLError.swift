internal import COpenSSL

/// Errors drained from OpenSSL's per-thread error queue.
public struct OpenSSLError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The OpenSSL call that failed.
    public var operation: String
    /// `ERR_error_string_n` texts, oldest first.
    public var reasons: [String]

    public var description: String {
        reasons.isEmpty ? "\(operation) failed" : "\(operation) failed: \(reasons.joined(separator: "; "))"
    }

    /// Builds an error for `operation` and empties this thread's queue.
    static func drain(_ operation: String) -> OpenSSLError {
        var reasons = [String]()
        while true {
            let code = ERR_get_error()
            if code == 0 { break }
            var buffer = [CChar](repeating: 0, count: 256)
            ERR_error_string_n(code, &buffer, buffer.count)
            reasons.append(stringFromCBuffer(buffer))
        }
        return OpenSSLError(operation: operation, reasons: reasons)
    }

    /// Discards queued errors after an expected failure (a bad signature) so a
    /// later caller on this thread does not see stale entries.
    @inline(__always)
    static func clearQueue() { ERR_clear_error() }
}
