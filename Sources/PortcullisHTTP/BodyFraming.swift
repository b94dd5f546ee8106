/// How the body of a message is delimited (RFC 9112 §6.3).
public enum BodyFraming: Sendable, Equatable {
    /// No body.
    case none
    /// Exactly this many bytes follow the head (may be 0).
    case contentLength(Int)
    /// A chunked body follows; decode it with ``ChunkedDecoder``.
    case chunked
    /// The body runs until the upstream closes the connection (responses only).
    case untilClose
}
