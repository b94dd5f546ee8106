import Foundation
import Logging
import PortcullisAuth
import PortcullisCore
import PortcullisHTTP
import PortcullisIO
import Synchronization
import Testing
@testable import PortcullisEdgeAuth
@testable import PortcullisProxy

/// The edge-auth policy in process: requests parsed from bytes, decided by a real
/// `CredentialVerifier` (an HS256 app provider) without sockets. Revocation is a table in
/// the test (the real stores are exercised end to end).
@Suite struct EdgeAuthenticatorTests {
    static let secret = "an-app-secret-of-at-least-32-bytes!!!"
    static let loop = EventLoop(index: 0)
    static var now: Int64 { Int64(Date().timeIntervalSince1970) }

    static func token(sub: String = "user-1", exp: Int64? = nil, extra: [(String, JSONValue)] = []) throws -> String {
        try TokenMinter.hs256(secret: secret, claims: .object(
            [("sub", .string(sub)), ("iss", "app"), ("aud", "mobile"), ("iat", .integer(now)),
             ("exp", .integer(exp ?? now + 600))] + extra))
    }

    /// Records revocation checks and revocations; answers `decision`.
    final class Revocations: RevocationChecking, @unchecked Sendable {
        // @unchecked Sendable: guarded by `lock`.
        private let lock = NSLock()
        var decision = RevocationDecision.allowed
        private(set) var revoked: [String] = []
        func check(loopIndex: Int, identity: VerifiedIdentity, userID: String, now: Int64) -> RevocationDecision {
            lock.withLock { decision }
        }
        func revokePresented(identity: VerifiedIdentity, userID: String, completion: @escaping @Sendable (Bool) -> Void) {
            lock.withLock { revoked.append(userID) }
            completion(true)
        }
        var revokedUsers: [String] { lock.withLock { revoked } }
    }

    /// Takes deferred decisions (none are expected here: the keys are the secret).
    final class Recorder: DeferredDecisionTarget {
        func resumeAuthentication(_ outcome: AuthOutcome, generation: UInt64) {}
    }

    struct Fixture {
        let authenticator: EdgeAuthenticator
        let routes: RouteTable
        let revocations = Revocations()

        init(_ settings: [(path: String, mode: AuthMode, auth: RouteAuthSettings)],
             identity: IdentitySettings = IdentitySettings(), claimHeaders: [(claim: String, header: String)] = [],
             assertion: AssertionKeys? = nil, userIdHeader: String? = nil, sharing shared: CredentialVerifier? = nil) throws {
            var app = ProviderConfiguration(name: "app", kind: .hs256)
            app.secret = EdgeAuthenticatorTests.secret
            app.issuer = "app"
            app.audiences = ["mobile"]
            // The claims the policy reads are extracted at verification (as the loader sets up).
            for claim in claimHeaders.map(\.claim) + settings.flatMap({ $0.auth.requiredClaims.map(\.claim) })
            where !app.forwardedClaims.contains(claim) {
                app.forwardedClaims.append(claim)
            }
            let verifier = try shared ?? CredentialVerifier(providers: [app], keys: [:])
            var proxy = ProxyConfiguration(
                routes: settings.map { RouteConfiguration(pathPrefix: $0.path, upstream: "app", auth: $0.mode) },
                upstreams: [UpstreamConfiguration(name: "app", address: try SocketAddress(parsing: "127.0.0.1:9"))])
            proxy.claimHeaders = claimHeaders
            if let userIdHeader { proxy.userIdHeader = userIdHeader }
            let configuration = EdgeAuthConfiguration(proxy: proxy, routeAuth: settings.map(\.auth), identity: identity)
            authenticator = EdgeAuthenticator(verifier: verifier, configuration: configuration, revocations: revocations,
                                              keys: nil, counters: nil, logger: Logger(label: "test"),
                                              assertionKeys: assertion)
            routes = RouteTable(proxy.routes, upstreamNames: ["app"])
        }

        /// Parses `head` (CRLFs added) and decides on it; `body` for a `.needsBody` answer.
        func decide(_ head: String, body: String? = nil) throws -> AuthOutcome {
            let bytes = Array((head.replacingOccurrences(of: "\n", with: "\r\n") + "\r\n\r\n").utf8)
            return try bytes.withUnsafeBytes { raw in
                var parser = RequestHeadParser()
                var parsed = RequestHead()
                guard case .complete = parser.parse(raw, into: &parsed) else { throw TestFailure("bad head") }
                let target = UnsafeRawBufferPointer(rebasing: raw[parsed.target])
                guard case .success(let normalized) = TargetNormalizer.normalize(target, form: parsed.targetForm) else {
                    throw TestFailure("bad target")
                }
                let view = RequestView(http1: parsed, bytes: UnsafeRawBufferPointer(rebasing: raw[0..<parsed.headLength]),
                                       path: normalized.path, query: normalized.query,
                                       peer: try SocketAddress(parsing: "127.0.0.1:1"), loop: EdgeAuthenticatorTests.loop)
                guard let route = routes.match(path: view.path, host: nil) else { throw TestFailure("no route") }
                let resumption = AuthResumption(target: Recorder(), generation: 1, loop: EdgeAuthenticatorTests.loop)
                let outcome = authenticator.authenticate(view, route: route, resumption: resumption)
                guard case .needsBody = outcome, let body else { return outcome }
                return Array(body.utf8).withUnsafeBytes {
                    authenticator.authenticate(view, route: route, body: $0, resumption: resumption)
                }
            }
        }
    }

    struct TestFailure: Error, CustomStringConvertible {
        let description: String
        init(_ d: String) { description = d }
    }

    static func refusal(_ outcome: AuthOutcome) -> LocalResponse? {
        if case .reject(let response) = outcome { return response }
        return nil
    }

    static func grant(_ outcome: AuthOutcome) -> AuthGrant? {
        if case .grant(let grant) = outcome { return grant }
        return nil
    }

    static func header(_ response: LocalResponse, _ name: String) -> String? {
        response.headers.first { $0.name.lowercased() == name }?.value
    }

    static func json(_ response: LocalResponse) -> [String: Any]? {
        (try? JSONSerialization.jsonObject(with: Data(response.body))) as? [String: Any]
    }

    static let required: [(path: String, mode: AuthMode, auth: RouteAuthSettings)] = [("/", .required, RouteAuthSettings())]

    // MARK: Finding the credential and answering

    @Test func noCredentialIsAChallengeWithTheRealmAndAnOAuthBody() throws {
        let fixture = try Fixture(Self.required)
        let response = try #require(Self.refusal(try fixture.decide("GET /a HTTP/1.1\nHost: x")))
        #expect(response.status == 401)
        #expect(Self.header(response, "www-authenticate") == #"Bearer realm="portcullis""#)
        #expect(Self.json(response)?["error"] as? String == "unauthorized")
    }

    @Test func aValidBearerTokenIsGrantedWithTheIdentityHeaders() throws {
        let fixture = try Fixture(Self.required, claimHeaders: [(claim: "email", header: "X-User-Email")])
        let token = try Self.token(extra: [("email", "a@example.com")])
        let grant = try #require(Self.grant(try fixture.decide("GET /a HTTP/1.1\nHost: x\nAuthorization: Bearer \(token)")))
        let headers = Dictionary(grant.headers.map { ($0.name, $0.value) }, uniquingKeysWith: { a, _ in a })
        #expect(headers["X-User-Id"] == "user-1")
        #expect(headers["X-Auth-Provider"] == "app")
        #expect(headers["X-User-Email"] == "a@example.com")
        #expect(grant.dropAuthorization == false)  // forward_authorization defaults to true
    }

    @Test func anExpiredTokenIsRefusedAsInvalidToken() throws {
        let fixture = try Fixture(Self.required)
        let token = try Self.token(exp: Self.now - 3600)
        let response = try #require(Self.refusal(try fixture.decide("GET /a HTTP/1.1\nHost: x\nAuthorization: Bearer \(token)")))
        #expect(response.status == 401)
        #expect(Self.header(response, "www-authenticate")?.contains(#"error="invalid_token""#) == true)
        #expect(Self.json(response)?["error"] as? String == "invalid_token")
    }

    @Test func twoCredentialsAreAnInvalidRequest() throws {
        let fixture = try Fixture(Self.required)
        let token = try Self.token()
        let twice = "GET /a HTTP/1.1\nHost: x\nAuthorization: Bearer \(token)\nAuthorization: Bearer \(token)"
        #expect(Self.refusal(try fixture.decide(twice))?.status == 400)
        let malformed = "GET /a HTTP/1.1\nHost: x\nAuthorization: Bearer a b"
        let response = try #require(Self.refusal(try fixture.decide(malformed)))
        #expect(response.status == 400)
        #expect(Self.json(response)?["error"] as? String == "invalid_request")
    }

    /// A header's token is looked up in the verified-token cache before its token68 syntax is
    /// checked: whatever was cached, a token that is not token68 is still a 400, every time.
    @Test func aCachedTokenSkipsTheSyntaxScanAndAMalformedOneIsRefusedEveryTime() throws {
        let fixture = try Fixture(Self.required)
        let token = try Self.token()
        for _ in 0..<2 {
            #expect(Self.grant(try fixture.decide("GET /a HTTP/1.1\nHost: x\nAuthorization: Bearer \(token)")) != nil)
        }
        #expect(fixture.authenticator.verifier.cacheStatistics().hits == 1)
        // The cached token with bytes outside token68 around or inside it, and "=" where only
        // padding may be: never a cache key that hits (the bytes differ), always the syntax's 400.
        for value in ["\(token)!", "\(token) x", "=\(token)", "\(token)=a", "a\\\\\(token)", "\(token),"] {
            for _ in 0..<2 {
                let response = try #require(Self.refusal(try fixture.decide("GET /a HTTP/1.1\nHost: x\nAuthorization: Bearer \(value)")))
                #expect(response.status == 400, "\(value.suffix(4))")
                #expect(Self.json(response)?["error"] as? String == "invalid_request")
            }
        }
        // Padding is token68: a token with it is verified (and refused as a JWS), not a syntax error.
        let padded = try #require(Self.refusal(try fixture.decide("GET /a HTTP/1.1\nHost: x\nAuthorization: Bearer \(token)==")))
        #expect(padded.status == 401)
        #expect(fixture.authenticator.verifier.cacheStatistics().hits == 1)
    }

    /// The user id and identity headers are kept on the cached identity and reused; an
    /// authenticator built later over the same verifier (a reload that changed the header
    /// names) injects its own names, whichever of the two served the token first.
    @Test func keptIdentityHeadersBelongToTheAuthenticatorThatMadeThem() throws {
        let first = try Fixture(Self.required, claimHeaders: [(claim: "email", header: "X-Email")])
        let second = try Fixture(Self.required, claimHeaders: [(claim: "email", header: "X-Mail")], userIdHeader: "X-Who",
                                 sharing: first.authenticator.verifier)
        let token = try Self.token(extra: [("email", "a@example.com")])
        let head = "GET /a HTTP/1.1\nHost: x\nAuthorization: Bearer \(token)"
        func names(_ fixture: Fixture) throws -> [String] {
            try #require(Self.grant(try fixture.decide(head))).headers.map { "\($0.name)=\($0.value)" }
        }
        let mine = ["X-User-Id=user-1", "X-Auth-Provider=app", "X-Email=a@example.com"]
        let theirs = ["X-Who=user-1", "X-Auth-Provider=app", "X-Mail=a@example.com"]
        #expect(try names(first) == mine)
        #expect(try names(second) == theirs)
        #expect(try names(first) == mine)
        #expect(try names(second) == theirs)
        // The first authenticator's grant is the one kept: the same object for every request.
        let a = try #require(Self.grant(try first.decide(head)))
        #expect(try #require(Self.grant(try first.decide(head))) === a)
        #expect(try #require(Self.grant(try second.decide(head))) !== a)
        #expect(a.userID == "user-1" && a.provider == "app" && !a.dropAuthorization)
        #expect((a.identity as? VerifiedIdentity)?.subject == "user-1")
        #expect(first.authenticator.verifier.cacheStatistics().hits >= 6)
    }

    /// A route that drops the `Authorization` header gets the kept grant that says so; a
    /// route with something of its own to add (a revoke-on-status observer) gets a grant
    /// made for the request. The kept values do not keep their identity alive: once the
    /// verifier's cache and the grants are gone, so are they (no reference cycle).
    @Test func keptGrantsFollowTheRoutePolicyAndDoNotOutliveTheirIdentity() throws {
        var dropping = RouteAuthSettings()
        dropping.forwardAuthorization = false
        var logout = RouteAuthSettings()
        logout.revokeOnStatuses.classes = [2]
        weak var kept: AnyObject?
        try {
            let fixture = try Fixture([("/drop", .required, dropping), ("/logout", .required, logout), ("/", .required, RouteAuthSettings())])
            let token = try Self.token()
            let plain = try #require(Self.grant(try fixture.decide("GET /a HTTP/1.1\nHost: x\nAuthorization: Bearer \(token)")))
            let dropped = try #require(Self.grant(try fixture.decide("GET /drop HTTP/1.1\nHost: x\nAuthorization: Bearer \(token)")))
            let observed = try #require(Self.grant(try fixture.decide("GET /logout HTTP/1.1\nHost: x\nAuthorization: Bearer \(token)")))
            #expect(!plain.dropAuthorization && dropped.dropAuthorization && plain !== dropped)
            #expect(try #require(Self.grant(try fixture.decide("GET /drop HTTP/1.1\nHost: x\nAuthorization: Bearer \(token)"))) === dropped)
            #expect(observed.observer != nil && observed !== plain)
            #expect(try #require(Self.grant(try fixture.decide("GET /logout HTTP/1.1\nHost: x\nAuthorization: Bearer \(token)"))) !== observed)
            kept = (plain.identity as? VerifiedIdentity).map { _ in plain }
            #expect(kept != nil)
        }()
        #expect(kept == nil)
    }

    @Test func optionalRoutesAndBypassedMethodsPassWithoutIdentity() throws {
        var preflight = RouteAuthSettings()
        preflight.bypassMethods = ["OPTIONS"]
        let fixture = try Fixture([("/open", .optional, RouteAuthSettings()), ("/", .required, preflight)])
        guard case .anonymous = try fixture.decide("GET /open/x HTTP/1.1\nHost: x") else { Issue.record("optional"); return }
        guard case .anonymous = try fixture.decide("OPTIONS /a HTTP/1.1\nHost: x") else { Issue.record("bypass"); return }
        #expect(Self.refusal(try fixture.decide("GET /a HTTP/1.1\nHost: x"))?.status == 401)
    }

    // MARK: Claim rules and revocation

    @Test func aClaimRuleNotMetIsInsufficientScope() throws {
        var admin = RouteAuthSettings()
        admin.requiredClaims = [RouteClaimRule(claim: "role", requirement: .equals("admin"))]
        let fixture = try Fixture([("/", .required, admin)])
        let user = try Self.token(extra: [("role", "user")])
        let response = try #require(Self.refusal(try fixture.decide("GET /a HTTP/1.1\nHost: x\nAuthorization: Bearer \(user)")))
        #expect(response.status == 403)
        #expect(Self.header(response, "www-authenticate")?.contains("insufficient_scope") == true)
        let boss = try Self.token(extra: [("role", "admin")])
        #expect(Self.grant(try fixture.decide("GET /a HTTP/1.1\nHost: x\nAuthorization: Bearer \(boss)")) != nil)
    }

    @Test func aRevokedCredentialIsRefusedAndAnUnavailableStoreIs503() throws {
        let fixture = try Fixture(Self.required)
        let request = "GET /a HTTP/1.1\nHost: x\nAuthorization: Bearer \(try Self.token())"
        fixture.revocations.decision = .revoked
        #expect(Self.refusal(try fixture.decide(request))?.status == 401)
        fixture.revocations.decision = .unavailable
        let response = try #require(Self.refusal(try fixture.decide(request)))
        #expect(response.status == 503)
        #expect(Self.header(response, "retry-after") == "5")
    }

    // MARK: Refusal bodies

    @Test func refusalBodiesTakeTheRouteShapeAndTheStatusNeverChanges() throws {
        var detail = RouteAuthSettings()
        detail.errorBody = try ErrorBodyTemplate.parse("detail").get()
        var templated = RouteAuthSettings()
        templated.errorBody = try ErrorBodyTemplate.parse(#"{"code": {status}, "why": {description}}"#).get()
        let fixture = try Fixture([("/d", .required, detail), ("/t", .required, templated)])
        let d = try #require(Self.refusal(try fixture.decide("GET /d HTTP/1.1\nHost: x")))
        #expect(d.status == 401)
        #expect(Self.json(d)?["detail"] as? String == "No credentials")
        let expired = try Self.token(exp: Self.now - 3600)
        let t = try #require(Self.refusal(try fixture.decide("GET /t HTTP/1.1\nHost: x\nAuthorization: Bearer \(expired)")))
        #expect(t.status == 401)
        #expect(Self.json(t)?["code"] as? Int == 401)
        #expect((Self.json(t)?["why"] as? String)?.isEmpty == false)
    }

    // MARK: The body credential

    @Test func aBodyCredentialRouteAsksForTheBodyAndDecidesOnIt() throws {
        var login = RouteAuthSettings()
        login.bodyCredential = BodyCredentialSettings(field: "idToken", maxBodyBytes: 1024)
        let fixture = try Fixture([("/login", .required, login)])
        let head = "POST /login HTTP/1.1\nHost: x\nContent-Length: 10"
        guard case .needsBody(let limit) = try fixture.decide(head) else { Issue.record("no body asked for"); return }
        #expect(limit == 1024)
        let token = try Self.token(sub: "from-body")
        let grant = try #require(Self.grant(try fixture.decide(head, body: #"{"idToken": "\#(token)"}"#)))
        #expect(grant.headers.first { $0.name == "X-User-Id" }?.value == "from-body")
        #expect(Self.refusal(try fixture.decide(head, body: "not json"))?.status == 400)
        // Without the member: a malformed request (400), as the apps' own handlers answer it.
        let missing = Self.refusal(try fixture.decide(head, body: #"{"other": 1}"#))
        #expect(missing?.status == 400 && String(decoding: missing?.body ?? [], as: UTF8.self).contains("no idToken member"))
    }

    // MARK: Revoke on success

    @Test func aLogoutRouteRevokesTheCredentialOnlyForItsStatuses() throws {
        var logout = RouteAuthSettings()
        logout.revokeOnStatuses.classes = [2]
        logout.revokeOnStatuses.codes = [302]
        let fixture = try Fixture([("/", .required, logout)])
        let request = "POST /logout HTTP/1.1\nHost: x\nAuthorization: Bearer \(try Self.token(sub: "leaving"))"
        for (status, revoked) in [(500, 0), (401, 0), (302, 1), (204, 2)] {
            let observer = try #require(Self.grant(try fixture.decide(request))?.observer)
            observer.upstreamAnswered(status: status)
            #expect(fixture.revocations.revokedUsers.count == revoked, "after \(status)")
        }
        #expect(fixture.revocations.revokedUsers == ["leaving", "leaving"])
    }

    // MARK: The identity assertion

    @Test func theIdentityAssertionIsSignedForTheUpstreamAndVerifies() throws {
        var settings = AssertionSettings(issuer: "https://edge.example")
        settings.algorithm = .hs256
        settings.secret = "an-assertion-secret-of-32-bytes-or-more"
        var identity = IdentitySettings()
        identity.assertion = settings
        let fixture = try Fixture(Self.required, identity: identity, assertion: try AssertionKeys(settings: settings))
        let grant = try #require(Self.grant(try fixture.decide("GET /a HTTP/1.1\nHost: x\nAuthorization: Bearer \(try Self.token())")))
        let assertion = try #require(grant.headers.first { $0.name == settings.header }?.value)
        var checker = ProviderConfiguration(name: "edge", kind: .hs256)
        checker.secret = settings.secret
        checker.issuer = settings.issuer
        checker.audiences = ["http://127.0.0.1:9"]
        let verified = try CredentialVerifier(providers: [checker], keys: [:]).verifyBearer(assertion, now: Date().timeIntervalSince1970)
        #expect(verified.identity?.subject == "user-1")
    }
}
