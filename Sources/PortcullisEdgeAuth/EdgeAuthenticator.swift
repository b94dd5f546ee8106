import Logging
import PortcullisAuth
import PortcullisCore
import PortcullisHTTP
import PortcullisIO
import PortcullisProxy

/// The gateway's authenticator: per route it accepts a Bearer token or a
/// session cookie, verifies it with `CredentialVerifier`, applies the route's
/// claim rules and the revocation check, and injects identity headers.
///
/// Answers follow RFC 6750 §3: no credential → 401 with a bare `Bearer realm`
/// challenge (or a redirect to the sign-in URL on browser routes); invalid,
/// expired or revoked → 401 `invalid_token`; malformed or ambiguous → 400
/// `invalid_request`; claims not met → 403 `insufficient_scope`; keys or
/// revocation store unavailable → 503. Bodies are `{"error": …, "error_description": …}`.
///
/// Threading: immutable after init; called on loop queues concurrently.
public final class EdgeAuthenticator: RequestAuthenticator {
    /// One route's rules, read on every request: a class, so a request holds it by one
    /// reference (as a struct of twenty fields it was copied, and each field retained, per
    /// request: 0.7 % of the authenticated h2 row's CPU in `perf`).
    final class RoutePolicy: Sendable {
        let mode: AuthMode
        let allowed: Set<String>?
        /// Session cookie names of the allowed cookie providers (empty: cookies are not looked at).
        let cookieNames: [String]
        let rules: [RouteClaimRule]
        let bypassMethods: [[UInt8]]
        let onUnauthenticated: UnauthenticatedAction
        let forwardAuthorization: Bool
        let forwardSessionCookie: Bool
        let revokeOnStatuses: StatusSet
        let onInvalid: InvalidCredentialAction
        /// The shape of this route's refusal bodies, and its 401 for no credential in that shape.
        let errorBody: ErrorBodyTemplate
        let challenge: LocalResponse
        /// `credential.json_field` (nil: the credential is in the head).
        let bodyField: [UInt8]?
        /// `bodyField` as configured, for descriptions that name it.
        let bodyFieldName: String?
        /// Providers accepted for the body credential.
        let bodyProviders: Set<String>?
        /// How much of the body is read for it (`credential.max_body`).
        let bodyLimit: Int?
        /// A second member name read when `bodyField` is absent (`id_token` beside `idToken`).
        let bodyAlternateField: [UInt8]?
        /// Without the member, the `Authorization: Bearer` token is the credential (with the
        /// route's providers), as on a head-credential route.
        let bodyBearerFallback: Bool
        /// See `RouteAuthSettings.refusesAsGrant`.
        let refusesAsGrant: Bool

        init(mode: AuthMode, allowed: Set<String>?, cookieNames: [String], rules: [RouteClaimRule],
             bypassMethods: [[UInt8]], onUnauthenticated: UnauthenticatedAction, forwardAuthorization: Bool,
             forwardSessionCookie: Bool, revokeOnStatuses: StatusSet, onInvalid: InvalidCredentialAction,
             errorBody: ErrorBodyTemplate, challenge: LocalResponse, bodyField: [UInt8]?, bodyFieldName: String?,
             bodyProviders: Set<String>?, bodyLimit: Int?, bodyAlternateField: [UInt8]?, bodyBearerFallback: Bool,
             refusesAsGrant: Bool) {
            self.mode = mode
            self.allowed = allowed
            self.cookieNames = cookieNames
            self.rules = rules
            self.bypassMethods = bypassMethods
            self.onUnauthenticated = onUnauthenticated
            self.forwardAuthorization = forwardAuthorization
            self.forwardSessionCookie = forwardSessionCookie
            self.revokeOnStatuses = revokeOnStatuses
            self.onInvalid = onInvalid
            self.errorBody = errorBody
            self.challenge = challenge
            self.bodyField = bodyField
            self.bodyFieldName = bodyFieldName
            self.bodyProviders = bodyProviders
            self.bodyLimit = bodyLimit
            self.bodyAlternateField = bodyAlternateField
            self.bodyBearerFallback = bodyBearerFallback
            self.refusesAsGrant = refusesAsGrant
        }
    }

    public let verifier: CredentialVerifier
    let policies: [RoutePolicy]
    /// Every session cookie name of every provider: what an app could read as a session.
    let sessionBases: [String]
    let realm: String
    let userIdHeader: String
    let providerHeader: String
    let claimHeaders: [(claim: String, header: String)]
    let prefixProvider: Bool
    let revocations: (any RevocationChecking)?
    let keys: (any KeyRefetching)?
    /// Decisions and revocation checks for `/metrics` (nil: not counted).
    let counters: AuthCounters?
    let logger: Logger
    /// Signs `identity.assertion` for upstreams (nil: none is sent).
    let assertions: AssertionIssuer?
    /// This authenticator, as the maker of the values it keeps on identities (`injected`).
    private let memoOwner = MemoOwner()

    public init(verifier: CredentialVerifier, configuration: EdgeAuthConfiguration,
                revocations: (any RevocationChecking)?, keys: (any KeyRefetching)?,
                counters: AuthCounters?, logger: Logger, assertionKeys: AssertionKeys? = nil) {
        self.verifier = verifier
        assertions = assertionKeys.map {
            AssertionIssuer(keys: $0, audiences: configuration.proxy.upstreams.map(\.url.origin),
                            claims: configuration.proxy.claimHeaders.map(\.claim), logger: logger)
        }
        self.realm = configuration.proxy.realm
        self.userIdHeader = configuration.proxy.userIdHeader
        self.providerHeader = configuration.proxy.providerHeader
        self.claimHeaders = configuration.proxy.claimHeaders
        self.prefixProvider = configuration.identity.prefixProvider
        self.revocations = revocations
        self.keys = keys
        self.counters = counters
        self.logger = logger
        let noCredential = AuthFailure(.noCredential).wwwAuthenticate(realm: configuration.proxy.realm)
        let cookieProviders = configuration.sessionCookies.filter { !$0.names.isEmpty }
        sessionBases = cookieProviders.flatMap(\.names)
        policies = configuration.proxy.routes.enumerated().map { index, route in
            let settings = index < configuration.routeAuth.count ? configuration.routeAuth[index] : RouteAuthSettings()
            let errorBody = configuration.errorBody(route: index)
            let allowed = route.providers.map(Set.init)
            let cookieNames = cookieProviders
                .filter { allowed?.contains($0.provider) ?? true }
                .flatMap(\.names)
            var challenge = settings.refusesAsGrant
                ? Self.errorResponse(400, code: "invalid_request", description: "The request has no ID token", challenge: nil,
                                     body: errorBody)
                : Self.errorResponse(401, code: "unauthorized", description: "No credentials",
                                     challenge: noCredential, body: errorBody)
            challenge.authReason = AuthCounters.noCredentialLabel
            return RoutePolicy(mode: route.auth, allowed: allowed, cookieNames: cookieNames, rules: settings.requiredClaims,
                               bypassMethods: settings.bypassMethods.sorted().map { Array($0.utf8) },
                               onUnauthenticated: settings.onUnauthenticated,
                               forwardAuthorization: settings.forwardAuthorization,
                               forwardSessionCookie: settings.forwardSessionCookie,
                               revokeOnStatuses: settings.revokeOnStatuses, onInvalid: settings.onInvalid,
                               errorBody: errorBody,
                               challenge: challenge,
                               bodyField: settings.bodyCredential.map { Array($0.field.utf8) },
                               bodyFieldName: settings.bodyCredential?.field,
                               bodyProviders: settings.bodyCredential.flatMap { $0.providers.map(Set.init) } ?? allowed,
                               bodyLimit: settings.bodyCredential?.maxBodyBytes,
                               bodyAlternateField: settings.bodyCredential?.alternateField.map { Array($0.utf8) },
                               bodyBearerFallback: settings.bodyCredential?.bearerFallback ?? false,
                               refusesAsGrant: settings.refusesAsGrant)
        }
    }

    // MARK: Deciding

    public func authenticate(_ request: RequestView, route: Route, resumption: AuthResumption) -> AuthOutcome {
        authenticate(request, route: route, resumption: resumption, headOnly: false)
    }

    /// `headOnly`: decide on the head's credential even on a body-credential route (its
    /// Bearer fallback, once the body had no member).
    private func authenticate(_ request: RequestView, route: Route, resumption: AuthResumption, headOnly: Bool) -> AuthOutcome {
        let policy = policies[route.index]
        if policy.mode == .none { return .anonymous }
        if !policy.bypassMethods.isEmpty {
            let method = request.methodBytes
            if policy.bypassMethods.contains(where: { $0.elementsEqual(method) }) { return .anonymous }
        }
        // The credential is a member of the JSON body: the exchange reads it and asks again.
        // Only a WebSocket handshake (a bodiless GET, as the parser decided for the forwarder
        // too) is decided on its head; any other Upgrade leaves a request whose body is read.
        if !headOnly, let limit = policy.bodyLimit, !request.webSocketUpgrade { return .needsBody(limit: limit) }

        let now = WallClock.nowSeconds()
        let found = PresentedCredential.find(in: request, cookieNames: policy.cookieNames, sessionBases: sessionBases)
        let outcome: AuthOutcome
        switch found.credential {
        case .malformed(let reason):
            return rejectFailure(AuthFailure(reason), loopIndex: request.loop.index, policy: policy)
        case .none:
            outcome = unauthenticated(policy, request: request)
        case .bearer(let range):
            outcome = verifyToken(UnsafeRawBufferPointer(rebasing: request.bytes[range]), providers: policy.allowed,
                                  policy: policy, request: request, route: route, now: now, resumption: resumption,
                                  foreign: found.foreign, presentedAs: .accessToken, mustBeToken68: true)
        case .cookies(let jar):
            let result = verifier.verifySessionCookies(jar.pairs, providers: policy.allowed, now: now)
            outcome = decide(result, policy: policy, cookies: jar, request: request, loopIndex: request.loop.index, now: now,
                             upstream: route.upstreamIndex, presentedAs: .sessionCookie)
        }
        return Self.stripping(found.foreign, from: outcome)
    }

    /// Another provider's session cookies never reach the upstream: a request let through
    /// (with or without identity) forwards its Cookie field without them.
    static func stripping(_ foreign: ForeignSessionCookies?, from outcome: AuthOutcome) -> AuthOutcome {
        guard let foreign else { return outcome }
        switch outcome {
        case .anonymous: return .grant(foreign.strip(from: AuthGrant(headers: [])))
        case .grant(let grant): return .grant(foreign.strip(from: grant))
        case .reject, .deferred, .needsBody: return outcome
        }
    }

    /// A route whose credential is a member of its JSON body (`credential: {json_field}`):
    /// the `Authorization` header and session cookies are not looked at (a refresh call
    /// may carry an expired access token beside the refresh token); the body's token is
    /// verified with the credential's providers and then treated exactly as a Bearer token.
    public func authenticate(_ request: RequestView, route: Route, body: UnsafeRawBufferPointer,
                             resumption: AuthResumption) -> AuthOutcome {
        let policy = policies[route.index]
        guard let field = policy.bodyField else { return authenticate(request, route: route, resumption: resumption) }
        if policy.mode == .none { return .anonymous }
        if !policy.bypassMethods.isEmpty {
            let method = request.methodBytes
            if policy.bypassMethods.contains(where: { $0.elementsEqual(method) }) { return .anonymous }
        }
        // Session cookies are not this route's credential: any an app would read go.
        let foreign = PresentedCredential.find(in: request, cookieNames: [], sessionBases: sessionBases).foreign
        let member = AuthFailure.PresentedAs.bodyMember(policy.bodyFieldName ?? "")
        var found = BodyCredential.find(in: body, field: field)
        if case .absent = found, let alternate = policy.bodyAlternateField { found = BodyCredential.find(in: body, field: alternate) }
        if case .absent = found, policy.bodyBearerFallback {
            var bearer = false
            request.values(of: "authorization") { _ in bearer = true }
            // The Bearer token instead; without one either, the missing member is the answer (400).
            if bearer { return authenticate(request, route: route, resumption: resumption, headOnly: true) }
        }
        switch found {
        case .absent:
            // A required credential the body does not carry is a malformed request (400
            // invalid_request, as the apps' own handlers answer a body without `idToken`);
            // an optional route goes on without identity.
            if policy.mode == .required {
                counters?.decided(loopIndex: request.loop.index, provider: nil, .noCredential)
                return rejectFailure(AuthFailure(.missingBodyCredential), loopIndex: request.loop.index, policy: policy,
                                     presentedAs: member)
            }
            return Self.stripping(foreign, from: unauthenticated(policy, request: request))
        case .malformed:
            return rejectFailure(AuthFailure(.malformedBody), loopIndex: request.loop.index, policy: policy,
                                 presentedAs: member)
        case .token(let token):
            let outcome = token.withUnsafeBytes { bytes in
                verifyToken(bytes, providers: policy.bodyProviders, policy: policy, request: request, route: route,
                            now: WallClock.nowSeconds(), resumption: resumption, foreign: foreign, presentedAs: member,
                            mustBeToken68: false)
            }
            return Self.stripping(foreign, from: outcome)
        }
    }

    /// Verifies a Bearer-shaped token (from the header or a body member), parking the request
    /// while a provider's keys are refetched for an unknown `kid`. A header's token is looked
    /// up in the verified-token cache before its token68 syntax is checked: a hit is a token
    /// that passed (`CredentialVerifier.BearerLookup`), so the scan of every byte is skipped
    /// on the request path's common case. A body member is not token68-checked.
    private func verifyToken(_ token: UnsafeRawBufferPointer, providers: Set<String>?, policy: RoutePolicy,
                             request: RequestView, route: Route, now: Double, resumption: AuthResumption,
                             foreign: ForeignSessionCookies? = nil, presentedAs: AuthFailure.PresentedAs,
                             mustBeToken68: Bool) -> AuthOutcome {
        let lookup = verifier.lookUpBearer(token, providers: providers, now: now)
        if lookup.identity == nil, mustBeToken68, !PresentedCredential.isToken68(token) {
            return rejectFailure(AuthFailure(.malformedAuthorization), loopIndex: request.loop.index, policy: policy)
        }
        let result = verifier.verifyBearer(token, providers: providers, now: now, after: lookup)
        if case .failed(let failure) = result, failure.reason == .unknownKey || failure.reason == .keysUnavailable,
           let provider = failure.provider, let keys {
            // Park the request while the provider's keys are refetched.
            let copy = String(decoding: token, as: UTF8.self)
            let started = keys.refetchForUnknownKey(provider: provider, loop: resumption.loop) { [self] in
                // On the connection's loop: decide with the keys as they are now.
                let now = WallClock.nowSeconds()
                let retried = verifier.verifyBearer(copy, providers: providers, now: now)
                resumption.resume(Self.stripping(foreign, from: decide(retried, policy: policy, cookies: nil, request: nil,
                                         loopIndex: resumption.loop.index, now: now, upstream: route.upstreamIndex,
                                         presentedAs: presentedAs)))
            }
            if started { return .deferred }
        }
        return decide(result, policy: policy, cookies: nil, request: request, loopIndex: request.loop.index, now: now,
                      upstream: route.upstreamIndex, presentedAs: presentedAs)
    }

    /// `request` is nil when deciding after a deferral (the head is no longer readable).
    private func decide(_ result: VerificationResult, policy: RoutePolicy, cookies: CookieJar?, request: RequestView?,
                        loopIndex: Int, now: Double, upstream: Int, presentedAs: AuthFailure.PresentedAs) -> AuthOutcome {
        let identity: VerifiedIdentity
        switch result {
        case .failed(let failure):
            if failure.reason == .noCredential, let request { return unauthenticated(policy, request: request) }
            if let cookies, let request, let outcome = staleCookie(failure, policy: policy, cookies: cookies, request: request) {
                return outcome
            }
            return rejectFailure(failure, loopIndex: loopIndex, policy: policy, presentedAs: presentedAs)
        case .verified(let verified):
            identity = verified
        }
        for rule in policy.rules where !Self.satisfies(identity, rule) {
            return rejectFailure(AuthFailure(.requiredClaimMismatch, provider: identity.provider), loopIndex: loopIndex,
                                 policy: policy, presentedAs: presentedAs)
        }
        let injected = injected(identity)
        let userID = injected.userID
        if let revocations {
            let decision = revocations.check(loopIndex: loopIndex, identity: identity, userID: userID, now: Int64(now))
            counters?.revocationChecked(loopIndex: loopIndex, decision)
            switch decision {
            case .allowed: break
            case .revoked:
                let failure = AuthFailure(.revoked, provider: identity.provider)
                if let cookies, let request, let outcome = staleCookie(failure, policy: policy, cookies: cookies, request: request) {
                    return outcome
                }
                return rejectFailure(failure, loopIndex: loopIndex, policy: policy, presentedAs: presentedAs)
            case .unavailable:
                counters?.decided(loopIndex: loopIndex, provider: identity.provider, .storeUnavailable)
                var response = Self.errorResponse(503, code: "temporarily_unavailable",
                                                  description: "The revocation store is unavailable",
                                                  challenge: nil, extra: [("retry-after", "5")], body: policy.errorBody)
                response.authReason = AuthCounters.storeUnavailableLabel
                return .reject(response)
            }
        }
        counters?.decided(loopIndex: loopIndex, provider: identity.provider, .verified)

        // A route the gateway answers itself (upstream -1) has no app to assert to.
        let assertion = upstream >= 0 ? assertions.flatMap { $0.assertion(for: identity, userID: userID, upstream: upstream, now: now) } : nil
        let replacementCookie = policy.forwardSessionCookie ? nil : cookies.map { $0.header(removing: policy.cookieNames) }
        let observer = policy.revokeOnStatuses.isEmpty ? nil : revocations.map {
            RevokeOnSuccess(identity: identity, userID: userID, revocations: $0, statuses: policy.revokeOnStatuses, logger: logger)
        }
        guard assertion != nil || replacementCookie != nil || observer != nil else {
            // What this credential gets on every such route: the grant kept with it.
            return .grant(policy.forwardAuthorization ? injected.forwarding : injected.dropping)
        }
        var headers = injected.headers
        if let assertion, let assertions { headers.append((assertions.header, assertion)) }  // a copy: one allocation
        return .grant(AuthGrant(headers: headers, dropAuthorization: !policy.forwardAuthorization,
                                replacementCookie: replacementCookie, observer: observer,
                                identity: identity,  // one retain: the identity is a single reference
                                userID: userID, provider: identity.provider))
    }

    /// The user id, identity headers and grants of a verified identity, made once per
    /// credential: kept on its memo (`IdentityMemo.storeDerived`), which every hit of the
    /// verified-token cache shares, so an authenticated request on a route with nothing of
    /// its own to add (no assertion, no cookie to rewrite, no revoke-on-status observer)
    /// takes a grant instead of making one (two allocations and a handful of retains
    /// fewer per request). Made by this authenticator only: after a reload changed the
    /// header names, an identity still holding the old authenticator's gets its own built
    /// per request until its cache entry goes.
    private func injected(_ identity: VerifiedIdentity) -> InjectedIdentity {
        if let kept = identity.memo.derived as? InjectedIdentity, kept.owner === memoOwner { return kept }
        let userID = Self.userID(identity, prefixProvider: prefixProvider)
        var headers: [(name: String, value: String)] = []
        headers.reserveCapacity(2 + claimHeaders.count)
        headers.append((userIdHeader, userID))
        headers.append((providerHeader, identity.provider))
        for (claim, header) in claimHeaders {
            if let value = identity.claim(claim) { headers.append((header, value)) }
        }
        let made = InjectedIdentity(owner: memoOwner, userID: userID, headers: headers, identity: identity)
        identity.memo.storeDerived(made)
        return made
    }

    /// What `injected(_:)` keeps on an identity, and which authenticator made it.
    final class InjectedIdentity: Sendable {
        let owner: MemoOwner
        let userID: String
        /// The grants of a route that forwards the `Authorization` header, and of one that drops it.
        let forwarding: AuthGrant
        let dropping: AuthGrant
        /// The identity headers (both grants inject the same).
        var headers: [(name: String, value: String)] { forwarding.headers }

        /// The grants carry a copy of `identity` with storage of its own: the kept value
        /// must not refer to the storage that keeps it (a cycle nothing would break).
        init(owner: MemoOwner, userID: String, headers: [(name: String, value: String)], identity: VerifiedIdentity) {
            self.owner = owner
            self.userID = userID
            let carried = identity.withStorageOfItsOwn()
            forwarding = AuthGrant(headers: headers, dropAuthorization: false, identity: carried, userID: userID,
                                   provider: identity.provider)
            dropping = AuthGrant(headers: headers, dropAuthorization: true, identity: carried, userID: userID,
                                 provider: identity.provider)
        }
    }

    /// Names one authenticator as the maker of an identity's kept values (an object, not an
    /// address: a freed authenticator's address may be reused, this object's is not while
    /// a kept value refers to it).
    final class MemoOwner: Sendable {}

    /// The built-in provider of the gateway's own session access tokens (`sessions:`).
    public static let sessionProviderName = "session"

    /// The user id the gateway injects (and revokes by): the subject, prefixed with the
    /// provider under `identity.prefix_provider`; the session provider's subjects already
    /// name "<provider>:<sub>", so they are never prefixed ("session:…").
    @inline(__always)
    public static func userID(_ identity: VerifiedIdentity, prefixProvider: Bool) -> String {
        guard prefixProvider, identity.provider != sessionProviderName else { return identity.subject }
        return identity.provider + ":" + identity.subject
    }

    /// Every name "sign out everywhere" may have been filed under for one user, `user` (the
    /// id the gateway injects, or a session's user) first: the ID provider's bare `sub` and
    /// `<provider>:<sub>`, whichever of them `identity.prefix_provider` made the injected id,
    /// and for a session made through the lookup hook the app's id as well (its `user`).
    /// A revocation of any of them refuses what was issued before its cutoff: at the
    /// exchange, on routes and at refresh. `body` returns false to stop. Builds the prefixed
    /// name (one allocation): callers ask only once a subject revocation exists.
    public static func forEachUserName(user: String, provider: String?, subject: String?, _ body: (String) -> Bool) {
        guard body(user), let subject, !subject.isEmpty else { return }
        if subject != user, !body(subject) { return }
        guard let provider, !provider.isEmpty, provider != sessionProviderName else { return }
        let qualified = provider + ":" + subject
        if qualified != user { _ = body(qualified) }
    }

    /// `forEachUserName` for a verified credential: a session access token names its ID
    /// provider and that provider's subject in `idp` and `idp_sub`; any other credential is
    /// its own provider's.
    public static func forEachUserName(_ identity: VerifiedIdentity, userID: String, _ body: (String) -> Bool) {
        let (provider, subject) = identityProvider(of: identity)
        forEachUserName(user: userID, provider: provider, subject: subject, body)
    }

    /// The ID provider behind a credential and its subject there: a session access token's
    /// `idp`/`idp_sub`, any other credential's own provider and `sub`.
    public static func identityProvider(of identity: VerifiedIdentity) -> (provider: String?, subject: String?) {
        identity.provider == sessionProviderName ? (identity.claim("idp"), identity.claim("idp_sub"))
                                                 : (identity.provider, identity.subject)
    }

    private func unauthenticated(_ policy: RoutePolicy, request: RequestView) -> AuthOutcome {
        counters?.decided(loopIndex: request.loop.index, provider: nil, .noCredential)
        if policy.mode == .optional { return .anonymous }
        if let redirect = signInRedirect(policy, request: request, expiring: [], reason: AuthCounters.noCredentialLabel) { return redirect }
        return .reject(policy.challenge)
    }

    /// A browser's session cookie that failed (invalid, expired, decrypted by no secret,
    /// revoked) is treated as a web app treats it: on a redirect route the browser is sent
    /// to sign in, as without a cookie, and the stale cookie is expired; on an optional route
    /// with `on_invalid: anonymous` the request passes without identity and without the
    /// session cookie. Nil: refuse as usual.
    /// Bearer tokens are never treated so (an API client must learn its token is bad).
    private func staleCookie(_ failure: AuthFailure, policy: RoutePolicy, cookies: CookieJar,
                             request: RequestView) -> AuthOutcome? {
        guard failure.errorCode == .invalidToken, failure.reason != .keysUnavailable else { return nil }
        if policy.mode == .optional && policy.onInvalid == .anonymous {
            // Without identity, and without the refused cookie: an app that reads the cookie
            // itself (NextAuth's getServerSession) must not accept what the gateway refused.
            counters?.decided(loopIndex: request.loop.index, provider: failure.provider, .refused(failure.reason))
            return .grant(AuthGrant(headers: [], replacementCookie: cookies.header(removing: policy.cookieNames)))
        }
        let names = cookies.sessionCookieNames(of: policy.cookieNames)
        guard let redirect = signInRedirect(policy, request: request, expiring: names, reason: AuthCounters.label(failure.reason)) else { return nil }
        counters?.decided(loopIndex: request.loop.index, provider: failure.provider, .refused(failure.reason))
        return redirect
    }

    /// 302 to the route's sign-in URL with the original path and query in `callbackUrl`
    /// (as NextAuth's middleware does), for GET and HEAD on `on_unauthenticated: redirect`
    /// routes; `expiring` cookies are cleared with `Max-Age=0` (`Secure` for `__Secure-` and
    /// `__Host-` names, which browsers accept only so).
    private func signInRedirect(_ policy: RoutePolicy, request: RequestView, expiring: [Substring], reason: String) -> AuthOutcome? {
        guard case .redirect(let signIn) = policy.onUnauthenticated, Self.isSafeMethod(request.methodBytes) else { return nil }
        var callback = request.path
        if let query = request.query { callback += "?" + query }
        let separator = signIn.contains("?") ? "&" : "?"
        let location = signIn + separator + "callbackUrl=" + Self.percentEncode(callback)
        var headers: [(name: String, value: String)] = [("location", location), ("cache-control", "no-store")]
        for name in expiring {
            let secure = name.hasPrefix("__Secure-") || name.hasPrefix("__Host-") ? "; Secure" : ""
            headers.append(("set-cookie", "\(name)=; Path=/; Max-Age=0; Expires=Thu, 01 Jan 1970 00:00:00 GMT; HttpOnly; SameSite=Lax\(secure)"))
        }
        // The body takes the route's `error_body` shape, as every refusal's does.
        let body = policy.errorBody.render(status: 302, code: "unauthorized", description: "Sign in required")
        var response = LocalResponse(status: 302, headers: headers, body: Array(body.utf8))
        response.authReason = reason
        return .reject(response)
    }

    /// `presentedAs` names the credential in the description ("The refresh token expired").
    private func rejectFailure(_ failure: AuthFailure, loopIndex: Int, policy: RoutePolicy,
                               presentedAs: AuthFailure.PresentedAs = .accessToken) -> AuthOutcome {
        counters?.decided(loopIndex: loopIndex, provider: failure.provider, .refused(failure.reason))
        var response = refusal(failure, policy: policy, presentedAs: presentedAs)
        response.authReason = AuthCounters.label(failure.reason)
        return .reject(response)
    }

    /// The answer to a refused credential, in the route's shape.
    private func refusal(_ failure: AuthFailure, policy: RoutePolicy, presentedAs: AuthFailure.PresentedAs) -> LocalResponse {
        let body = policy.errorBody
        logger.debug("credential refused", metadata: ["reason": "\(failure.reason.rawValue)",
                                                      "provider": "\(failure.provider ?? "-")"])
        if failure.reason == .keysUnavailable {
            return Self.errorResponse(503, code: "temporarily_unavailable", description: "Signing keys are not available yet",
                                      challenge: nil, extra: [("retry-after", "5")], body: body)
        }
        if policy.refusesAsGrant {
            // The token endpoint's own codes: the grant (the ID token) is refused, or the
            // request itself is malformed.
            let code = failure.errorCode == .invalidRequest ? "invalid_request" : "invalid_grant"
            return Self.errorResponse(400, code: code, description: failure.description(presentedAs: presentedAs),
                                      challenge: nil, body: body)
        }
        let code = failure.errorCode?.rawValue ?? "invalid_token"
        return Self.errorResponse(failure.httpStatus, code: code, description: failure.description(presentedAs: presentedAs),
                                  challenge: failure.wwwAuthenticate(realm: realm, presentedAs: presentedAs), body: body)
    }

    // MARK: Helpers

    /// A refusal in a route's shape: `extra` headers, the challenge, `cache-control: no-store`
    /// and the rendered body (also the rate limiter's 429 and 503).
    public static func errorResponse(_ status: Int, code: String, description: String, challenge: String?,
                                     extra: [(name: String, value: String)] = [], body: ErrorBodyTemplate) -> LocalResponse {
        var headers = extra
        if let challenge { headers.append(("www-authenticate", challenge)) }
        headers.append(("cache-control", "no-store"))
        let text = body.render(status: status, code: code, description: description)
        return LocalResponse(status: status, headers: headers, body: Array(text.utf8))
    }

    static func isSafeMethod(_ method: UnsafeRawBufferPointer) -> Bool {
        method.elementsEqual("GET".utf8) || method.elementsEqual("HEAD".utf8)
    }

    /// RFC 3986 unreserved characters and '/' stay; everything else is %XX.
    static func percentEncode(_ text: String) -> String {
        let hex = Array("0123456789ABCDEF".utf8)
        var out = [UInt8]()
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
                 UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"),
                 UInt8(ascii: "~"), UInt8(ascii: "/"):
                out.append(byte)
            default:
                out.append(UInt8(ascii: "%"))
                out.append(hex[Int(byte >> 4)])
                out.append(hex[Int(byte & 15)])
            }
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// A route claim rule against the identity's forwarded claims. `oneOf`
    /// matches an element of an array claim, or a word of a space-separated
    /// `scope`/`scp` string (RFC 8693 §4.2), or the whole string.
    static func satisfies(_ identity: VerifiedIdentity, _ rule: RouteClaimRule) -> Bool {
        switch rule.requirement {
        case .present:
            return identity.claim(rule.claim) != nil
        case .equals(let expected):
            return identity.listClaims[rule.claim] == nil && identity.claim(rule.claim) == expected
        case .equalsBool(let expected):
            return identity.claim(rule.claim) == (expected ? "true" : "false")
        case .oneOf(let accepted):
            if let list = identity.listClaims[rule.claim] { return list.contains { accepted.contains($0) } }
            guard let value = identity.claim(rule.claim) else { return false }
            if rule.claim == "scope" || rule.claim == "scp" {
                return value.split(separator: " ").contains { accepted.contains(String($0)) }
            }
            return accepted.contains(value)
        }
    }
}
