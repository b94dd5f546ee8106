/// A parsed request head. Every range is an offset into the bytes given to ``RequestHeadParser/parse(_:into:)``,
/// so the head stays valid exactly as long as the caller keeps those bytes where they are.
///
/// One value is meant to be reused for every request of a connection: the parser keeps `fields`' capacity.
public struct RequestHead: Sendable {
    public var method: HTTPMethod
    /// The method token as sent (the name of an `.other` method).
    public var methodRange: Range<Int>
    /// The request-target as sent; see ``TargetNormalizer`` before routing on it.
    public var target: Range<Int>
    public var targetForm: RequestTargetForm
    /// The authority of an absolute-form target; it wins over `Host` (RFC 9112 §3.2.2).
    public var absoluteAuthority: Range<Int>?
    public var version: HTTPVersion
    /// Every field line, in order (including the ones interpreted below).
    public var fields: [HTTPHeaderField]
    /// Bytes of the head, allowed leading CRLFs and the final CRLFCRLF included; the body or the next request starts here.
    public var headLength: Int
    /// `.none`, `.contentLength(n)` (n may be 0) or `.chunked`; never `.untilClose` for a request.
    public var framing: BodyFraming
    /// HTTP/1.1: true unless `Connection: close`. HTTP/1.0: true only with `Connection: keep-alive` (and no `close`).
    public var keepAlive: Bool
    /// `Expect: 100-continue` on an HTTP/1.1 request (ignored for HTTP/1.0, RFC 9110 §10.1.1).
    public var expectContinue: Bool
    /// The `Host` value (validated; at most one `Host` field is accepted).
    public var host: Range<Int>?
    /// A WebSocket opening handshake: HTTP/1.1 `GET`, `Connection` listing `upgrade`, `Upgrade`
    /// listing `websocket`, and no body (no framing, or `Content-Length: 0`). The only request
    /// decided on its head alone and the only upgrade ever forwarded; every other `Upgrade`
    /// (h2c, any value on a POST or on a request with a body) leaves a plain request.
    public var webSocketUpgrade: Bool

    public init() {
        method = .get
        methodRange = 0..<0
        target = 0..<0
        targetForm = .origin
        absoluteAuthority = nil
        version = .http11
        fields = []
        headLength = 0
        framing = .none
        keepAlive = true
        expectContinue = false
        host = nil
        webSocketUpgrade = false
    }
}
