import PortcullisHTTP
import PortcullisIO
import PortcullisTLS

/// Whether a route needs a verified credential.
public enum AuthMode: String, Sendable, CaseIterable {
    /// A valid credential is required; without one the gateway answers 401.
    case required
    /// A valid credential injects identity; none passes without; an invalid one is refused.
    case optional
    /// No verification; identity headers are still stripped from the client request.
    case none
}

/// One route: requests whose normalized path starts with `pathPrefix` (on a segment
/// boundary) and, when set, whose Host equals `host`, go to `upstream`.
public struct RouteConfiguration: Sendable {
    public var pathPrefix: String
    public var host: String?
    public var upstream: String
    public var auth: AuthMode
    /// Remove `pathPrefix` before forwarding ("/api/visits/1" → "/1").
    public var stripPrefix: Bool
    /// Providers this route accepts (nil: every configured provider).
    public var providers: [String]?
    /// Set: the gateway answers the route itself after authentication (`upstream` is then
    /// only a label for logs and metrics).
    public var handler: (any RouteHandler)?
    /// Paths of the upstream only the gateway itself asks (the sessions lookup hook): a
    /// client request this route would forward to one of them (after `strip_prefix`, on a
    /// segment boundary, in any letter case) is answered 404, as an unrouted path.
    public var privatePaths: [String] = []
    public init(pathPrefix: String, host: String? = nil, upstream: String, auth: AuthMode,
                stripPrefix: Bool = false, providers: [String]? = nil) {
        self.pathPrefix = pathPrefix
        self.host = host
        self.upstream = upstream
        self.auth = auth
        self.stripPrefix = stripPrefix
        self.providers = providers
    }
}

/// Which `Host` an upstream receives.
public enum HostHeaderMode: String, Sendable, CaseIterable {
    /// The client's `Host` (the default: apps that route by the public name).
    case client
    /// The upstream URL's own authority: hosted platforms (Vercel, Fly.io, Cloud Run)
    /// route by their name, so they need it; the client's goes in `X-Forwarded-Host`.
    case upstream
}

/// One upstream app, reached over pooled keep-alive HTTP/1.1 connections, plain or TLS.
public struct UpstreamConfiguration: Sendable, Equatable {
    public var name: String
    public var url: UpstreamURL
    /// Total connection cap across all loops (each loop gets an equal share, at least 1).
    public var maxConnections: Int
    /// Requests that may wait for a connection across all loops; beyond it: 503.
    public var maxPending: Int
    public var connectTimeout: Double
    public var responseTimeout: Double
    /// How long an unused pooled connection is kept.
    public var idleTimeout: Double
    /// PEM roots an `https://` upstream is verified against (nil: the system store).
    public var caFile: String?
    public var hostHeader: HostHeaderMode = .client
    /// A host name is resolved again this often (and after a connect failure).
    public var resolveInterval: Double = 30
    /// Set on every request to this upstream (a platform's secret header: Vercel's
    /// protection bypass, Cloudflare Access service tokens). Values are secrets: never
    /// logged or shown; the client's copies of these names are removed on every route.
    public var requestHeaders: [SecretHeader] = []
    /// A client certificate (PEM chain) and its key for an `https://` upstream that
    /// checks client certificates (mutual TLS); reloaded on SIGHUP.
    public var clientCertificate: ClientCertificateFiles?
    public init(name: String, url: UpstreamURL, maxConnections: Int = 256, maxPending: Int = 1024,
                connectTimeout: Double = 2, responseTimeout: Double = 30, idleTimeout: Double = 60) {
        self.name = name
        self.url = url
        self.maxConnections = maxConnections
        self.maxPending = maxPending
        self.connectTimeout = connectTimeout
        self.responseTimeout = responseTimeout
        self.idleTimeout = idleTimeout
    }

    /// A plain-HTTP upstream at a fixed address.
    public init(name: String, address: SocketAddress, maxConnections: Int = 256, maxPending: Int = 1024,
                connectTimeout: Double = 2, responseTimeout: Double = 30, idleTimeout: Double = 60) {
        self.init(name: name, url: UpstreamURL(address: address), maxConnections: maxConnections, maxPending: maxPending,
                  connectTimeout: connectTimeout, responseTimeout: responseTimeout, idleTimeout: idleTimeout)
    }
}

/// A header field whose value is a secret (an upstream's `request_headers`, `tracing.headers`):
/// `description` never shows the value.
public struct SecretHeader: Sendable, Equatable, CustomStringConvertible {
    public var name: String
    public var value: String
    public init(name: String, value: String) {
        self.name = name
        self.value = value
    }
    public var description: String { "\(name): <secret>" }
}

/// Client-side timeouts, in seconds.
public struct ClientTimeouts: Sendable {
    /// From the first byte of a request to the end of its head.
    public var header: Double = 10
    /// Between requests on a keep-alive connection.
    public var idle: Double = 60
    /// Between two reads of a request body.
    public var body: Double = 30
    /// How long a client that stopped reading a response gets to take bytes again
    /// (nginx's `send_timeout`); then the connection is closed.
    public var send: Double = 60
    public init() {}
}

/// An IPv4/IPv6 network in CIDR notation, for trusted proxies.
public struct CIDR: Sendable, Equatable, CustomStringConvertible {
    public let bytes: [UInt8]
    public let prefixLength: Int
    public let description: String

    public init?(_ text: String) {
        let parts = text.split(separator: "/", maxSplits: 1)
        let host = String(parts[0])
        guard let address = try? SocketAddress(parsing: host.contains(":") ? "[\(host)]:0" : "\(host):0") else { return nil }
        bytes = address.addressBytes
        if parts.count == 2 {
            guard let p = Int(parts[1]), p >= 0, p <= bytes.count * 8 else { return nil }
            prefixLength = p
        } else {
            prefixLength = bytes.count * 8
        }
        description = text
    }

    public func contains(_ address: [UInt8]) -> Bool {
        guard address.count == bytes.count else { return false }
        var remaining = prefixLength
        var i = 0
        while remaining > 0 {
            let maskBits = min(8, remaining)
            let mask: UInt8 = maskBits == 8 ? 0xFF : ~(0xFF >> UInt8(maskBits))
            if address[i] & mask != bytes[i] & mask { return false }
            remaining -= maskBits
            i += 1
        }
        return true
    }
}

/// Everything the proxy needs at run time, built once from the configuration file.
public struct ProxyConfiguration: Sendable {
    public var routes: [RouteConfiguration]
    public var upstreams: [UpstreamConfiguration]
    public var limits: HTTPLimits = .default
    /// `access_log: {fields: […]}`: the members each access log line carries.
    public var accessLogFields: AccessLogFields = .all
    public var timeouts = ClientTimeouts()
    /// Peers whose X-Forwarded-*/Forwarded/X-Request-Id are believed.
    public var trustedProxies: [CIDR] = []
    /// The header that carries the verified user id to upstreams.
    public var userIdHeader: String = "X-User-Id"
    /// Claim → header name for claims injected to upstreams.
    public var claimHeaders: [(claim: String, header: String)] = []
    /// The header naming the provider that verified the credential.
    public var providerHeader: String = "X-Auth-Provider"
    /// The header carrying the signed identity assertion (nil: none is sent).
    public var assertionHeader: String?
    /// `realm` of WWW-Authenticate challenges.
    public var realm: String = "portcullis"
    /// `tracing:` (nil: off; client `traceparent`/`tracestate` then pass through untouched).
    public var tracing: TracingSettings?
    public init(routes: [RouteConfiguration], upstreams: [UpstreamConfiguration]) {
        self.routes = routes
        self.upstreams = upstreams
    }

    /// Every header name the gateway may inject, and every upstream's secret header
    /// names: stripped from every client request, under any spelling.
    public var identityHeaderNames: [String] {
        [userIdHeader, providerHeader] + claimHeaders.map(\.header) + (assertionHeader.map { [$0] } ?? [])
            + upstreams.flatMap { $0.requestHeaders.map(\.name) }
    }
}
