import Foundation
import Logging
import PortcullisAuth
import PortcullisRedis
import PortcullisHTTP
import PortcullisIO
import PortcullisProxy
import PortcullisRateLimit
import PortcullisTLS
import PortcullisEdgeAuth
import PortcullisSessions
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
        // `demo: true` first: it decides whether the placeholder secrets are accepted.
        let demo = try top.optional("demo")?.bool() ?? false
        top.placeholdersAllowed = demo

        // Each section is read by its own function (ConfigurationLoader+<Section>.swift). A
        // section's error is noted and reading goes on with its default, so one run names every
        // error (`haproxy -c`); a section that needs another (routes need the upstreams and the
        // providers) is read only when that one was fine, so no error is a consequence of another.
        var errors: [ConfigurationError] = []
        func read<T>(_ fallback: @autoclosure () -> T, _ body: () throws(ConfigurationError) -> T) -> T {
            do { return try body() } catch {
                errors.append(contentsOf: error.all)
                return fallback()
            }
        }
        let defaultListen: [GatewayConfiguration.Listen] = [.init(address: try! SocketAddress(parsing: "127.0.0.1:8080"))]
        let listenNode = try top.optional("listen")
        let listen = read(defaultListen) { () throws(ConfigurationError) in
            guard let node = listenNode else { return defaultListen }
            let listen = try node.sequence().map { item throws(ConfigurationError) in try Self.listener(item) }
            if listen.isEmpty { throw top.error("needs at least one address", key: "listen") }
            return listen
        }
        let adminNode = try top.optional("admin")
        let admin: GatewayConfiguration.Admin? = read(nil) { () throws(ConfigurationError) in try Self.admin(adminNode) }
        read(()) { () throws(ConfigurationError) in
            try Self.checkPortClashes(listen: listen, admin: admin, listenNode: listenNode, adminNode: adminNode, file: file)
        }
        let workersNode = try top.optional("workers")
        let workers = read(0) { () throws(ConfigurationError) in try workersNode?.int(min: 0, max: 256) ?? 0 }
        let logLevelNode = try top.optional("log_level")
        let logLevel = read(.info) { () throws(ConfigurationError) in try Self.logLevel(logLevelNode) }
        let accessLogNode = try top.optional("access_log")
        let (accessLog, accessLogFields) = read((.stdout, .all)) { () throws(ConfigurationError) in try Self.accessLog(accessLogNode) }
        let limitsNode = try top.optional("limits")
        let limits = read(.default) { () throws(ConfigurationError) in try Self.limits(limitsNode) }
        let timeoutsNode = try top.optional("timeouts")
        let (timeouts, timeoutsGrace) = read((ClientTimeouts(), nil)) { () throws(ConfigurationError) in try Self.timeouts(timeoutsNode) }
        let shutdownNode = try top.optional("shutdown")
        let shutdown = read(ShutdownSettings()) { () throws(ConfigurationError) in try Self.shutdown(shutdownNode, timeoutsGrace: timeoutsGrace) }
        let trustedNode = try top.optional("trusted_proxies")
        let trusted: [CIDR] = read([]) { () throws(ConfigurationError) in try Self.trustedProxies(trustedNode) }
        var upstreamsFine = true, providersFine = true
        let upstreamsNode = try top.optional("upstreams")
        if upstreamsNode == nil { upstreamsFine = false; errors.append(top.error("is required", key: "upstreams")) }
        let upstreams: [UpstreamConfiguration] = read([]) { () throws(ConfigurationError) in
            guard let upstreamsNode else { return [] }
            do throws(ConfigurationError) { return try Self.upstreams(upstreamsNode) } catch { upstreamsFine = false; throw error }
        }
        let providersNode = try top.optional("providers")
        var providers: [ProviderSettings] = read([]) { () throws(ConfigurationError) in
            guard let providersNode else { return [] }
            var providerErrors: [ConfigurationError] = []
            do throws(ConfigurationError) {
                let good = try Self.providers(providersNode, errors: &providerErrors)
                if !providerErrors.isEmpty { providersFine = false; errors += providerErrors }
                return good
            } catch {
                providersFine = false
                throw error
            }
        }
        let keysNode = try top.optional("keys")
        let keyRefresh = read(try! Self.keyRefresh(nil)) { () throws(ConfigurationError) in try Self.keyRefresh(keysNode) }
        let tokenCacheNode = try top.optional("token_cache")
        let tokenCacheEntries = read(try! Self.tokenCacheEntries(nil)) { () throws(ConfigurationError) in try Self.tokenCacheEntries(tokenCacheNode) }
        let storeNode = try top.optional("store"), revocationNode = try top.optional("revocation")
        let store = read(StoreSettings()) { () throws(ConfigurationError) in try Self.store(storeNode, revocation: revocationNode) }
        let identityNode = try top.optional("identity")
        let identity = read(try! Self.identity(nil)) { () throws(ConfigurationError) in try Self.identity(identityNode) }
        let certificateCheckNode = try top.optional("certificate_check")
        let certificateCheck: Double? = read(60) { () throws(ConfigurationError) in
            guard let node = certificateCheckNode else { return 60 }
            if case .scalar = node.node, try node.string() == "off" { return nil }
            let seconds = try node.duration()
            guard seconds >= 1 else { throw node.error("at least 1s (or off)") }
            return seconds
        }
        let tracingNode = try top.optional("tracing")
        let tracing: TracingSettings? = read(nil) { () throws(ConfigurationError) in try Self.tracing(tracingNode) }
        let sessionsNode = try top.optional("sessions")
        let rateLimitsNode = try top.optional("rate_limits")
        let routesNode = try top.optional("routes")
        if routesNode == nil { errors.append(top.error("is required", key: "routes")) }
        do { try top.finish() } catch { errors.append(error) }
        // The routes are checked against every upstream and provider the file declares (a bad
        // one was reported above; a route naming it is not an error of its own); `sessions`,
        // which needs the real ones, only when those sections were fine.
        let declaredUpstreams = Set(((try? upstreamsNode?.entries()) ?? []).map(\.0))
        // Each provider item's name (nil: none readable), in the file's order.
        let providerItems = (try? providersNode?.sequence()) ?? []
        let providerItemNames = providerItems.map { item -> String? in
            var item = item
            return try? item.optional("name")?.string()
        }
        var declaredProviders = Set(providerItemNames.compactMap { $0 })
        let sessions: SessionSettings? = !(upstreamsFine && providersFine) ? nil : read(nil) { () throws(ConfigurationError) in
            let sessions = try Self.sessions(sessionsNode, providers: providers, upstreams: upstreams)
            if let sessionsNode, let sessions, store.usesRedis, sessions.signingKeyFiles.isEmpty {
                throw sessionsNode.error("access_token.signing_keys is required with store.redis, store.sentinel or store.cluster: every instance signs "
                                         + "and verifies the access tokens with the same keys", key: "access_token.signing_keys")
            }
            return sessions
        }
        if let sessions {
            // The exchange compares the ID token's nonce with the one its client sends.
            for i in providers.indices where sessions.accept.contains(providers[i].configuration.name)
                && !providers[i].configuration.forwardedClaims.contains("nonce") {
                providers[i].configuration.forwardedClaims.append("nonce")
            }
            providers.append(Self.sessionProvider(sessions))
        }
        if sessions != nil || sessionsNode != nil && !(upstreamsFine && providersFine) {
            declaredProviders.insert(SessionSettings.providerName)
        }
        guard let routesNode else { throw Self.combined(errors) }
        var (routes, routeAuth): ([RouteConfiguration], [RouteAuthSettings]) = read(([], [])) { () throws(ConfigurationError) in
            try Self.routes(routesNode, file: file, upstreamNames: declaredUpstreams,
                            providerNames: providersFine ? Set(providers.map(\.configuration.name)) : declaredProviders)
        }
        let routeLines = (try? routesNode.sequence().map(\.line)) ?? []
        // The lookup hook is the gateway's alone: no client request reaches it through a route.
        if let hook = sessions?.lookup {
            for i in routes.indices where routes[i].upstream == hook.upstream { routes[i].privatePaths.append(hook.path) }
        }
        let sessionRoutes: [(index: Int, kind: SessionRouteKind)] = errors.isEmpty ? read([]) { () throws(ConfigurationError) in
            try sessions.map { settings throws(ConfigurationError) in
                try Self.addSessionRoutes(settings, routes: &routes, routeAuth: &routeAuth, errorBody: identity.settings.errorBody,
                                          file: file, routeLines: routeLines, pathsLine: sessionsNode?.line)
            } ?? []
        } : []
        // Every provider rule and inline key checked now, each provider on its own (one run
        // names each bad one).
        for provider in providers where provider.configuration.name != SessionSettings.providerName {
            do { _ = try CredentialVerifier(providers: [provider.configuration], keys: [provider].inlineKeys) } catch {
                let position = providerItemNames.firstIndex(of: provider.configuration.name)
                errors.append(ConfigurationError(file: file, key: position.map { "providers[\($0)]" } ?? "providers",
                                                 line: position.map { providerItems[$0].line } ?? providersNode?.line,
                                                 reason: error.description))
            }
        }
        // Rules name routes by path, the session endpoints' included.
        let rateLimits = errors.isEmpty ? read(RateLimitSettings()) { () throws(ConfigurationError) in
            try Self.rateLimits(rateLimitsNode, routes: routes)
        } : RateLimitSettings()
        if !errors.isEmpty { throw Self.combined(errors) }

        // Claims the gateway reads (headers, route rules, rate-limit keys) are forwarded by every provider.
        let limitClaims = rateLimits.rules.compactMap { rule -> String? in
            if case .claim(let name) = rule.key { return name }
            return nil
        }
        let neededClaims = Set(identity.claimHeaders.map(\.claim) + routeAuth.flatMap { $0.requiredClaims.map(\.claim) } + limitClaims)
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
        proxy.accessLogFields = accessLogFields
        proxy.limits = limits
        proxy.timeouts = timeouts
        proxy.trustedProxies = trusted
        proxy.userIdHeader = identity.userIdHeader
        proxy.providerHeader = identity.providerHeader
        proxy.claimHeaders = identity.claimHeaders
        proxy.realm = identity.realm
        proxy.assertionHeader = identity.settings.assertion?.header
        proxy.tracing = tracing
        // Injected headers and secret headers may not share a name in any spelling.
        var injected = Set(([identity.userIdHeader, identity.providerHeader] + identity.claimHeaders.map(\.header))
            .map(HTTPBytes.identityName))
        if let header = proxy.assertionHeader, !injected.insert(HTTPBytes.identityName(header)).inserted {
            throw ConfigurationError(file: file, key: "identity.assertion.header", line: nil,
                                     reason: "\(header) is already an identity header; the assertion needs its own")
        }
        for upstream in upstreams {
            for header in upstream.requestHeaders where injected.contains(HTTPBytes.identityName(header.name)) {
                throw ConfigurationError(file: file, key: "upstreams.\(upstream.name).request_headers.\(header.name)", line: nil,
                                         reason: "the gateway injects this header itself (identity)")
            }
        }
        return GatewayConfiguration(file: file, sha256: SHA256Hex.of(Array(text.utf8)), listen: listen, admin: admin,
                                    workers: workers, logLevel: logLevel, accessLog: accessLog, shutdown: shutdown,
                                    proxy: proxy, providers: providers, routeAuth: routeAuth, identity: identity.settings,
                                    keyRefresh: keyRefresh, tokenCacheEntries: tokenCacheEntries, store: store,
                                    sessions: sessions, sessionRoutes: sessionRoutes, demo: demo,
                                    certificateCheckInterval: certificateCheck, rateLimits: rateLimits)
    }

    /// Every error of one reading as one thrown error (the first, with the others in `more`).
    static func combined(_ errors: [ConfigurationError]) -> ConfigurationError {
        var first = errors[0]
        first.more = Array(errors.dropFirst())
        return first
    }

    /// Two listeners (or a listener and the admin listener) on one port of one address, or
    /// one of them on the wildcard address of that port: the second bind would fail at start
    /// ("address in use"), so it is an error here, naming both (as `haproxy -c` does).
    static func checkPortClashes(listen: [GatewayConfiguration.Listen], admin: GatewayConfiguration.Admin?,
                                 listenNode: ConfigNode?, adminNode: ConfigNode?, file: String) throws(ConfigurationError) {
        var taken: [(address: SocketAddress, name: String)] = listen.enumerated().map { ($1.address, "listen[\($0)]") }
        if let admin { taken.append((admin.address, "admin")) }
        func wildcard(_ a: SocketAddress) -> Bool { a.host == "0.0.0.0" || a.host == "::" }
        for i in taken.indices {
            for j in taken.indices where j > i {
                let (a, b) = (taken[i].address, taken[j].address)
                guard a.port == b.port, a.port != 0, a.host == b.host || wildcard(a) || wildcard(b) else { continue }
                let line = taken[j].name == "admin" ? adminNode?.line : listenNode?.line
                throw ConfigurationError(file: file, key: taken[j].name, line: line,
                                         reason: "\(b) is already \(taken[i].name)'s (\(a)): two listeners cannot share a port")
            }
        }
    }

    // MARK: Value helpers

    static func socketAddress(_ node: ConfigNode) throws(ConfigurationError) -> SocketAddress {
        let text = try node.string()
        do { return try SocketAddress(parsing: text) } catch { throw node.error(error.description) }
    }

    static func headerName(_ node: ConfigNode) throws(ConfigurationError) -> String {
        let name = try node.string()
        guard isHeaderName(name) else { throw node.error("'\(name)' is not a valid header name") }
        return name
    }

    /// A field name is a token (RFC 9110 §5.1).
    static func isHeaderName(_ name: String) -> Bool {
        let tchar = Set("!#$%&'*+-.^_`|~".utf8)
        return !name.isEmpty && name.utf8.allSatisfy { ($0 >= 0x30 && $0 <= 0x39) || ($0 | 0x20 >= 0x61 && $0 | 0x20 <= 0x7A) || tchar.contains($0) }
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
