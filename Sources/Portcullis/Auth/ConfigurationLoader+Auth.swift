import PortcullisSessions
import PortcullisEdgeAuth
import Foundation
import PortcullisAuth
import PortcullisKeys
import Yams
import PortcullisOutbound

/// Reading `providers:`, `keys:` and the auth keys of routes. Every key and its
/// default is listed in `Config/portcullis.yaml`.
extension ConfigurationLoader {
    /// The providers read without error; each bad one's errors are added to `errors` (the
    /// good ones are still checked further, so one run names every bad provider).
    static func providers(_ listNode: ConfigNode, errors: inout [ConfigurationError]) throws(ConfigurationError) -> [ProviderSettings] {
        var result: [ProviderSettings] = []
        var names = Set<String>()
        for item in try listNode.sequence() {
            // Each provider's error is reported; the others are still read (check-config lists all).
            do throws(ConfigurationError) {
                var node = item
                let nameNode = try node.required("name")
                let name = try nameNode.string()
                guard !name.isEmpty, name.utf8.allSatisfy({ ($0 >= 0x61 && $0 <= 0x7A) || ($0 >= 0x30 && $0 <= 0x39) || $0 == 0x2D || $0 == 0x5F }) else {
                    throw nameNode.error("provider names use lower-case letters, digits, '-' and '_'")
                }
                guard names.insert(name).inserted else { throw nameNode.error("provider \(name) is defined twice") }
                // Reserved whether or not `sessions:` is on: a route or a revocation naming
                // "session" must always mean the gateway's own session tokens.
                if name == SessionSettings.providerName {
                    throw nameNode.error("'\(name)' is reserved for the gateway's own session access tokens (sessions:); choose another name")
                }
                let typeNode = try node.required("type")
                let typeText = try typeNode.string()
                guard let kind = ProviderConfiguration.Kind(rawValue: typeText) else {
                    throw typeNode.error("expected hs256, google, apple, firebase, firebase_session, oidc, nextauth or authjs; got '\(typeText)'")
                }
                var c = ProviderConfiguration(name: name, kind: kind)
                if let n = try node.optional("secret") {
                    c.secret = try n.secret(bare: true)
                    if c.secret!.utf8.count < 32 && (kind == .hs256 || kind == .nextauth || kind == .authjs) {
                        throw n.error("must be at least 32 bytes (HS256 keys shorter than the hash are refused; generate one with `openssl rand -base64 32`)")
                    }
                }
                if let n = try node.optional("secrets") {
                    c.secrets = try n.sequence().map { item throws(ConfigurationError) in try item.secret(bare: true) }
                }
                if let n = try node.optional("audiences") { c.audiences = try n.stringList() }
                if let n = try node.optional("audience") { c.audiences.append(try n.string()) }
                if let n = try node.optional("issuer") { c.issuer = try n.string() }
                if let n = try node.optional("project_id") { c.projectID = try n.string() }
                if let n = try node.optional("algorithms") { c.algorithms = try n.stringList() }
                if let n = try node.optional("required_claims") {
                    for rule in try claimRules(n) { c.requiredClaims[rule.claim] = rule.requirement }
                }
                if let n = try node.optional("leeway") { c.leewaySeconds = Int(try n.duration()) }
                if let n = try node.optional("cookie_name") {
                    guard kind.readsCookies else {
                        throw n.error("has no effect: \(kind.rawValue) providers read no cookie (nextauth, authjs and firebase_session do)")
                    }
                    c.cookieName = try n.string()
                }
                if let n = try node.optional("hosted_domain") { c.hostedDomain = try n.string() }
                if let n = try node.optional("max_lifetime") { c.maxLifetimeSeconds = Int(try n.duration()) }
                if let n = try node.optional("forward_claims") {
                    c.forwardedClaims = try n.stringList()
                    for claim in c.forwardedClaims { try checkClaimPath(claim, n) }
                }
                if let n = try node.optional("user_id_claim") { c.userIdClaim = try n.string() }
                if let n = try node.optional("key_id") { c.keyID = try n.string() }
                if let n = try node.optional("accepted_types") { c.acceptedTypes = try n.stringList() }

                // Keys: at most one source.
                var keys: KeySourceSetting
                switch kind {
                case .hs256, .nextauth, .authjs: keys = .secret
                case .google: keys = .url(KeySource.googleURL)
                case .apple: keys = .url(KeySource.appleURL)
                case .firebase: keys = .url(KeySource.firebaseURL)
                case .firebaseSession: keys = .url(KeySource.firebaseSessionURL)
                case .oidc: keys = .secret  // replaced below; oidc must name its keys
                }
                var given: [String] = []
                if let n = try node.optional("jwks_url") {
                    given.append("jwks_url")
                    keys = .url(try keyURL(n))
                }
                if let n = try node.optional("jwks") {
                    given.append("jwks")
                    keys = .inline(try keySet(n, Array(try n.string().utf8)))
                }
                if let n = try node.optional("jwks_file") {
                    given.append("jwks_file")
                    keys = .inline(try keySet(n, try fileBytes(n)))
                }
                if let n = try node.optional("public_key") {
                    given.append("public_key")
                    let pem = String(decoding: try fileBytes(n), as: UTF8.self)
                    do {
                        keys = .inline(try KeySet(pemPublicKey: pem, keyID: c.keyID,
                                                  algorithm: c.algorithms.first.flatMap(JWSAlgorithm.init(rawValue:))))
                    } catch {
                        throw n.error("\(error)")
                    }
                }
                if given.count > 1 {
                    throw node.error("give only one of jwks_url, jwks, jwks_file, public_key (got \(given.joined(separator: ", ")))")
                }
                if !given.isEmpty && (kind == .hs256 || kind == .nextauth || kind == .authjs) {
                    throw node.error("\(kind.rawValue) providers verify with their secret; \(given[0]) does not apply")
                }
                if kind == .oidc && given.isEmpty {
                    throw node.error("oidc providers need jwks_url, jwks, jwks_file or public_key", key: "jwks_url")
                }
                try node.finish()

                let cookieNames: [String]
                switch kind {
                case .nextauth:
                    let base = c.cookieName ?? "next-auth.session-token"
                    cookieNames = [base, "__Secure-" + base]
                case .authjs:
                    let base = c.cookieName ?? "authjs.session-token"
                    cookieNames = [base, "__Secure-" + base]
                case .firebaseSession:
                    // Firebase Hosting forwards only the cookie named __session to the app.
                    cookieNames = [c.cookieName ?? ProviderConfiguration.firebaseSessionCookie]
                default:
                    cookieNames = []
                }
                result.append(ProviderSettings(configuration: c, keys: keys, sessionCookieNames: cookieNames))
            } catch {
                errors += error.all
            }
        }
        return result
    }

    /// `claim: value` pairs: a quoted or plain string → equals; `true`/`false` →
    /// that boolean; a list → one of; `"*"` → present.
    static func claimRules(_ node: ConfigNode) throws(ConfigurationError) -> [RouteClaimRule] {
        var rules: [RouteClaimRule] = []
        for (claim, value) in try node.entries() {
            guard !claim.isEmpty else { throw value.error("empty claim name") }
            switch value.node {
            case .sequence:
                let list = try value.stringList()
                guard !list.isEmpty else { throw value.error("needs at least one accepted value") }
                rules.append(.init(claim: claim, requirement: .oneOf(list)))
            case .scalar(let scalar):
                let text = try value.string()
                if scalar.style == .plain && (text == "true" || text == "false") {
                    rules.append(.init(claim: claim, requirement: .equalsBool(text == "true")))
                } else if text == "*" {
                    rules.append(.init(claim: claim, requirement: .present))
                } else {
                    rules.append(.init(claim: claim, requirement: .equals(text)))
                }
            default:
                throw value.error("expected a value, a list of values, true/false or \"*\"")
            }
        }
        return rules
    }

    /// An http:// or https:// URL the key fetcher accepts.
    static func keyURL(_ node: ConfigNode) throws(ConfigurationError) -> String {
        let url = try node.string()
        do { _ = try FetchURL(parsing: url) } catch { throw node.error("\(error)") }
        return url
    }

    static func fileBytes(_ node: ConfigNode) throws(ConfigurationError) -> [UInt8] {
        let path = try node.string()
        guard let data = FileManager.default.contents(atPath: path) else {
            throw node.error("cannot read \(path)")
        }
        return [UInt8](data)
    }

    /// An inline JWKS or PEM certificate map (Firebase's format).
    static func keySet(_ node: ConfigNode, _ bytes: [UInt8]) throws(ConfigurationError) -> KeySet {
        do { return try KeyDocumentFormat.detect(bytes).load(bytes) } catch { throw node.error("\(error)") }
    }

    /// The auth keys of one route mapping.
    static func routeAuth(_ node: inout ConfigNode, providerNames: Set<String>) throws(ConfigurationError) -> (providers: [String]?, settings: RouteAuthSettings) {
        var settings = RouteAuthSettings()
        var providers: [String]?
        if let n = try node.optional("providers") {
            providers = try providerList(n, providerNames: providerNames, omitted: "to accept all")
        }
        if let n = try node.optional("require_claims") { settings.requiredClaims = try claimRules(n) }
        if let n = try node.optional("error_body") { settings.errorBody = try errorBody(n) }
        if let n = try node.optional("bypass_methods") {
            let methods = try n.stringList()
            for method in methods where method.isEmpty || !method.utf8.allSatisfy({ $0 >= 0x41 && $0 <= 0x5A }) {
                throw n.error("'\(method)' is not an upper-case method name")
            }
            settings.bypassMethods = Set(methods)
        }
        var signIn: String?
        if let n = try node.optional("sign_in_url") {
            let url = try n.string()
            guard url.hasPrefix("/") || url.hasPrefix("https://") || url.hasPrefix("http://"),
                  url.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else {
                throw n.error("expected a path or an http(s) URL without spaces, got '\(url)'")
            }
            signIn = url
        }
        if let n = try node.optional("on_unauthenticated") {
            switch try n.string() {
            case "status", "challenge", "401": settings.onUnauthenticated = .challenge
            case "redirect":
                guard let signIn else { throw n.error("redirect needs sign_in_url on the same route") }
                settings.onUnauthenticated = .redirect(signIn)
            case let other: throw n.error("expected status or redirect, got '\(other)'")
            }
        }
        if let n = try node.optional("forward_authorization") { settings.forwardAuthorization = try n.bool() }
        if let n = try node.optional("forward_session_cookie") { settings.forwardSessionCookie = try n.bool() }
        if let n = try node.optional("revoke_on_success") { settings.revokeOnStatuses = try statusSet(n) }
        if let n = try node.optional("on_invalid") {
            let text = try n.string()
            guard let action = InvalidCredentialAction(rawValue: text) else {
                throw n.error("expected anonymous or refuse, got '\(text)'")
            }
            settings.onInvalid = action
        }
        if let n = try node.optional("credential") {
            settings.bodyCredential = try bodyCredential(n, routeProviders: providers, providerNames: providerNames)
        }
        return (providers, settings)
    }

    /// A claim name or dotted path the gateway can look up: no empty name or empty segment
    /// (`a..b`, `.a`, `a.`), no spaces or control characters. Anything else could never be
    /// found in a token, so the header it feeds would never be sent: refused at start.
    static func checkClaimPath(_ claim: String, _ node: ConfigNode) throws(ConfigurationError) {
        let segments = claim.split(separator: ".", omittingEmptySubsequences: false)
        let printable = claim.utf8.allSatisfy { $0 > 0x20 && $0 != 0x7F }
        guard !claim.isEmpty, printable, segments.allSatisfy({ !$0.isEmpty }) || segments.count == 1 else {
            throw node.error("'\(claim)' is not a claim name or dotted claim path (no empty parts, spaces or control characters): no token could ever carry it")
        }
    }

    /// A non-empty list of configured provider names (`omitted`: what leaving the key out means).
    static func providerList(_ node: ConfigNode, providerNames: Set<String>,
                             omitted: String) throws(ConfigurationError) -> [String] {
        let list = try node.stringList()
        for name in list where !providerNames.contains(name) {
            throw node.error("names no provider '\(name)' (known: \(providerNames.sorted().joined(separator: ", ")))")
        }
        guard !list.isEmpty else { throw node.error("needs at least one provider (omit the key \(omitted))") }
        return list
    }

    /// `revoke_on_success`: true (2xx), false, or a list of statuses and classes (`[2xx, 302, 303]`).
    static func statusSet(_ node: ConfigNode) throws(ConfigurationError) -> StatusSet {
        var set = StatusSet()
        if case .scalar = node.node {
            if try node.bool() { set.classes = [2] }
            return set
        }
        for item in try node.stringList() {
            if item.count == 3, item.hasSuffix("xx"), let digit = Int(item.prefix(1)), (1...5).contains(digit) {
                set.classes.insert(digit)
            } else if let code = Int(item), (100...599).contains(code) {
                set.codes.insert(code)
            } else {
                throw node.error("expected true, false or a list of statuses such as [2xx, 302, 303]; got '\(item)'")
            }
        }
        guard !set.isEmpty else { throw node.error("an empty list never revokes; use false") }
        return set
    }

    /// `credential: {json_field, providers, max_body}` on a route.
    static func bodyCredential(_ node: ConfigNode, routeProviders: [String]?,
                               providerNames: Set<String>) throws(ConfigurationError) -> BodyCredentialSettings {
        var node = node
        guard !providerNames.isEmpty else { throw node.error("needs at least one provider under providers:") }
        let fieldNode = try node.required("json_field")
        let field = try fieldNode.string()
        guard !field.isEmpty, field.utf8.allSatisfy({ $0 >= 0x20 && $0 != 0x22 && $0 != 0x5C && $0 != 0x7F }) else {
            throw fieldNode.error("must be a JSON member name without quotes, backslashes or control characters")
        }
        var settings = BodyCredentialSettings(field: field)
        if let n = try node.optional("providers") {
            let list = try providerList(n, providerNames: providerNames, omitted: "for the route's")
            if let routeProviders {
                for name in list where !routeProviders.contains(name) {
                    throw n.error("'\(name)' is not among the route's providers (\(routeProviders.joined(separator: ", ")))")
                }
            }
            settings.providers = list
        }
        if let n = try node.optional("max_body") {
            let size = try n.byteSize()
            guard size >= 64, size <= 1 << 20 else { throw n.error("must be between 64 bytes and 1MiB, got \(size)") }
            settings.maxBodyBytes = size
        }
        try node.finish()
        return settings
    }
}

/// `keys`, `token_cache` and `identity`.
extension ConfigurationLoader {
    /// `keys`: how fetched key sets are refreshed.
    static func keyRefresh(_ node: ConfigNode?) throws(ConfigurationError) -> KeyRefreshSettings {
        var keyRefresh = KeyRefreshSettings()
        guard var node else { return keyRefresh }
        if let n = try node.optional("fetch_timeout") { keyRefresh.fetchTimeout = try positiveDuration(n) }
        if let n = try node.optional("min_ttl") { keyRefresh.minimumTTL = try positiveDuration(n) }
        if let n = try node.optional("max_ttl") { keyRefresh.maximumTTL = try positiveDuration(n) }
        if let n = try node.optional("min_refetch_interval") { keyRefresh.minimumRefetchInterval = try positiveDuration(n) }
        if let n = try node.optional("serve_stale_for") { keyRefresh.serveStaleFor = try n.duration() }
        if let n = try node.optional("prefetch") {
            let text = try n.string()
            guard let prefetch = KeyPrefetch(rawValue: text) else {
                throw n.error("must be required or best_effort, not \(text)")
            }
            keyRefresh.prefetch = prefetch
        }
        if keyRefresh.minimumTTL > keyRefresh.maximumTTL {
            throw node.error("min_ttl (\(keyRefresh.minimumTTL)s) exceeds max_ttl (\(keyRefresh.maximumTTL)s)", key: "min_ttl")
        }
        try node.finish()
        return keyRefresh
    }

    /// `token_cache.max_entries`: the verified-token cache (Envoy's jwt_cache_config).
    static func tokenCacheEntries(_ node: ConfigNode?) throws(ConfigurationError) -> Int {
        guard var node else { return 16_384 }
        var entries = 16_384
        if let n = try node.optional("max_entries") { entries = try n.int(min: 0, max: 10_000_000) }
        try node.finish()
        return entries
    }

    /// `error_body`: a preset (`oauth`, `detail`, `message`) or a JSON template (see `ErrorBodyTemplate`).
    static func errorBody(_ node: ConfigNode) throws(ConfigurationError) -> ErrorBodyTemplate {
        switch ErrorBodyTemplate.parse(try node.string()) {
        case .success(let template): return template
        case .failure(let invalid): throw node.error(invalid.reason)
        }
    }

    /// What `identity` configures: the injected header names, the realm and claim headers.
    struct IdentitySection {
        var settings = IdentitySettings()
        var userIdHeader = "X-User-Id"
        var providerHeader = "X-Auth-Provider"
        var claimHeaders: [(claim: String, header: String)] = []
        var realm = "portcullis"
    }

    static func identity(_ node: ConfigNode?) throws(ConfigurationError) -> IdentitySection {
        var identity = IdentitySection()
        guard var node else { return identity }
        if let n = try node.optional("user_id_header") { identity.userIdHeader = try headerName(n) }
        if let n = try node.optional("provider_header") { identity.providerHeader = try headerName(n) }
        if let n = try node.optional("realm") {
            identity.realm = try n.string()
            guard identity.realm.utf8.allSatisfy({ $0 >= 0x20 && $0 < 0x7F && $0 != 0x22 && $0 != 0x5C }) else {
                throw n.error("must be printable ASCII without quotes or backslashes")
            }
        }
        if let n = try node.optional("claims") {
            for (claim, value) in try n.entries() {
                try checkClaimPath(claim, value)
                identity.claimHeaders.append((claim, try headerName(value)))
            }
        }
        if let n = try node.optional("prefix_provider") { identity.settings.prefixProvider = try n.bool() }
        if let n = try node.optional("error_body") { identity.settings.errorBody = try errorBody(n) }
        if let n = try node.optional("assertion") { identity.settings.assertion = try assertion(n) }
        try node.finish()
        return identity
    }
}
