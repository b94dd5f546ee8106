import Foundation
import Logging
import PortcullisAuth
import PortcullisRedis
import PortcullisHTTP
import PortcullisIO
import PortcullisProxy
import PortcullisTLS
import Yams

/// Reads and validates a YAML configuration file. Every key, its default and its
/// meaning are listed in `Config/portcullis.yaml`. Unknown keys, missing required
/// keys, bad values and unset `${VARS}` are errors naming file, line and key.
public enum ConfigurationLoader {
    public static func load(file: String, environment: [String: String] = ProcessInfo.processInfo.environment)
        throws(ConfigurationError) -> GatewayConfiguration {
        let text: String
        do {
            text = try String(contentsOfFile: file, encoding: .utf8)
        } catch {
            throw ConfigurationError(file: file, key: "", reason: "cannot read the file (\(error.localizedDescription))")
        }
        return try parse(text, file: file, environment: environment)
    }

    public static func parse(_ text: String, file: String, environment: [String: String] = [:])
        throws(ConfigurationError) -> GatewayConfiguration {
        let root: Node
        do {
            guard let node = try Yams.compose(yaml: text) else {
                throw ConfigurationError(file: file, key: "", reason: "the file is empty")
            }
            root = node
        } catch let error as ConfigurationError {
            throw error
        } catch let error as YamlError {
            throw ConfigurationError(file: file, key: "", reason: "invalid YAML: \(error)")
        } catch {
            throw ConfigurationError(file: file, key: "", reason: "invalid YAML: \(error)")
        }
        var top = ConfigNode(node: root, path: "", file: file, environment: environment)
        _ = try top.mapping()

        // listen
        var listen: [GatewayConfiguration.Listen] = []
        if let node = try top.optional("listen") {
            for item in try node.sequence() { listen.append(try Self.listener(item)) }
        } else {
            listen = [.init(address: try! SocketAddress(parsing: "127.0.0.1:8080"))]
        }
        if listen.isEmpty { throw top.error("needs at least one address", key: "listen") }

        // admin
        var admin: GatewayConfiguration.Admin? = .init(address: try! SocketAddress(parsing: "127.0.0.1:9901"), token: nil)
        if var node = try top.optional("admin") {
            if case .scalar = node.node, try node.string() == "off" {
                admin = nil
            } else {
                let address = try node.optional("address").map { n throws(ConfigurationError) in try socketAddress(n) }
                    ?? (try! SocketAddress(parsing: "127.0.0.1:9901"))
                var token = try node.optional("token")?.string()
                if token?.isEmpty == true { token = nil }
                if let t = token, t.utf8.count < 16 {
                    throw node.error("must be at least 16 characters", key: "token")
                }
                let metricsPublic = try node.optional("metrics_public")?.bool() ?? false
                admin = .init(address: address, token: token, metricsPublic: metricsPublic)
                try node.finish()
            }
        }

        let workers = try top.optional("workers")?.int(min: 0, max: 256) ?? 0

        var logLevel = Logger.Level.info
        if let node = try top.optional("log_level") {
            let text = try node.string()
            guard let level = Logger.Level(rawValue: text) else {
                throw node.error("expected one of trace, debug, info, notice, warning, error, critical; got '\(text)'")
            }
            logLevel = level
        }

        var accessLog = GatewayConfiguration.AccessLogTarget.stdout
        if let node = try top.optional("access_log") {
            switch try node.string() {
            case "off": accessLog = .off
            case "stdout": accessLog = .stdout
            case "stderr": accessLog = .stderr
            case let path where path.hasPrefix("/"): accessLog = .file(path)
            case let other: throw node.error("expected off, stdout, stderr or an absolute path; got '\(other)'")
            }
        }

        // limits
        var limits = HTTPLimits.default
        if var node = try top.optional("limits") {
            if let n = try node.optional("max_request_line") { limits.maxRequestLineBytes = try positiveSize(n) }
            if let n = try node.optional("max_header_bytes") { limits.maxHeaderBytes = try positiveSize(n) }
            if let n = try node.optional("max_header_count") { limits.maxHeaderCount = try n.int(min: 1, max: 10_000) }
            if let n = try node.optional("max_body_bytes") { limits.maxBodyBytes = try n.byteSize() }
            try node.finish()
        }

        // timeouts
        var timeouts = ClientTimeouts()
        var shutdownGrace = 10.0
        if var node = try top.optional("timeouts") {
            if let n = try node.optional("header") { timeouts.header = try positiveDuration(n) }
            if let n = try node.optional("idle") { timeouts.idle = try positiveDuration(n) }
            if let n = try node.optional("body") { timeouts.body = try positiveDuration(n) }
            if let n = try node.optional("shutdown_grace") { shutdownGrace = try n.duration() }
            try node.finish()
        }

        var trusted: [CIDR] = []
        if let node = try top.optional("trusted_proxies") {
            for item in try node.sequence() {
                let text = try item.string()
                guard let cidr = CIDR(text) else { throw item.error("'\(text)' is not an IP address or CIDR block") }
                trusted.append(cidr)
            }
        }

        // upstreams
        var upstreams: [UpstreamConfiguration] = []
        let upstreamsNode = try top.required("upstreams")
        for (name, value) in try upstreamsNode.entries() {
            var node = value
            guard !name.isEmpty, name.allSatisfy({ $0.isLetter || $0.isNumber || $0 == "_" || $0 == "-" }) else {
                throw node.error("upstream names use letters, digits, '-' and '_'")
            }
            let urlNode = try node.required("url")
            let url: UpstreamURL
            let text = try urlNode.string()
            do { url = try UpstreamURL(parsing: text) } catch { throw urlNode.error(error.description) }
            var upstream = UpstreamConfiguration(name: name, url: url)
            if let n = try node.optional("ca_file") {
                guard url.secure else { throw n.error("ca_file applies to https:// upstreams only") }
                let path = try n.string()
                do { _ = try TLSClientContext(caFile: path) } catch { throw n.error(error.description) }
                upstream.caFile = path
            }
            if let n = try node.optional("host_header") {
                let text = try n.string()
                guard let mode = HostHeaderMode(rawValue: text) else { throw n.error("expected client or upstream, got '\(text)'") }
                upstream.hostHeader = mode
            }
            if let n = try node.optional("resolve_interval") { upstream.resolveInterval = try positiveDuration(n) }
            if let n = try node.optional("max_connections") { upstream.maxConnections = try n.int(min: 1, max: 100_000) }
            if let n = try node.optional("max_pending") { upstream.maxPending = try n.int(min: 0, max: 1_000_000) }
            if let n = try node.optional("connect_timeout") { upstream.connectTimeout = try positiveDuration(n) }
            if let n = try node.optional("response_timeout") { upstream.responseTimeout = try positiveDuration(n) }
            if let n = try node.optional("idle_timeout") { upstream.idleTimeout = try positiveDuration(n) }
            try node.finish()
            upstreams.append(upstream)
        }
        if upstreams.isEmpty { throw upstreamsNode.error("needs at least one upstream") }

        // providers
        var providers: [ProviderSettings] = []
        var providersNode: ConfigNode?
        if let node = try top.optional("providers") {
            providersNode = node
            providers = try Self.providers(node)
        }
        let providerNames = Set(providers.map(\.configuration.name))

        // keys (refresh of fetched key sets)
        var keyRefresh = KeyRefreshSettings()
        if var node = try top.optional("keys") {
            if let n = try node.optional("fetch_timeout") { keyRefresh.fetchTimeout = try positiveDuration(n) }
            if let n = try node.optional("min_ttl") { keyRefresh.minimumTTL = try positiveDuration(n) }
            if let n = try node.optional("max_ttl") { keyRefresh.maximumTTL = try positiveDuration(n) }
            if let n = try node.optional("min_refetch_interval") { keyRefresh.minimumRefetchInterval = try positiveDuration(n) }
            if let n = try node.optional("serve_stale_for") { keyRefresh.serveStaleFor = try n.duration() }
            if keyRefresh.minimumTTL > keyRefresh.maximumTTL {
                throw node.error("min_ttl (\(keyRefresh.minimumTTL)s) exceeds max_ttl (\(keyRefresh.maximumTTL)s)", key: "min_ttl")
            }
            try node.finish()
        }

        // verified-token cache (Envoy's jwt_cache_config)
        var tokenCacheEntries = 16_384
        if var node = try top.optional("token_cache") {
            if let n = try node.optional("max_entries") { tokenCacheEntries = try n.int(min: 0, max: 10_000_000) }
            try node.finish()
        }

        // store and revocation
        var store = StoreSettings()
        if var node = try top.optional("store") {
            if let n = try node.optional("redis") {
                let url = try n.string()
                do { _ = try RedisConfiguration(url: url) } catch {
                    throw n.error("expected redis[s]://[user][:password]@host:port/db (\(error))")
                }
                store.redisURL = url
            }
            if var n = try node.optional("tls") {
                // TLS to Redis (and the sentinels): implied by rediss://, needed here only to
                // name a CA file or a server name, or for TLS with sentinel.
                var tls = RedisConfiguration.TLS()
                if let ca = try n.optional("ca_file") {
                    let path = try ca.string()
                    do { _ = try TLSClientContext(caFile: path) } catch { throw ca.error(error.description) }
                    tls.caFile = path
                }
                tls.serverName = try n.optional("server_name")?.string()
                try n.finish()
                store.redisTLS = tls
            }
            if var n = try node.optional("sentinel") {
                store.sentinelMaster = try n.required("master").string()
                let addresses = try n.required("addresses")
                store.sentinelAddresses = try addresses.sequence().map { item throws(ConfigurationError) in try socketAddress(item) }
                if store.sentinelAddresses.isEmpty { throw addresses.error("needs at least one sentinel address") }
                try n.finish()
            }
            try node.finish()
        }
        if var node = try top.optional("revocation") {
            if let n = try node.optional("max_staleness") { store.maxStaleness = try n.duration() }
            if let n = try node.optional("on_unavailable") {
                switch try n.string() {
                case "deny": store.denyWhenUnavailable = true
                case "allow": store.denyWhenUnavailable = false
                case let other: throw n.error("expected deny or allow, got '\(other)'")
                }
            }
            try node.finish()
        }

        // identity
        var identity = IdentitySettings()
        var userIdHeader = "X-User-Id"
        var providerHeader = "X-Auth-Provider"
        var claimHeaders: [(claim: String, header: String)] = []
        var realm = "portcullis"
        if var node = try top.optional("identity") {
            if let n = try node.optional("user_id_header") { userIdHeader = try headerName(n) }
            if let n = try node.optional("provider_header") { providerHeader = try headerName(n) }
            if let n = try node.optional("realm") {
                realm = try n.string()
                guard realm.utf8.allSatisfy({ $0 >= 0x20 && $0 < 0x7F && $0 != 0x22 && $0 != 0x5C }) else {
                    throw n.error("must be printable ASCII without quotes or backslashes")
                }
            }
            if let n = try node.optional("claims") {
                for (claim, value) in try n.entries() { claimHeaders.append((claim, try headerName(value))) }
            }
            if let n = try node.optional("prefix_provider") { identity.prefixProvider = try n.bool() }
            try node.finish()
        }

        // routes
    var routes: [RouteConfiguration] = []
        var routeAuth: [RouteAuthSettings] = []
        let routesNode = try top.required("routes")
        let upstreamNames = Set(upstreams.map(\.name))
        for item in try routesNode.sequence() {
            var node = item
            let pathNode = try node.required("path")
            let path = try pathNode.string()
            guard path.hasPrefix("/"), !path.contains("?"), !path.contains("#"), !path.contains("//"),
                  !path.split(separator: "/").contains(where: { $0 == "." || $0 == ".." }),
                  !path.contains("%"), !path.contains("\\") else {
                throw pathNode.error("must be a normalized path prefix starting with '/' (no '.', '..', '//', '%', '\\', '?', '#')")
            }
            let upstreamNode = try node.required("upstream")
            let upstream = try upstreamNode.string()
            guard upstreamNames.contains(upstream) else {
                throw upstreamNode.error("names no upstream (known: \(upstreamNames.sorted().joined(separator: ", ")))")
            }
            var auth = AuthMode.required
            if let n = try node.optional("auth") {
                let text = try n.string()
                guard let mode = AuthMode(rawValue: text) else { throw n.error("expected required, optional or none; got '\(text)'") }
                auth = mode
            }
            let host = try node.optional("host")?.string().lowercased()
            let strip = try node.optional("strip_prefix")?.bool() ?? false
            let (routeProviders, authSettings) = try Self.routeAuth(&node, providerNames: providerNames)
            try node.finish()
            routes.append(RouteConfiguration(pathPrefix: path, host: host, upstream: upstream, auth: auth,
                                             stripPrefix: strip, providers: routeProviders))
            routeAuth.append(authSettings)
        }
        if routes.isEmpty { throw routesNode.error("needs at least one route") }
        var seen = Set<String>()
        for (i, r) in routes.enumerated() {
            let key = "\(r.host ?? "*") \(r.pathPrefix)"
            if !seen.insert(key).inserted {
                throw ConfigurationError(file: file, key: "routes[\(i)].path", line: nil,
                                         reason: "duplicates an earlier route for the same host and path")
            }
        }

        try top.finish()

        // Claims the gateway reads (headers, route rules) are forwarded by every provider.
        let neededClaims = Set(claimHeaders.map(\.claim) + routeAuth.flatMap { $0.requiredClaims.map(\.claim) })
        for i in providers.indices {
            for claim in neededClaims.sorted() where !providers[i].configuration.forwardedClaims.contains(claim) {
                providers[i].configuration.forwardedClaims.append(claim)
            }
        }
        // Build the verifier once, so every provider rule and inline key is checked now.
        do {
            _ = try CredentialVerifier(providers: providers.map(\.configuration), keys: providers.inlineKeys)
        } catch {
            let index: Int? = {
                switch error {
                case .missingSetting(let name, _), .invalidSetting(let name, _, _), .key(let name, _), .duplicateProvider(let name),
                     .unknownProvider(let name):
                    return providers.firstIndex { $0.configuration.name == name }
                }
            }()
            throw ConfigurationError(file: file, key: index.map { "providers[\($0)]" } ?? "providers",
                                     line: providersNode?.line, reason: error.description)
        }

        var proxy = ProxyConfiguration(routes: routes, upstreams: upstreams)
        proxy.limits = limits
        proxy.timeouts = timeouts
        proxy.trustedProxies = trusted
        proxy.userIdHeader = userIdHeader
        proxy.providerHeader = providerHeader
        proxy.claimHeaders = claimHeaders
        proxy.realm = realm
        return GatewayConfiguration(file: file, listen: listen, admin: admin, workers: workers,
                                    logLevel: logLevel, accessLog: accessLog, shutdownGrace: shutdownGrace,
                                    proxy: proxy, providers: providers, routeAuth: routeAuth, identity: identity,
                                    keyRefresh: keyRefresh, tokenCacheEntries: tokenCacheEntries, store: store)
    }

    // MARK: Value helpers

    static func socketAddress(_ node: ConfigNode) throws(ConfigurationError) -> SocketAddress {
        let text = try node.string()
        do { return try SocketAddress(parsing: text) } catch { throw node.error(error.description) }
    }

    static func headerName(_ node: ConfigNode) throws(ConfigurationError) -> String {
        let name = try node.string()
        let tchar = Set("!#$%&'*+-.^_`|~".utf8)
        guard !name.isEmpty, name.utf8.allSatisfy({ ($0 >= 0x30 && $0 <= 0x39) || ($0 | 0x20 >= 0x61 && $0 | 0x20 <= 0x7A) || tchar.contains($0) }) else {
            throw node.error("'\(name)' is not a valid header name")
        }
        return name
    }

    static func positiveDuration(_ node: ConfigNode) throws(ConfigurationError) -> Double {
        let v = try node.duration()
        guard v > 0 else { throw node.error("must be greater than zero") }
        return v
    }

    static func positiveSize(_ node: ConfigNode) throws(ConfigurationError) -> Int {
        let v = try node.byteSize()
        guard v > 0 else { throw node.error("must be greater than zero") }
        return v
    }
}
