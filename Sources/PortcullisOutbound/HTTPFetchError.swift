/// Why an outbound GET produced no response. Each case names what an operator
/// needs to act on: the URL, the address or the limit involved.
public enum HTTPFetchError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The URL cannot be fetched as written.
    case invalidURL(String, reason: String)
    /// The TLS handshake failed: untrusted or mismatched certificate, protocol error, ...
    case tlsFailed(url: String, reason: String)
    /// getaddrinfo found no usable address.
    case resolutionFailed(host: String, reason: String)
    /// The TCP connect was refused or failed (every resolved address was tried).
    case connectFailed(address: String, reason: String)
    /// No connection within the connect timeout.
    case connectTimedOut(address: String, seconds: Double)
    /// No complete response within the total timeout.
    case timedOut(url: String, seconds: Double)
    /// The connection broke (reset, or closed before the response was complete).
    case connectionLost(url: String, reason: String)
    /// The response was not valid HTTP/1.1.
    case malformedResponse(url: String, reason: String)
    /// The body is larger than the configured cap.
    case bodyTooLarge(url: String, limit: Int)

    public var description: String {
        switch self {
        case .invalidURL(let url, let reason): return "invalid URL '\(url)': \(reason)"
        case .tlsFailed(let url, let reason): return "TLS with \(url) failed: \(reason)"
        case .resolutionFailed(let host, let reason): return "cannot resolve \(host): \(reason)"
        case .connectFailed(let address, let reason): return "connect to \(address) failed: \(reason)"
        case .connectTimedOut(let address, let seconds): return "connect to \(address) timed out after \(seconds) s"
        case .timedOut(let url, let seconds): return "GET \(url) timed out after \(seconds) s"
        case .connectionLost(let url, let reason): return "GET \(url): connection lost (\(reason))"
        case .malformedResponse(let url, let reason): return "GET \(url): malformed response (\(reason))"
        case .bodyTooLarge(let url, let limit): return "GET \(url): body larger than \(limit) bytes"
        }
    }
}
