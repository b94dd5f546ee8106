import PortcullisCore
import PortcullisHTTP
import PortcullisIO

/// The wire protocol a request arrived on (logs, metrics, `X-Forwarded-Proto` stays the scheme).
public enum RequestProtocol: Sendable, CaseIterable {
    case http10, http11, h2, h2c

    /// An HTTP/1.x request's protocol, by its version.
    init(http1 version: HTTPVersion) { self = version == .http10 ? .http10 : .http11 }

    /// Index in per-protocol counters.
    var slot: Int {
        switch self {
        case .http10: return 0
        case .http11: return 1
        case .h2: return 2
        case .h2c: return 3
        }
    }

    public var name: StaticString {
        switch self {
        case .http10: return "http/1.0"
        case .http11: return "http/1.1"
        case .h2: return "h2"
        case .h2c: return "h2c"
        }
    }
}

/// A request as routing, authentication, local handlers and the forwarded head see it,
/// whatever protocol carried it: the method, the target, the authority and the field
/// lines, as byte ranges into `bytes`, plus the normalized path and query.
///
/// HTTP/1.1 fills it from the parsed head in place; HTTP/2 from the fields it decoded into
/// a per-stream buffer (with split `cookie` fields joined), so the auth path reads byte
/// ranges and copies nothing either way. `bytes` is valid only while the caller keeps it:
/// during `authenticate` / `handle`, or after `rebased(onto:)` on a copy.
public struct RequestView {
    public let bytes: UnsafeRawBufferPointer
    public let method: HTTPMethod
    /// The method token as sent ("GET", or the name of an `.other` method).
    public let methodRange: Range<Int>
    /// The request target as sent (origin form: path and query; HTTP/2's `:path`).
    public let target: Range<Int>
    /// The authority the request names: an absolute-form target's, else `Host` (HTTP/1.1),
    /// or `:authority` (HTTP/2). Nil only for an HTTP/1.0 request without either.
    public let authority: Range<Int>?
    /// Every field line in order, pseudo-header fields excluded.
    public let fields: [HTTPHeaderField]
    /// How the request body is framed towards the upstream.
    public let framing: BodyFraming
    /// A WebSocket opening handshake without a body (`RequestHead.webSocketUpgrade`; never on
    /// HTTP/2): the one request decided on its head alone and forwarded as an upgrade.
    public let webSocketUpgrade: Bool
    public let transport: RequestProtocol
    /// Normalized path (before prefix stripping).
    public let path: String
    /// Normalized query (without '?'), when the target had one.
    public let query: String?
    public let peer: SocketAddress
    public let loop: EventLoop

    public init(bytes: UnsafeRawBufferPointer, method: HTTPMethod, methodRange: Range<Int>, target: Range<Int>,
                authority: Range<Int>?, fields: [HTTPHeaderField], framing: BodyFraming,
                webSocketUpgrade: Bool, transport: RequestProtocol, path: String, query: String?,
                peer: SocketAddress, loop: EventLoop) {
        self.bytes = bytes
        self.method = method
        self.methodRange = methodRange
        self.target = target
        self.authority = authority
        self.fields = fields
        self.framing = framing
        self.webSocketUpgrade = webSocketUpgrade
        self.transport = transport
        self.path = path
        self.query = query
        self.peer = peer
        self.loop = loop
    }

    /// An HTTP/1.x request, straight from its parsed head.
    init(http1 head: RequestHead, bytes: UnsafeRawBufferPointer, path: String, query: String?,
         peer: SocketAddress, loop: EventLoop) {
        self.init(bytes: bytes, method: head.method, methodRange: head.methodRange, target: head.target,
                  authority: head.absoluteAuthority ?? head.host, fields: head.fields,
                  framing: head.framing, webSocketUpgrade: head.webSocketUpgrade,
                  transport: RequestProtocol(http1: head.version),
                  path: path, query: query, peer: peer, loop: loop)
    }

    /// The same request over a copy of its bytes (the ranges are offsets, so they still hold).
    func rebased(onto bytes: UnsafeRawBufferPointer) -> RequestView { rebased(onto: bytes, framing: framing) }

    /// The same request over a copy of its bytes, with the body framed as `framing` towards
    /// the upstream (a body read whole before forwarding goes with its length).
    func rebased(onto bytes: UnsafeRawBufferPointer, framing: BodyFraming) -> RequestView {
        RequestView(bytes: bytes, method: method, methodRange: methodRange, target: target, authority: authority,
                    fields: fields, framing: framing, webSocketUpgrade: webSocketUpgrade, transport: transport,
                    path: path, query: query, peer: peer, loop: loop)
    }

    /// Value bytes of every field named `name` (lower-case), in order.
    public func values(of name: StaticString, _ body: (UnsafeRawBufferPointer) -> Void) {
        for field in fields where HTTPBytes.equalsCaseInsensitive(bytes, field.name, name) {
            body(UnsafeRawBufferPointer(rebasing: bytes[field.value]))
        }
    }

    /// The request method as sent ("GET", "OPTIONS", ...).
    public var methodBytes: UnsafeRawBufferPointer { UnsafeRawBufferPointer(rebasing: bytes[methodRange]) }

    /// The authority's host, lower-cased, without port or IPv6 brackets' port (route matching).
    func host() -> Substring? {
        guard let authority, let parts = Authority.scan(bytes, authority) else { return nil }
        return Substring(Authority.host(bytes, parts))
    }
}
