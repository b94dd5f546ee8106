import PortcullisAuth
import PortcullisEdgeAuth
import PortcullisIO
import PortcullisProxy
import PortcullisRedis

/// Applies `rate_limits:` after the authenticator it wraps decided: a request let through
/// (with identity or without) is counted under its rule's key — the verified user id, a
/// claim, or the client address — and answered `429 Too Many Requests` past the rate, with
/// `Retry-After`, `RateLimit-Policy` and `RateLimit` (draft-ietf-httpapi-ratelimit-headers)
/// and the route's error body shape. A request the inner authenticator refused is not
/// counted (it never reaches the app, and its answer is already a refusal); a decision that
/// waited for a key fetch is counted when it arrives. Every HTTP/2 stream is a request of
/// its own, so a connection cannot multiplex past a limit.
///
/// Several rules on one route are checked in order; the first that refuses answers, and
/// the rules before it counted the request (as Envoy's descriptors each count).
///
/// Threading: immutable; called on loop queues concurrently (the store locks per shard).
public final class RateLimitingAuthenticator: RequestAuthenticator {
    let inner: any RequestAuthenticator
    /// The rules of each route, by `Route.index` (empty: the route is not limited).
    let rulesByRoute: [[RateLimitRule]]
    let errorBodies: [ErrorBodyTemplate]
    let backend: Backend
    let onUnavailable: RateLimitSettings.Unavailable
    let trustedProxies: [CIDR]

    /// Where the budgets live: this process (one instance) or Redis (the fleet).
    public enum Backend: Sendable {
        case embedded(EmbeddedRateLimitStore)
        case shared(RedisRateLimitStore)
    }

    /// The access log's `auth_reason` for a refusal by a limit.
    public static let limitedReason = "rate_limited"

    /// `routePaths` and `errorBodies`: each configured route's path and refusal body shape,
    /// by index.
    public init(wrapping inner: any RequestAuthenticator, settings: RateLimitSettings, routePaths: [String],
                errorBodies: [ErrorBodyTemplate], backend: Backend, trustedProxies: [CIDR]) {
        self.inner = inner
        rulesByRoute = routePaths.map { path in settings.rules.filter { $0.routes?.contains(path) ?? true } }
        self.errorBodies = errorBodies
        self.backend = backend
        onUnavailable = settings.onUnavailable
        self.trustedProxies = trustedProxies
    }

    public func authenticate(_ request: RequestView, route: Route, resumption: AuthResumption) -> AuthOutcome {
        guard let rules = rules(route) else { return inner.authenticate(request, route: route, resumption: resumption) }
        let client = ClientOrigin(request, trustedProxies: trustedProxies)
        let outcome = inner.authenticate(request, route: route, resumption: intercepting(resumption, rules, route, client))
        return limit(outcome, rules: rules, routeIndex: route.index, client: client, resumption: resumption)
    }

    public func authenticate(_ request: RequestView, route: Route, body: UnsafeRawBufferPointer,
                             resumption: AuthResumption) -> AuthOutcome {
        guard let rules = rules(route) else {
            return inner.authenticate(request, route: route, body: body, resumption: resumption)
        }
        let client = ClientOrigin(request, trustedProxies: trustedProxies)
        let outcome = inner.authenticate(request, route: route, body: body,
                                         resumption: intercepting(resumption, rules, route, client))
        return limit(outcome, rules: rules, routeIndex: route.index, client: client, resumption: resumption)
    }

    @inline(__always)
    private func rules(_ route: Route) -> [RateLimitRule]? {
        guard route.index < rulesByRoute.count else { return nil }
        let rules = rulesByRoute[route.index]
        return rules.isEmpty ? nil : rules
    }

    /// A resumption whose outcome is limited before it reaches the request.
    private func intercepting(_ resumption: AuthResumption, _ rules: [RateLimitRule], _ route: Route,
                              _ client: ClientOrigin) -> AuthResumption {
        let target = LimitedResumption(original: resumption, limiter: self, rules: rules, routeIndex: route.index, client: client)
        return AuthResumption(target: target, generation: resumption.generation, loop: resumption.loop)
    }

    /// The outcome, or a 429 when a rule refuses the request it lets through. With the
    /// shared store the answer comes later: `.deferred`, and the decision goes to
    /// `resumption` once Redis answered.
    func limit(_ outcome: AuthOutcome, rules: [RateLimitRule], routeIndex: Int, client: ClientOrigin,
               resumption: AuthResumption) -> AuthOutcome {
        let grant: AuthGrant?
        switch outcome {
        case .anonymous: grant = nil
        case .grant(let granted): grant = granted
        case .reject, .deferred, .needsBody: return outcome
        }
        switch backend {
        case .embedded(let store):
            for rule in rules {
                let decision = store.decide(rule: rule, key: Self.key(rule.key, grant: grant, client: client))
                if !decision.allowed { return .reject(refusal(rule, decision, routeIndex: routeIndex)) }
            }
            return outcome
        case .shared(let store):
            let checks = rules.map { rule in (rule: rule, key: Self.key(rule.key, grant: grant, client: client)) }
            // A refusal Redis gave that still stands is answered here, without a round trip;
            // a key far from its limit is forwarded now, charged in the background. Not with
            // `on_unavailable: deny`: a charge Redis may never take must not let a request by.
            // On the request's loop (as every authenticator is called): the charges leave at
            // the end of its pass, with the other requests' (see `RedisRateLimitStore`).
            switch store.admit(checks, loop: resumption.loop, mayGoAhead: onUnavailable == .allow) {
            case .refused(let index, let decision): return .reject(refusal(rules[index], decision, routeIndex: routeIndex))
            case .ahead: return outcome
            case .ask: break
            }
            let carried = CarriedOutcome(outcome)
            store.decide(checks, loop: resumption.loop) { [self] decisions in
                guard let decisions else {
                    resumption.resume(onUnavailable == .allow ? carried.take() : .reject(unavailable(routeIndex: routeIndex)))
                    return
                }
                for (rule, decision) in zip(rules, decisions) where !decision.allowed {
                    resumption.resume(.reject(refusal(rule, decision, routeIndex: routeIndex)))
                    return
                }
                resumption.resume(carried.take())
            }
            return .deferred
        }
    }

    /// `on_unavailable: deny` with the shared store down: 503, in the route's shape.
    func unavailable(routeIndex: Int) -> LocalResponse {
        var response = EdgeAuthenticator.errorResponse(503, code: "temporarily_unavailable",
                                                       description: "The rate-limit store is unavailable", challenge: nil,
                                                       extra: [("retry-after", "5")], body: errorBody(routeIndex))
        response.authReason = Self.unavailableReason
        return response
    }

    /// The access log's `auth_reason` when the shared store did not answer under `deny`.
    public static let unavailableReason = "rate_limit_unavailable"

    /// What `rule` counts a request under: the identity's id or claim, else the client address.
    static func key(_ kind: RateLimitRule.Key, grant: AuthGrant?, client: ClientOrigin) -> RateLimitKey {
        switch kind {
        case .user:
            if let user = grant?.userID { return RateLimitKey(identity: user) }
        case .claim(let name):
            if let identity = grant?.identity as? VerifiedIdentity, let value = identity.claim(name) {
                return RateLimitKey(identity: value)
            }
        case .clientAddress:
            break
        }
        return RateLimitKey(address: client.address)
    }

    func refusal(_ rule: RateLimitRule, _ decision: GCRA.Decision, routeIndex: Int) -> LocalResponse {
        let retry = max(1, RateLimitRule.seconds(rounding: decision.retryAfterMicroseconds))
        var response = EdgeAuthenticator.errorResponse(
            429, code: "rate_limited", description: "Too many requests; retry in \(retry) s", challenge: nil,
            extra: [("retry-after", String(retry)), ("ratelimit-policy", rule.policyHeader), ("ratelimit", rule.limitHeader(decision))],
            body: errorBody(routeIndex))
        response.authReason = Self.limitedReason
        return response
    }

    private func errorBody(_ routeIndex: Int) -> ErrorBodyTemplate {
        routeIndex < errorBodies.count ? errorBodies[routeIndex] : .oauth
    }
}

/// A key as the store holds it: an identity (user id or claim) or an address, kept apart so
/// a user id that reads like an address never shares a budget with that address.
public struct RateLimitKey: Hashable, Sendable {
    public let isAddress: Bool
    public let value: String
    public init(identity: String) { isAddress = false; value = identity }
    public init(address: String) { isAddress = true; value = address }
}

/// Where a request came from, read while its head is at hand (a deferred decision is limited
/// after the head is gone): the peer, or, when the peer is a trusted proxy, the nearest
/// address in `X-Forwarded-For` that is not one (as nginx's `real_ip_recursive`).
struct ClientOrigin {
    let peer: SocketAddress
    let forwarded: String?

    init(_ request: RequestView, trustedProxies: [CIDR]) {
        peer = request.peer
        guard !trustedProxies.isEmpty, trustedProxies.contains(where: { $0.contains(request.peer.addressBytes) }) else {
            forwarded = nil
            return
        }
        var hops: [Substring] = []
        request.values(of: "x-forwarded-for") { value in
            let text = String(decoding: value, as: UTF8.self)
            hops += text.split(separator: ",").map { $0.trimmingSpaces }
        }
        var found: String?
        for hop in hops.reversed() {
            guard let bytes = Self.addressBytes(hop) else { break }  // garbage: stop trusting the chain
            found = String(hop)
            if !trustedProxies.contains(where: { $0.contains(bytes) }) { break }
        }
        forwarded = found
    }

    var address: String { forwarded ?? peer.host }

    static func addressBytes(_ text: Substring) -> [UInt8]? {
        let host = String(text)
        guard host.first?.isHexDigit == true || host.first == ":" else { return nil }  // numeric only
        let literal = host.contains(":") ? "[\(host)]:0" : "\(host):0"
        return (try? SocketAddress(parsing: literal))?.addressBytes
    }
}

extension Substring {
    fileprivate var trimmingSpaces: Substring {
        var text = self
        while text.first == " " || text.first == "\t" { text.removeFirst() }
        while text.last == " " || text.last == "\t" { text.removeLast() }
        return text
    }
}

/// Receives a deferred decision, limits it, and passes it on to the request (on its loop).
final class LimitedResumption: DeferredDecisionTarget {
    let original: AuthResumption
    let limiter: RateLimitingAuthenticator
    let rules: [RateLimitRule]
    let routeIndex: Int
    let client: ClientOrigin

    init(original: AuthResumption, limiter: RateLimitingAuthenticator, rules: [RateLimitRule], routeIndex: Int,
         client: ClientOrigin) {
        self.original = original
        self.limiter = limiter
        self.rules = rules
        self.routeIndex = routeIndex
        self.client = client
    }

    func resumeAuthentication(_ outcome: AuthOutcome, generation: UInt64) {
        let limited = limiter.limit(outcome, rules: rules, routeIndex: routeIndex, client: client, resumption: original)
        // Deferred again (the shared store): the store's answer goes to the original itself.
        if case .deferred = limited { return }
        original.target.resumeAuthentication(limited, generation: generation)
    }
}

/// An outcome (a grant is a class the exchange reads on its loop) carried through the
/// store's completion to the resumption, which applies it on the request's loop.
final class CarriedOutcome: @unchecked Sendable {
    // @unchecked Sendable: set before the store is asked, taken once in its completion.
    private var outcome: AuthOutcome?
    init(_ outcome: AuthOutcome) { self.outcome = outcome }
    func take() -> AuthOutcome {
        defer { outcome = nil }
        return outcome ?? .anonymous
    }
}
