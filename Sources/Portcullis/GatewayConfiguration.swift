import PortcullisSessions
import Logging
import PortcullisEdgeAuth
import PortcullisHTTP
import PortcullisIO
import PortcullisProxy
import PortcullisRateLimit
import PortcullisRedis
import PortcullisStore
import PortcullisTLS

/// The whole gateway configuration, validated. Built by `ConfigurationLoader`
/// from YAML; see `Config/portcullis.yaml` for every key with its default.
public struct GatewayConfiguration: Sendable {
    public struct Listen: Sendable {
        public var address: SocketAddress
        /// TLS termination (`listen[].tls`); nil: plain TCP.
        public var tls: TLSServerSettings?
        /// `redirect_https: true`: answer every request with 308 to https://<host><target>.
        public var redirectHTTPS = false
        /// `h2c: true`: a plain listener also takes HTTP/2 with prior knowledge.
        public var h2c = false
        /// `http2:` settings, for h2 (ALPN) and h2c alike.
        public var http2 = HTTP2Settings()
        /// HTTP/2 is offered: `h2` in `tls.alpn`, or `h2c` on a plain listener.
        public var offersHTTP2: Bool { tls.map { $0.alpn.contains("h2") } ?? h2c }
        public init(address: SocketAddress, tls: TLSServerSettings? = nil, redirectHTTPS: Bool = false) {
            self.address = address
            self.tls = tls
            self.redirectHTTPS = redirectHTTPS
        }
    }
    public struct Admin: Sendable {
        public var address: SocketAddress
        /// Bearer token for admin endpoints other than /healthz and /readyz (nil: those endpoints are off).
        public var token: String?
        /// `GET /metrics` without the token (for scrapers on a trusted network).
        public var metricsPublic = false
    }
    public enum AccessLogTarget: Sendable, Equatable {
        case off, stdout, stderr, file(String)
    }

    public var file: String
    /// SHA-256 (hex) of the file's text as loaded: `/readyz` and reload verdicts show it.
    public var sha256 = ""
    public var listen: [Listen]
    public var admin: Admin?
    /// Event loops (serial queues); 0 in the file means one per core.
    public var workers: Int
    public var logLevel: Logger.Level
    public var accessLog: AccessLogTarget
    public var shutdown = ShutdownSettings()
    public var proxy: ProxyConfiguration
    /// Credential providers, in the order they are tried.
    public var providers: [ProviderSettings] = []
    /// Auth settings of each route, by position in `proxy.routes`.
    public var routeAuth: [RouteAuthSettings] = []
    public var identity = IdentitySettings()
    public var keyRefresh = KeyRefreshSettings()
    /// Verified-token cache size (`token_cache.max_entries`); 0 verifies every request.
    public var tokenCacheEntries = 16_384
    public var store = StoreSettings()
    /// `sessions:` (nil: off). Its routes and the `session` provider are in `proxy.routes`
    /// and `providers` (positions in `sessionRoutes`); the runtime attaches their handlers.
    public var sessions: SessionSettings?
    /// Where each session endpoint sits in `proxy.routes`.
    public var sessionRoutes: [(index: Int, kind: SessionRouteKind)] = []
    /// `demo: true`: a demo file, whose shipped placeholder secrets are accepted
    /// (`check-config` says so in a warning).
    public var demo = false
    /// `certificate_check`: how often the certificate files are compared with the ones
    /// loaded, a change reloading them (default 60 s; nil: `off`).
    public var certificateCheckInterval: Double? = 60
    /// `rate_limits:` (none by default).
    public var rateLimits = RateLimitSettings()
}

/// Which session endpoint a route is.

extension GatewayConfiguration {
    /// What the edge-auth policy (`EdgeAuthenticator`) is made from.
    public var edgeAuth: EdgeAuthConfiguration {
        EdgeAuthConfiguration(proxy: proxy, routeAuth: routeAuth, identity: identity,
                              sessionCookies: providers.map { ($0.configuration.name, $0.sessionCookieNames) })
    }
}

/// What SIGTERM does (`shutdown:`). At once: `/readyz` answers 503 and the gateway keeps
/// serving, for `drain_delay`, so load balancers and Kubernetes endpoints take it out of
/// rotation before anything is refused (oauth2-proxy #3066 is the complaint this answers).
/// Then it stops accepting, sends GOAWAY on HTTP/2 and closes idle keep-alive connections,
/// and in-flight requests get `grace` to finish. A second SIGTERM or SIGINT during the delay
/// ends the delay. `drain_delay` is 0 by default (a developer's Ctrl-C stops at once); the
/// Kubernetes and Compose files under `deploy/` set 5 s.
public struct ShutdownSettings: Sendable, Equatable {
    public var drainDelay: Double = 0
    public var grace: Double = 10
    public init() {}
}

/// What `/readyz` waits for at start (`keys.prefetch`): `required` (the default): every
/// provider whose keys come from a URL has had keys installed once (fetched, or read from
/// the shared cache), so a rolling deploy never routes to an instance that would refuse
/// valid tokens; `best_effort`: every provider's first attempt finished, success or not.
public enum KeyPrefetch: String, Sendable, Equatable {
    case required
    case bestEffort = "best_effort"
}

/// How fetched key sets (`jwks_url` and the Google/Apple/Firebase defaults) are refreshed.
public struct KeyRefreshSettings: Sendable {
    /// One fetch, connect to last byte.
    public var fetchTimeout: Double = 5
    /// `Cache-Control: max-age` is clamped to [minimumTTL, maximumTTL].
    public var minimumTTL: Double = 300
    public var maximumTTL: Double = 86_400
    /// An unknown `kid` refetches at most this often per provider, across instances.
    public var minimumRefetchInterval: Double = 30
    /// While the key host fails, the last good keys are kept this long past their expiry.
    public var serveStaleFor: Double = 86_400
    /// `keys.prefetch`: what readiness waits for at start.
    public var prefetch = KeyPrefetch.required
    public init() {}
}

/// Shared state: embedded (default) or Redis, and the revocation policy.
public struct StoreSettings: Sendable {
    /// `redis://[user][:password]@host:port/db`; nil with no sentinel → embedded store.
    public var redisURL: String?
    /// `store.password` / `store.username`: Redis's AUTH, beside the URL (wins over the URL's).
    public var redisPassword: String?
    public var redisUsername: String?
    /// `store.sentinel.password`: the sentinels' own AUTH.
    public var sentinelPassword: String?
    public var sentinelMaster: String?
    public var sentinelAddresses: [SocketAddress] = []
    /// `store.cluster.nodes`: seed nodes of a Redis Cluster (any reachable one will do: the
    /// slot map is read from it).
    public var clusterNodes: [SocketAddress] = []
    /// `store.tls`: TLS settings for Redis (rediss:// turns TLS on by itself).
    public var redisTLS: RedisConfiguration.TLS?
    /// How long the last synchronized revocation view is trusted while Redis is unreachable.
    public var maxStaleness: Double = 30
    /// After `maxStaleness`: true → 503 for authenticated requests, false → allow.
    public var denyWhenUnavailable = true
    /// `store.state_dir`: the embedded store keeps its revocations here across restarts
    /// (nil: in memory only, said once at start). Unused with Redis.
    public var stateDirectory: String?
    public init() {}
    public var usesRedis: Bool { redisURL != nil || sentinelMaster != nil || !clusterNodes.isEmpty }

    /// `revocation:` as the stores apply it.
    public var policy: RevocationPolicy { RevocationPolicy(maxStaleness: maxStaleness, denyWhenUnavailable: denyWhenUnavailable) }

    /// What a reload would change about the store itself (its kind, place, credentials or
    /// TLS), named for the refusal; nil when only the `revocation:` policy differs.
    public func identityChange(from old: StoreSettings) -> String? {
        if usesRedis != old.usesRedis { return "the store kind (embedded or Redis)" }
        if stateDirectory != old.stateDirectory { return "store.state_dir" }
        if redisURL != old.redisURL { return "store.redis" }
        if redisPassword != old.redisPassword || redisUsername != old.redisUsername { return "store.password (or username)" }
        if sentinelPassword != old.sentinelPassword { return "store.sentinel.password" }
        if sentinelMaster != old.sentinelMaster || sentinelAddresses.map(\.description) != old.sentinelAddresses.map(\.description) {
            return "store.sentinel"
        }
        if clusterNodes.map(\.description) != old.clusterNodes.map(\.description) { return "store.cluster" }
        if String(describing: redisTLS) != String(describing: old.redisTLS) { return "store.tls" }
        return nil
    }
}

extension GatewayConfiguration {
    /// Every certificate file this configuration serves or presents, for `certificate_check`.
    var certificateFiles: CertificateFiles {
        var files: [String] = []
        for listen in listen {
            for pair in listen.tls?.certificates ?? [] { files += [pair.certificate, pair.privateKey] }
        }
        for upstream in proxy.upstreams {
            files += [upstream.clientCertificate?.certificate, upstream.clientCertificate?.key, upstream.caFile].compactMap { $0 }
        }
        return CertificateFiles(files)
    }
}
