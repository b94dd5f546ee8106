/// A parsed upstream response head. Ranges are offsets into the bytes given to ``ResponseHeadParser``.
public struct ResponseHead: Sendable {
    /// The status code, 100...599.
    public var status: Int
    public var version: HTTPVersion
    /// The reason phrase as sent (possibly empty).
    public var reasonRange: Range<Int>
    /// Every field line, in order.
    public var fields: [HTTPHeaderField]
    /// Bytes of the head including the final CRLFCRLF; the body starts here.
    public var headLength: Int
    /// Per RFC 9112 §6.3: a response to HEAD, a 1xx, 204 or 304, or a 2xx to CONNECT → `.none`;
    /// `Transfer-Encoding` ending in `chunked` → `.chunked`; another `Transfer-Encoding` → `.untilClose`;
    /// `Content-Length` → `.contentLength`; otherwise `.untilClose`.
    public var framing: BodyFraming
    /// Whether the upstream connection may be reused after this response; false whenever framing is `.untilClose`.
    public var keepAlive: Bool

    public init() {
        status = 0
        version = .http11
        reasonRange = 0..<0
        fields = []
        headLength = 0
        framing = .none
        keepAlive = true
    }
}
