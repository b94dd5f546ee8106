import PortcullisSessions
import PortcullisAuth
import PortcullisEdgeAuth
import PortcullisProxy

extension ConfigurationLoader {
    /// `sessions:` (see `SessionSettings`). `providerNames`: the configured providers, which
    /// `accept` must name (ID-token providers only).
    static func sessions(_ node: ConfigNode?, providers: [ProviderSettings],
                         upstreams: [UpstreamConfiguration]) throws(ConfigurationError) -> SessionSettings? {
        guard var node else { return nil }
        let issuerNode = try node.required("issuer")
        let issuer = try issuerNode.string()
        guard !issuer.isEmpty else { throw issuerNode.error("must not be empty") }
        let acceptNode = try node.required("accept")
        let accept = try acceptNode.stringList()
        guard !accept.isEmpty else { throw acceptNode.error("names at least one provider whose ID tokens may be exchanged") }
        for name in accept {
            guard let provider = providers.first(where: { $0.configuration.name == name }) else {
                throw acceptNode.error("no provider '\(name)' (known: \(providers.map(\.configuration.name).joined(separator: ", ")))")
            }
            switch provider.configuration.kind {
            case .google, .apple, .firebase, .oidc: break
            default:
                throw acceptNode.error("'\(name)' is a \(provider.configuration.kind.rawValue) provider; only ID tokens (google, apple, firebase, oidc) are exchanged")
            }
        }
        if providers.contains(where: { $0.configuration.name == SessionSettings.providerName }) {
            throw node.error("a provider is already named '\(SessionSettings.providerName)'; that name is the session tokens' own", key: "providers")
        }
        var refreshNode = try node.required("refresh_token")
        let secretNode = try refreshNode.required("secret")
        let secret = try secretNode.secret(bare: true)
        guard secret.utf8.count >= 32 else { throw secretNode.error("needs at least 32 bytes") }
        var settings = SessionSettings(issuer: issuer, accept: accept, refreshSecret: secret)
        if let n = try refreshNode.optional("lifetime") { settings.refreshLifetime = try n.duration() }
        if let n = try refreshNode.optional("idle_timeout") { settings.idleTimeout = try n.duration() }
        if let n = try refreshNode.optional("reuse_grace") {
            settings.reuseGrace = try n.duration()
            guard settings.reuseGrace <= 300 else { throw n.error("at most 5m: a reuse window is a race window, not a policy") }
        }
        try refreshNode.finish()
        if let n = try node.optional("id_token_field") {
            settings.idTokenField = try n.string()
            guard !settings.idTokenField.isEmpty else { throw n.error("must not be empty") }
            settings.exchanges[0].idTokenField = settings.idTokenField
        }
        if var user = try node.optional("user") {
            if let n = try user.optional("provider_subject") {
                guard try n.bool() else { throw n.error("only provider_subject: true is supported (the user id is \"<provider>:<sub>\")") }
            }
            if var lookup = try user.optional("lookup") {
                let upstreamNode = try lookup.required("upstream")
                let name = try upstreamNode.string()
                guard upstreams.contains(where: { $0.name == name }) else {
                    throw upstreamNode.error("no upstream '\(name)' (known: \(upstreams.map(\.name).joined(separator: ", ")))")
                }
                let pathNode = try lookup.required("path")
                let path = try pathNode.string()
                guard path.hasPrefix("/") else { throw pathNode.error("a path such as /internal/users/resolve") }
                var found = SessionSettings.Lookup(upstream: name, path: path)
                if let n = try lookup.optional("timeout") { found.timeout = try n.duration() }
                try lookup.finish()
                settings.lookup = found
            }
            try user.finish()
        }
        if var access = try node.optional("access_token") {
            if let n = try access.optional("lifetime") {
                settings.accessLifetime = try n.duration()
                guard settings.accessLifetime >= 60, settings.accessLifetime <= 86_400 else { throw n.error("between 1m and 24h") }
            }
            if let n = try access.optional("algorithm") {
                guard try n.string() == "ES256" else { throw n.error("only ES256 is supported") }
            }
            if let n = try access.optional("signing_keys") {
                settings.signingKeyFiles = try n.stringList()
                // Read now, so check-config (and start) names a missing or wrong key file here.
                for path in settings.signingKeyFiles {
                    do throws(AssertionKeys.LoadError) {
                        _ = try AssertionKeys.loadKey(path, algorithm: .es256, purpose: "session access tokens")
                    } catch {
                        throw n.error("\(error)")
                    }
                }
            }
            try access.finish()
        }
        if var paths = try node.optional("paths") {
            func endpointPath(_ n: ConfigNode, _ key: String) throws(ConfigurationError) -> String {
                let path = try n.string()
                guard path.hasPrefix("/"), path.count > 1 else { throw n.error("a path such as /auth/\(key)") }
                return path
            }
            if let n = try paths.optional("exchange") {
                settings.exchanges = try exchanges(n, settings: settings, path: endpointPath)
            }
            for (key, keyPath) in [("refresh", \SessionSettings.refreshPath), ("logout", \.logoutPath), ("sessions", \.sessionsPath)] {
                guard let n = try paths.optional(key) else { continue }
                settings[keyPath: keyPath] = try endpointPath(n, key)
            }
            try paths.finish()
        }
        if let n = try node.optional("require_tls") { settings.requireTLS = try n.bool() }
        if let n = try node.optional("require_nonce") { settings.requireNonce = try n.bool() }
        if let n = try node.optional("max_per_user") { settings.maxPerUser = try n.int(min: 1, max: 10_000) }
        if let n = try node.optional("error_body") { settings.errorBody = try errorBody(n) }
        if let n = try node.optional("device_field") {
            let field = try n.string()
            guard !field.isEmpty, field.utf8.count <= 64, !settings.exchanges.contains(where: { $0.idTokenField == field }) else {
                throw n.error("expected a JSON member name (1 to 64 bytes) other than id_token_field")
            }
            settings.deviceField = field
        }
        if let n = try node.optional("carry_claims") {
            let names = try n.stringList()
            for name in names {
                guard !name.isEmpty, !name.contains("."), name.utf8.count <= 64 else {
                    throw n.error("'\(name)': expected a top-level claim name (carry the object to keep a nested claim)")
                }
                guard !SessionSettings.registeredClaims.contains(name) else {
                    throw n.error("'\(name)' is a claim of the access token itself, never carried")
                }
            }
            settings.carryClaims = names
        }
        if let n = try node.optional("response") {
            switch SessionResponseTemplate.parse(try n.string()) {
            case .success(let template): settings.response = template
            case .failure(let invalid): throw n.error(invalid.reason)
            }
        }
        if let n = try node.optional("old_refresh_tokens") {
            switch try n.string() {
            case "forward": settings.forwardsOldRefreshTokens = true
            case "refuse": settings.forwardsOldRefreshTokens = false
            case let other: throw n.error("expected forward or refuse, got '\(other)'")
            }
        }
        if let n = try node.optional("logout_status") {
            let status = try n.int(min: 200, max: 204)
            guard status == 200 || status == 204 else { throw n.error("expected 200 or 204, got \(status)") }
            settings.logoutStatus = status
        }
        try node.finish()
        return settings
    }

    /// `paths.exchange`: one path (the ID token in `id_token_field`, any provider of `accept`),
    /// or a list of paths and `{path, id_token_field, accept}` entries.
    private static func exchanges(_ n: ConfigNode, settings: SessionSettings,
                                  path: (ConfigNode, String) throws(ConfigurationError) -> String)
        throws(ConfigurationError) -> [SessionSettings.Exchange] {
        guard case .sequence = n.node else {
            return [SessionSettings.Exchange(path: try path(n, "session"), idTokenField: settings.idTokenField, accept: settings.accept)]
        }
        var found: [SessionSettings.Exchange] = []
        for var entry in try n.sequence() {
            guard case .mapping = entry.node else {
                found.append(SessionSettings.Exchange(path: try path(entry, "session"), idTokenField: settings.idTokenField,
                                                      accept: settings.accept))
                continue
            }
            var exchange = SessionSettings.Exchange(path: try path(try entry.required("path"), "session"),
                                                    idTokenField: settings.idTokenField, accept: settings.accept)
            if let f = try entry.optional("id_token_field") {
                exchange.idTokenField = try f.string()
                guard !exchange.idTokenField.isEmpty, exchange.idTokenField.utf8.count <= 64 else {
                    throw f.error("expected a JSON member name (1 to 64 bytes)")
                }
            }
            if let a = try entry.optional("accept") {
                exchange.accept = try a.stringList()
                guard !exchange.accept.isEmpty else { throw a.error("names at least one provider of sessions.accept") }
                for name in exchange.accept where !settings.accept.contains(name) {
                    throw a.error("'\(name)' is not in sessions.accept (\(settings.accept.joined(separator: ", ")))")
                }
            }
            try entry.finish()
            if found.contains(where: { $0.path == exchange.path }) {
                throw entry.error("\(exchange.path) is listed twice")
            }
            found.append(exchange)
        }
        guard !found.isEmpty else { throw n.error("lists at least one exchange path") }
        return found
    }

    /// The built-in `session` provider: ES256 access tokens of `issuer` (also their audience).
    /// Its keys are the session service's, installed when the gateway starts.
    static func sessionProvider(_ settings: SessionSettings) -> ProviderSettings {
        var configuration = ProviderConfiguration(name: SessionSettings.providerName, kind: .oidc)
        configuration.issuer = settings.issuer
        configuration.audiences = [settings.issuer]
        configuration.algorithms = ["ES256"]
        configuration.maxLifetimeSeconds = Int(settings.accessLifetime) + 60
        // The ID provider and its subject: the user's other names for revocations.
        configuration.forwardedClaims += ["idp", "idp_sub"]
        return ProviderSettings(configuration: configuration, keys: .inline(.empty), sessionCookieNames: [])
    }

    /// The session endpoints as routes the gateway answers; a configured route on the same
    /// path is refused (it would shadow one or the other).
    static func addSessionRoutes(_ settings: SessionSettings, routes: inout [RouteConfiguration],
                                 routeAuth: inout [RouteAuthSettings], errorBody: ErrorBodyTemplate,
                                 file: String, routeLines: [Int?] = [], pathsLine: Int? = nil)
        throws(ConfigurationError) -> [(index: Int, kind: SessionRouteKind)] {
        let endpoints: [(String, String, SessionRouteKind, AuthMode, [String]?)] = settings.exchanges.map {
            ("exchange", $0.path, .exchange($0), .required, $0.accept)
        } + [
            ("refresh", settings.refreshPath, .refresh, .none, nil),
            // Any credential a route accepts may log itself out (see `SessionEndpoint.logout`).
            ("logout", settings.logoutPath, .logout, .required, nil),
            ("sessions", settings.sessionsPath, .sessions, .required, [SessionSettings.providerName]),
        ]
        var added: [(index: Int, kind: SessionRouteKind)] = []
        for (key, path, kind, auth, providers) in endpoints {
            if let clash = routes.firstIndex(where: { $0.host == nil && $0.pathPrefix == path }) {
                let at = clash < routeLines.count ? routeLines[clash].map { "the route at line \($0)" } : nil
                // The app's own refresh route on the refresh path: one route, answered by the
                // gateway for its own tokens and forwarded to the app for the others
                // (`SessionEndpoint.forwardsInstead`), so clients signed in before the move
                // keep refreshing. Its refresh token travels in the body: the route must be
                // `auth: none`, as an app's refresh route is.
                if kind == .refresh && settings.forwardsOldRefreshTokens {
                    guard routes[clash].auth == .none, routes[clash].handler == nil else {
                        throw ConfigurationError(file: file, key: "sessions.paths.\(key)", line: pathsLine,
                                                 reason: "\(path) is also the path of \(at ?? "routes[\(clash)]"), which must be "
                                                    + "auth: none to take the refresh tokens the gateway did not issue")
                    }
                    added.append((clash, kind))
                    continue
                }
                throw ConfigurationError(file: file, key: "sessions.paths.\(key)", line: pathsLine,
                                         reason: "\(path) is also the path of \(at ?? "routes[\(clash)]") (a session endpoint "
                                            + "and a route on one path would shadow each other: delete the route, or move the endpoint)")
            }
            if let other = added.first(where: { routes[$0.index].pathPrefix == path }) {
                throw ConfigurationError(file: file, key: "sessions.paths.\(key)", line: pathsLine,
                                         reason: "\(path) is already the \(other.kind) endpoint's path")
            }
            routes.append(RouteConfiguration(pathPrefix: path, upstream: "portcullis-sessions", auth: auth, providers: providers))
            var auth = RouteAuthSettings()
            auth.forwardAuthorization = false
            auth.errorBody = (settings.errorBody ?? errorBody).carryingCode
            if case .exchange(let exchange) = kind {
                var credential = BodyCredentialSettings(field: exchange.idTokenField, providers: exchange.accept,
                                                        maxBodyBytes: 64 * 1024)
                credential.alternateField = exchange.idTokenField == "id_token" ? nil : "id_token"
                credential.bearerFallback = true
                auth.bodyCredential = credential
                auth.refusesAsGrant = true
            }
            routeAuth.append(auth)
            added.append((routes.count - 1, kind))
        }
        return added
    }
}
