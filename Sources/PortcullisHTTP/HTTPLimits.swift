/// Size limits the HTTP/1.1 codec enforces, each with the status a violation earns.
///
/// The defaults are safe for a public edge; configuration may tighten or loosen them.
/// Exceeding a limit is always reported as an ``HTTPParseError`` (the caller then closes the connection).
public struct HTTPLimits: Sendable, Equatable {
    /// Longest request line (method, target, version; without CRLF). Longer → 414.
    public var maxRequestLineBytes: Int
    /// Largest head, request line and leading CRLFs included, up to and including the final CRLFCRLF. Larger → 431.
    public var maxHeaderBytes: Int
    /// Most header fields in one head. More → 431.
    public var maxHeaderCount: Int
    /// Largest request body: a larger `Content-Length` → 413; a chunked body growing past it → 413.
    public var maxBodyBytes: Int
    /// Longest chunk-size line, chunk extensions included (without CRLF). Longer → 400.
    public var maxChunkLineBytes: Int
    /// Largest trailer section of a chunked body. Larger → 431.
    public var maxTrailerBytes: Int

    public init(
        maxRequestLineBytes: Int = 8192,
        maxHeaderBytes: Int = 32768,
        maxHeaderCount: Int = 100,
        maxBodyBytes: Int = 10 * 1024 * 1024,
        maxChunkLineBytes: Int = 1024,
        maxTrailerBytes: Int = 8192
    ) {
        self.maxRequestLineBytes = maxRequestLineBytes
        self.maxHeaderBytes = maxHeaderBytes
        self.maxHeaderCount = maxHeaderCount
        self.maxBodyBytes = maxBodyBytes
        self.maxChunkLineBytes = maxChunkLineBytes
        self.maxTrailerBytes = maxTrailerBytes
    }

    /// The defaults: 8 KiB request line, 32 KiB head, 100 fields, 10 MiB body, 1 KiB chunk line, 8 KiB trailers.
    public static let `default` = HTTPLimits()
}
