import PortcullisHTTP

/// Which client header fields reach an upstream, precomputed once from configuration.
///
/// Removed from every client request, on every route:
/// - hop-by-hop fields (RFC 9110 §7.6.1): Connection, Keep-Alive, Proxy-Connection,
///   TE, Trailer, Transfer-Encoding, Upgrade (re-added for WebSocket upgrades), and any
///   field named in Connection, except the fields listed in `protectedFromConnection`;
/// - framing fields the gateway re-emits: Content-Length, Expect;
/// - every identity header the gateway may inject (user id, claim headers,
///   X-Auth-Provider, the identity assertion) and every upstream's `request_headers`
///   name, compared case-insensitively with `-`, `_` and `.` as the same byte, since
///   frameworks (CGI/WSGI/Rack/PHP) fold `-` and `_` to one name and some stacks fold
///   `.` too. Removed, not refused: a client (or a proxy before us) that sends one gets
///   its request through without it, as nginx's `underscores_in_headers off` drops them.
///   Request trailers never reach an upstream (the chunked decoder discards them), so
///   no identity can arrive there either;
/// - X-Forwarded-For/-Proto/-Host, Forwarded and X-Request-Id, unless the peer is
///   a trusted proxy (then their values are kept and extended).
public struct HeaderPolicy: Sendable {
    /// Lower-cased identity header names (with '-' for '_' and '.').
    let identityNames: [[UInt8]]
    let userIdHeader: String
    let providerHeader: String
    let claimHeaders: [(claim: String, header: String)]
    /// Tracing is on: the client's `traceparent` and `tracestate` are replaced by the
    /// gateway's (its own span as the parent), never forwarded as they came.
    let replacesTraceContext: Bool

    public init(configuration: ProxyConfiguration) {
        replacesTraceContext = configuration.tracing != nil
        var names: [[UInt8]] = []
        for name in configuration.identityHeaderNames {
            let folded = Array(HTTPBytes.identityName(name).utf8)
            if !names.contains(folded) { names.append(folded) }
        }
        identityNames = names
        userIdHeader = configuration.userIdHeader
        providerHeader = configuration.providerHeader
        claimHeaders = configuration.claimHeaders
    }

    /// What an upstream response field is to the client connection (RFC 9110 §7.6.1,
    /// RFC 9113 §8.2.2). HTTP/1.1 keeps `Upgrade` on a 101 and `Transfer-Encoding` when it
    /// relays a chunked body as is; HTTP/2 drops every one but `endToEnd`.
    enum ResponseField {
        case endToEnd
        /// Connection, Keep-Alive, Proxy-Connection, Trailer, TE.
        case hopByHop
        case upgrade
        case transferEncoding
    }

    static func responseField(_ bytes: UnsafeRawBufferPointer, _ name: Range<Int>) -> ResponseField {
        switch name.count {
        case 2 where HTTPBytes.equalsCaseInsensitive(bytes, name, "te"),
             7 where HTTPBytes.equalsCaseInsensitive(bytes, name, "trailer"),
             10 where HTTPBytes.equalsCaseInsensitive(bytes, name, "connection"),
             10 where HTTPBytes.equalsCaseInsensitive(bytes, name, "keep-alive"),
             16 where HTTPBytes.equalsCaseInsensitive(bytes, name, "proxy-connection"):
            return .hopByHop
        case 7 where HTTPBytes.equalsCaseInsensitive(bytes, name, "upgrade"):
            return .upgrade
        case 17 where HTTPBytes.equalsCaseInsensitive(bytes, name, "transfer-encoding"):
            return .transferEncoding
        default:
            return .endToEnd
        }
    }

    /// What to do with one client field.
    enum Disposition {
        case copy
        case drop
        case forwardedFor, forwardedProto, forwardedHost, forwarded, requestId
    }

    func classify(_ bytes: UnsafeRawBufferPointer, _ name: Range<Int>) -> Disposition {
        // Fast path on length and first byte before full comparisons.
        switch name.count {
        case 2:
            if HTTPBytes.equalsCaseInsensitive(bytes, name, "te") { return .drop }
        case 4:
            if HTTPBytes.equalsCaseInsensitive(bytes, name, "host") { return .drop }  // re-emitted
        case 6:
            if HTTPBytes.equalsCaseInsensitive(bytes, name, "expect") { return .drop }
        case 7:
            if HTTPBytes.equalsCaseInsensitive(bytes, name, "trailer") { return .drop }
            if HTTPBytes.equalsCaseInsensitive(bytes, name, "upgrade") { return .drop }
        case 9:
            if HTTPBytes.equalsCaseInsensitive(bytes, name, "forwarded") { return .forwarded }
            if HTTPBytes.equalsIdentityName(bytes, name, Self.xRealIP) { return .drop }
        case 10:
            if HTTPBytes.equalsCaseInsensitive(bytes, name, "connection") { return .drop }
            if HTTPBytes.equalsCaseInsensitive(bytes, name, "keep-alive") { return .drop }
            if replacesTraceContext && HTTPBytes.equalsCaseInsensitive(bytes, name, "tracestate") { return .drop }
        case 11:
            if replacesTraceContext && HTTPBytes.equalsCaseInsensitive(bytes, name, "traceparent") { return .drop }
        case 12:
            if HTTPBytes.equalsIdentityName(bytes, name, Self.xRequestId) { return .requestId }
        case 13:
            if HTTPBytes.equalsIdentityName(bytes, name, Self.xRewriteURL) { return .drop }
            if HTTPBytes.equalsIdentityName(bytes, name, Self.xHTTPMethod) { return .drop }
        case 14:
            if HTTPBytes.equalsCaseInsensitive(bytes, name, "content-length") { return .drop }
            // h2c upgrade settings (RFC 7540 §3.2): never leave the gateway (h2c smuggling).
            if HTTPBytes.equalsCaseInsensitive(bytes, name, "http2-settings") { return .drop }
            if HTTPBytes.equalsIdentityName(bytes, name, Self.xOriginalURL) { return .drop }
        case 15:
            if HTTPBytes.equalsIdentityName(bytes, name, Self.xForwardedFor) { return .forwardedFor }
            if HTTPBytes.equalsIdentityName(bytes, name, Self.xOriginalHost) { return .drop }
        case 16:
            if HTTPBytes.equalsIdentityName(bytes, name, Self.xForwardedHost) { return .forwardedHost }
            if HTTPBytes.equalsCaseInsensitive(bytes, name, "proxy-connection") { return .drop }
        case 17:
            if HTTPBytes.equalsIdentityName(bytes, name, Self.xForwardedProto) { return .forwardedProto }
            if HTTPBytes.equalsCaseInsensitive(bytes, name, "transfer-encoding") { return .drop }
            if HTTPBytes.equalsIdentityName(bytes, name, Self.xMethodOverride) { return .drop }
        case 22:
            if HTTPBytes.equalsIdentityName(bytes, name, Self.xHTTPMethodOverride) { return .drop }
        default:
            break
        }
        for identity in identityNames where identity.count == name.count {
            if HTTPBytes.equalsIdentityName(bytes, name, identity) { return .drop }
        }
        return .copy
    }

    /// Fields a `Connection` header may not remove: the request's own framing and
    /// routing, its credentials, and everything the gateway sets itself.
    func protectedFromConnection(_ bytes: UnsafeRawBufferPointer, _ token: Range<Int>) -> Bool {
        HTTPBytes.equalsCaseInsensitive(bytes, token, "host")
            || HTTPBytes.equalsCaseInsensitive(bytes, token, "content-length")
            || HTTPBytes.equalsCaseInsensitive(bytes, token, "transfer-encoding")
            || HTTPBytes.equalsCaseInsensitive(bytes, token, "authorization")
            || HTTPBytes.equalsCaseInsensitive(bytes, token, "cookie")
    }

    static let xRequestId = Array("x-request-id".utf8)
    // Fields apps and frameworks trust to name the client, the URL or the method (IIS and
    // Symfony read X-Original-URL / X-Rewrite-URL, Express and Rails method overrides, nginx
    // setups X-Real-IP): a client's never reaches an upstream.
    static let xRealIP = Array("x-real-ip".utf8)
    static let xRewriteURL = Array("x-rewrite-url".utf8)
    static let xHTTPMethod = Array("x-http-method".utf8)
    static let xOriginalURL = Array("x-original-url".utf8)
    static let xOriginalHost = Array("x-original-host".utf8)
    static let xMethodOverride = Array("x-method-override".utf8)
    static let xHTTPMethodOverride = Array("x-http-method-override".utf8)
    static let xForwardedFor = Array("x-forwarded-for".utf8)
    static let xForwardedHost = Array("x-forwarded-host".utf8)
    static let xForwardedProto = Array("x-forwarded-proto".utf8)
}
