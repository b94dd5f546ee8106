import Foundation
import PortcullisAuth
import PortcullisCore
import PortcullisHTTP
import PortcullisIO
import Testing
@testable import PortcullisEdgeAuth
@testable import PortcullisProxy
@testable import PortcullisRateLimit

/// The wrapper in process, around an inner authenticator whose decision the test sets:
/// requests parsed from bytes, routes from a real `RouteTable`, the real embedded store.
@Suite struct RateLimitingAuthenticatorTests {
    static let loop = EventLoop(index: 0)

    /// Answers what the test says; `.deferred` keeps the resumption for the test to resume.
    final class Inner: RequestAuthenticator, @unchecked Sendable {
        // @unchecked Sendable: the tests call it from one thread.
        var answer: () -> AuthOutcome = { .anonymous }
        var parked: AuthResumption?
        func authenticate(_ request: RequestView, route: Route, resumption: AuthResumption) -> AuthOutcome {
            let outcome = answer()
            if case .deferred = outcome { parked = resumption }
            return outcome
        }
        func authenticate(_ request: RequestView, route: Route, body: UnsafeRawBufferPointer,
                          resumption: AuthResumption) -> AuthOutcome {
            authenticate(request, route: route, resumption: resumption)
        }
    }

    /// Where a deferred decision lands.
    final class Recorder: DeferredDecisionTarget, @unchecked Sendable {
        // @unchecked Sendable: `outcomes` only under the semaphore's hand-off.
        let arrived = DispatchSemaphore(value: 0)
        var outcome: AuthOutcome?
        var generation: UInt64 = 0
        func resumeAuthentication(_ outcome: AuthOutcome, generation: UInt64) {
            self.outcome = outcome
            self.generation = generation
            arrived.signal()
        }
    }

    struct Fixture {
        let inner = Inner()
        let limiter: RateLimitingAuthenticator
        let routes: RouteTable
        let store = EmbeddedRateLimitStore()

        init(_ rules: [RateLimitRule], paths: [String] = ["/api", "/open"], errorBody: ErrorBodyTemplate = .oauth,
             trusted: [String] = []) throws {
            let configurations = paths.map { RouteConfiguration(pathPrefix: $0, upstream: "app", auth: .optional) }
            routes = RouteTable(configurations, upstreamNames: ["app"])
            limiter = RateLimitingAuthenticator(wrapping: inner, settings: RateLimitSettings(rules: rules), routePaths: paths,
                                                errorBodies: paths.map { _ in errorBody }, backend: .embedded(store),
                                                trustedProxies: trusted.compactMap(CIDR.init))
        }

        func decide(_ head: String, peer: String = "192.0.2.7:5000", resumption: AuthResumption? = nil) throws -> AuthOutcome {
            let bytes = Array((head.replacingOccurrences(of: "\n", with: "\r\n") + "\r\n\r\n").utf8)
            return try bytes.withUnsafeBytes { raw in
                var parser = RequestHeadParser()
                var parsed = RequestHead()
                guard case .complete = parser.parse(raw, into: &parsed) else { throw Failure("bad head") }
                let target = UnsafeRawBufferPointer(rebasing: raw[parsed.target])
                guard case .success(let normalized) = TargetNormalizer.normalize(target, form: parsed.targetForm) else {
                    throw Failure("bad target")
                }
                let view = RequestView(http1: parsed, bytes: UnsafeRawBufferPointer(rebasing: raw[0..<parsed.headLength]),
                                       path: normalized.path, query: normalized.query,
                                       peer: try SocketAddress(parsing: peer), loop: RateLimitingAuthenticatorTests.loop)
                guard let route = routes.match(path: view.path, host: nil) else { throw Failure("no route") }
                let resumption = resumption ?? AuthResumption(target: Recorder(), generation: 1, loop: RateLimitingAuthenticatorTests.loop)
                return limiter.authenticate(view, route: route, resumption: resumption)
            }
        }
    }

    struct Failure: Error, CustomStringConvertible {
        let description: String
        init(_ d: String) { description = d }
    }

    static func grant(user: String, claims: [String: String] = [:]) -> AuthOutcome {
        let identity = VerifiedIdentity(provider: "app", subject: user, issuer: "app", expiresAt: 2e9, issuedAt: nil,
                                        tokenID: nil, sessionID: nil, claims: claims, source: .bearer)
        return .grant(AuthGrant(headers: [("X-User-Id", user)], identity: identity, userID: user))
    }

    static func refusal(_ outcome: AuthOutcome?) -> LocalResponse? {
        if case .reject(let response) = outcome { return response }
        return nil
    }

    static func header(_ response: LocalResponse, _ name: String) -> String? {
        response.headers.first { $0.name == name }?.value
    }

    static func passes(_ outcome: AuthOutcome) -> Bool { refusal(outcome) == nil }

    @Test func eachUserHasTheirOwnBudgetAndPastItGets429WithTheDraftsHeaders() throws {
        let fixture = try Fixture([RateLimitRule(name: "per-user", routes: nil, key: .user, count: 1, periodSeconds: 60, burst: 2)])
        fixture.inner.answer = { Self.grant(user: "alice") }
        #expect(Self.passes(try fixture.decide("GET /api/x HTTP/1.1\nHost: a")))
        #expect(Self.passes(try fixture.decide("GET /api/x HTTP/1.1\nHost: a")))
        let response = try #require(Self.refusal(try fixture.decide("GET /api/x HTTP/1.1\nHost: a")))
        #expect(response.status == 429)
        #expect(response.authReason == "rate_limited")
        let retry = try #require(Self.header(response, "retry-after").flatMap { Int($0) })
        #expect(retry >= 59 && retry <= 60)  // one interval (60 s) past the burst
        #expect(Self.header(response, "ratelimit-policy") == "\"per-user\";q=2;w=120")
        #expect(Self.header(response, "ratelimit")?.hasPrefix("\"per-user\";r=0;t=") == true)
        #expect(Self.header(response, "cache-control") == "no-store")
        let body = try #require(try JSONSerialization.jsonObject(with: Data(response.body)) as? [String: String])
        #expect(body["error"] == "rate_limited")
        #expect(body["error_description"]?.contains("retry in") == true)
        // Another user is not touched; the same user from another address is still limited.
        fixture.inner.answer = { Self.grant(user: "bob") }
        #expect(Self.passes(try fixture.decide("GET /api/x HTTP/1.1\nHost: a")))
        fixture.inner.answer = { Self.grant(user: "alice") }
        #expect(!Self.passes(try fixture.decide("GET /api/x HTTP/1.1\nHost: a", peer: "198.51.100.1:1")))
    }

    @Test func anonymousRequestsCountUnderTheirAddressAndRefusalsAreNotCounted() throws {
        let fixture = try Fixture([RateLimitRule(name: "r", routes: nil, key: .user, count: 1, periodSeconds: 60, burst: 1)])
        fixture.inner.answer = { .reject(LocalResponse.error(401, "no")) }
        for _ in 0..<5 {
            #expect(Self.refusal(try fixture.decide("GET /api HTTP/1.1\nHost: a"))?.status == 401)
        }
        fixture.inner.answer = { .anonymous }
        #expect(Self.passes(try fixture.decide("GET /api HTTP/1.1\nHost: a")))
        #expect(Self.refusal(try fixture.decide("GET /api HTTP/1.1\nHost: a"))?.status == 429)
        #expect(Self.passes(try fixture.decide("GET /api HTTP/1.1\nHost: a", peer: "192.0.2.8:5000")))
        #expect(Self.passes(try fixture.decide("GET /api HTTP/1.1\nHost: a", peer: "[2001:db8::1]:5000")))
    }

    @Test func rulesApplyOnlyToTheirRoutesAndTheRouteErrorShape() throws {
        let fixture = try Fixture([RateLimitRule(name: "api", routes: ["/api"], key: .clientAddress, count: 1, periodSeconds: 60, burst: 1)],
                                  errorBody: try ErrorBodyTemplate.parse("detail").get())
        fixture.inner.answer = { Self.grant(user: "alice") }
        for _ in 0..<3 { #expect(Self.passes(try fixture.decide("GET /open HTTP/1.1\nHost: a"))) }
        #expect(Self.passes(try fixture.decide("GET /api HTTP/1.1\nHost: a")))
        let response = try #require(Self.refusal(try fixture.decide("GET /api HTTP/1.1\nHost: a")))
        let body = try #require(try JSONSerialization.jsonObject(with: Data(response.body)) as? [String: String])
        #expect(body["detail"]?.contains("Too many requests") == true)
    }

    @Test func aClaimKeyCountsByTheClaimAndFallsBackToTheAddress() throws {
        let fixture = try Fixture([RateLimitRule(name: "tenant", routes: nil, key: .claim("tid"), count: 1, periodSeconds: 60, burst: 1)])
        fixture.inner.answer = { Self.grant(user: "alice", claims: ["tid": "acme"]) }
        #expect(Self.passes(try fixture.decide("GET /api HTTP/1.1\nHost: a")))
        fixture.inner.answer = { Self.grant(user: "bob", claims: ["tid": "acme"]) }
        #expect(!Self.passes(try fixture.decide("GET /api HTTP/1.1\nHost: a")))
        fixture.inner.answer = { Self.grant(user: "carol") }
        #expect(Self.passes(try fixture.decide("GET /api HTTP/1.1\nHost: a")))
        #expect(!Self.passes(try fixture.decide("GET /api HTTP/1.1\nHost: a")))
    }

    @Test func behindATrustedProxyTheForwardedClientIsTheKeyAndOthersCannotChooseIt() throws {
        let fixture = try Fixture([RateLimitRule(name: "ip", routes: nil, key: .clientAddress, count: 1, periodSeconds: 60, burst: 1)],
                                  trusted: ["10.0.0.0/8"])
        fixture.inner.answer = { .anonymous }
        // Through the proxy: the rightmost untrusted hop counts, whatever the client put left of it.
        #expect(Self.passes(try fixture.decide("GET /api HTTP/1.1\nHost: a\nX-Forwarded-For: 1.1.1.1, 203.0.113.5, 10.1.1.1", peer: "10.0.0.2:1")))
        #expect(!Self.passes(try fixture.decide("GET /api HTTP/1.1\nHost: a\nX-Forwarded-For: 9.9.9.9, 203.0.113.5", peer: "10.0.0.3:1")))
        #expect(Self.passes(try fixture.decide("GET /api HTTP/1.1\nHost: a\nX-Forwarded-For: 203.0.113.6", peer: "10.0.0.2:1")))
        // An untrusted peer's X-Forwarded-For is ignored: it is counted as itself.
        #expect(Self.passes(try fixture.decide("GET /api HTTP/1.1\nHost: a\nX-Forwarded-For: 203.0.113.9", peer: "192.0.2.50:1")))
        #expect(!Self.passes(try fixture.decide("GET /api HTTP/1.1\nHost: a\nX-Forwarded-For: 203.0.113.10", peer: "192.0.2.50:1")))
    }

    @Test func aDeferredDecisionIsLimitedWhenItArrives() throws {
        let fixture = try Fixture([RateLimitRule(name: "r", routes: nil, key: .user, count: 1, periodSeconds: 60, burst: 1)])
        fixture.inner.answer = { Self.grant(user: "alice") }
        #expect(Self.passes(try fixture.decide("GET /api HTTP/1.1\nHost: a")))
        fixture.inner.answer = { .deferred }
        let recorder = Recorder()
        let outcome = try fixture.decide("GET /api HTTP/1.1\nHost: a", resumption: AuthResumption(target: recorder, generation: 7, loop: Self.loop))
        guard case .deferred = outcome else { Issue.record("expected deferred"); return }
        let parked = try #require(fixture.inner.parked)
        parked.resume(Self.grant(user: "alice"))
        #expect(recorder.arrived.wait(timeout: .now() + 10) == .success)
        #expect(recorder.generation == 7)
        #expect(Self.refusal(recorder.outcome)?.status == 429)
    }
}
