/// Why a message was rejected: the status to answer and a short reason that is safe to show a client.
///
/// `reason` is always a string literal (no allocation on the failure path) and never echoes input bytes.
/// Request-side errors carry 400, 413, 414, 417, 431, 501 or 505; errors about an upstream response carry 502.
/// After any failure the caller must close the connection: framing can no longer be trusted.
public struct HTTPParseError: Error, Sendable, Equatable {
    public var status: Int
    public var reason: String

    public init(status: Int, reason: String) {
        self.status = status
        self.reason = reason
    }

    /// The same reason reported against an upstream response (502 Bad Gateway).
    var asUpstreamError: HTTPParseError { HTTPParseError(status: 502, reason: reason) }

    static func bad(_ reason: String) -> HTTPParseError {
        HTTPParseError(status: 400, reason: reason)
    }
}
