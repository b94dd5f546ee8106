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
        // `demo: true` first: it decides whether the placeholder secrets are accepted.
        let demo = try top.optional("demo")?.bool() ?? false
        top.placeholdersAllowed = demo

        // Each section is read by its own function (ConfigurationLoader+<Section>.swift).
        var listen: [GatewayConfiguration.Listen] = [.init(address: try! SocketAddress(parsing: "127.0.0.1:8080"))]
        if let node = try top.optional("listen") {
            listen = try node.sequence().map { item throws(ConfigurationError) in try Self.listener(item) }
            if listen.isEmpty { throw top.error("needs at least one address", key: "listen") }
        }
        let admin = try Self.admin(try top.optional("admin"))
        let workers = try top.optional("workers")?.int(min: 0, max: 256) ?? 0
        let logLevel = try Self.logLevel(try top.optional("log_level"))
        let (accessLog, accessLogFields) = try Self.accessLog(try top.optional("access_log"))
        let limits = try Self.limits(try top.optional("limits"))
        let (timeouts, timeoutsGrace) = try Self.timeouts(try top.optional("timeouts"))
        let shutdown = try Self.shutdown(try top.optional("shutdown"), timeoutsGrace: timeoutsGrace)
        let trusted = try Self.trustedProxies(try top.optional("trusted_proxies"))
        let upstreams = try Self.upstreams(try top.required("upstreams"))
        let providersNode = try top.optional("providers")
        var providers = try providersNode.map { node throws(ConfigurationError) in try Self.providers(node) } ?? []
        let keyRefresh = try Self.keyRefresh(try top.optional("keys"))
        let tokenCacheEntries = try Self.tokenCacheEntries(try top.optional("token_cache"))
        let store = try Self.store(try top.optional("store"), revocation: try top.optional("revocation"))
        let identity = try Self.identity(try top.optional("identity"))
        let tracing = try Self.tracing(try top.optional("tracing"))
        let sessionsNode = try top.optional("sessions")
        let sessions = try Self.sessions(sessionsNode, providers: providers, upstreams: upstreams)
        if let sessionsNode, let sessions, store.usesRedis, sessions.signingKeyFiles.isEmpty {
            throw sessionsNode.error("access_token.signing_keys is required with store.redis: every instance signs "
                                     + "and verifies the access tokens with the same keys", key: "access_token.signing_keys")
        }
        if let sessions {
            // The exchange compares the ID token's nonce with the one its client sends.
            for i in providers.indices where sessions.accept.contains(providers[i].configuration.name)
                && !providers[i].configuration.forwardedClaims.contains("nonce") {
                providers[i].configuration.forwardedClaims.append("nonce")
            }
            providers.append(Self.sessionProvider(sessions))
        }
        let routesNode = try top.required("routes")
        var (routes, routeAuth) = try Self.routes(routesNode, file: file, upstreams: upstreams,
                                                  providerNames: Set(providers.map(\.configuration.name)))
        let routeLines = (try? routesNode.sequence().map(\.line)) ?? []
        // The lookup hook is the gateway's alone: no client request reaches it through a route.
        if let hook = sessions?.lookup {
            for i in routes.indices where routes[i].upstream == hook.upstream { routes[i].privatePaths.append(hook.path) }
        }
        let sessionRoutes = try sessions.map { settings throws(ConfigurationError) in
            try Self.addSessionRoutes(settings, routes: &routes, routeAuth: &routeAuth, errorBody: identity.settings.errorBody,
                                      file: file, routeLines: routeLines, pathsLine: sessionsNode?.line)
        } ?? []

        try top.finish()

        // Claims the gateway reads (headers, route rules) are forwarded by every provider.
        let neededClaims = Set(identity.claimHeaders.map(\.claim) + routeAuth.flatMap { $0.requiredClaims.map(\.claim) })
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
                                    sessions: sessions, sessionRoutes: sessionRoutes, demo: demo)
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
