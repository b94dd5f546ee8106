import Foundation
import PortcullisTestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Review finding #33.2, as a class: "sign out everywhere" filed under any of a user's names
/// (the ID provider's bare `sub`, `<provider>:<sub>`, the lookup hook's id) refuses everything
/// issued before its cutoff, at the exchange (a replayed ID token mints nothing), on routes
/// and at refresh; and `revoke_on_success` with a session access token ends its session.
@Suite(.serialized) struct SignOutEverywhereEndToEndTests {
    static let adminToken = "signout-admin-token-0123456789abcdef"

    static func idToken(_ g: GatewayProcess, sub: String, age: String = "0s") throws -> String {
        String(try AuthFixtures.mint(g, "google", ["--sub", sub, "--age", age]).dropFirst("Authorization: Bearer ".count))
    }

    static var now: Int { Int(Date().timeIntervalSince1970) }

    /// A refusal of an ID token at the exchange: `400 invalid_grant` (RFC 6749 §5.2), whether
    /// the route's own check refused it (under the provider's names) or the exchange did.
    static func refusedExchange(_ r: (status: Int, body: String)) -> Bool {
        r.status == 400 && r.body.contains("\"error\":\"invalid_grant\"") && (r.body.contains("revoked") || r.body.contains("signed out"))
    }

    static func exchange(_ g: GatewayProcess, _ idToken: String) -> (status: Int, body: String) {
        E2E.curl(["-X", "POST", "-H", "content-type: application/json", "-d", "{\"idToken\":\"\(idToken)\"}", "\(g.url)/auth/session"])
    }

    static func revoke(_ g: GatewayProcess, subject: String, before: Int) -> Int {
        E2E.curl(["-X", "POST", "-H", "Authorization: Bearer \(adminToken)", "-d", "{\"subject\":\"\(subject)\",\"before\":\(before)}",
                  "http://127.0.0.1:\(g.adminPort)/revocations"]).status
    }

    static func undo(_ g: GatewayProcess, subject: String) -> Int {
        E2E.curl(["-X", "DELETE", "-H", "Authorization: Bearer \(adminToken)", "-d", "{\"subject\":\"\(subject)\"}",
                  "http://127.0.0.1:\(g.adminPort)/revocations"]).status
    }

    static func config(_ upstream: EchoUpstream, store: String = "", lookupPort: UInt16? = nil, signingKey: String? = nil) -> String {
        """
        \(AuthFixtures.providers)
        sessions:
          issuer: "https://api.example.test"
          accept: [google]
          \(signingKey.map { "access_token: {signing_keys: [\"\($0)\"]}" } ?? "")
          \(lookupPort == nil ? "" : "user: {lookup: {upstream: users, path: /internal/users/resolve, timeout: 2s}}")
          refresh_token: {secret: "\(SessionsEndToEndTests.secret)"}
          require_tls: false
        \(store)
        upstreams:
          app: {url: "http://127.0.0.1:\(upstream.port)"}
          \(lookupPort.map { "users: {url: \"http://127.0.0.1:\($0)\"}" } ?? "")
        routes:
          - {path: /api/logout, upstream: app, auth: required, revoke_on_success: true}
          - {path: /api, upstream: app, auth: required}
        """
    }

    /// The user's session is `google:117`; a sign-out filed under it or under the bare
    /// `117` refuses the old ID token at the exchange, the session's access token and its
    /// refresh; an ID token issued after the cutoff signs in again.
    @Test(arguments: [("google:117", "embedded"), ("117", "embedded"), ("google:117", "redis"), ("117", "redis")])
    func aSignOutUnderAnyNameRefusesWhatCameBefore(name: String, store: String) throws {
        let upstream = try EchoUpstream()
        var redis: RedisProcess?
        var storeLine = ""
        var key: String?
        if store == "redis" {
            let process = try RedisProcess()
            redis = process
            storeLine = "store: {redis: \"redis://127.0.0.1:\(process.port)/0\"}"
            let path = NSTemporaryDirectory() + "signout-es256-\(UUID().uuidString).pem"
            E2E.run("/usr/bin/openssl", ["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", path])
            key = path
        }
        defer { _ = redis }
        let g = try GatewayProcess(Self.config(upstream, store: storeLine, signingKey: key), adminToken: Self.adminToken)
        let old = try Self.idToken(g, sub: "117", age: "60s")
        let signedIn = Self.exchange(g, old)
        let pair = try #require(SessionsEndToEndTests.pair(signedIn.body), "\(signedIn)")
        #expect(pair.user == "google:117")
        #expect(SessionsEndToEndTests.api(g, pair.access).status == 200)

        // Signed out everywhere after the session began (the cutoff is a second ahead).
        let cutoff = Self.now + 1
        #expect(Self.revoke(g, subject: name, before: cutoff) == 201)
        let replayed = Self.exchange(g, old)
        #expect(Self.refusedExchange(replayed), "the old ID token mints nothing: \(replayed)")
        #expect(SessionsEndToEndTests.api(g, pair.access).status == 401, "the session's access token")
        let refreshed = SessionsEndToEndTests.refresh(g, pair.refresh)
        #expect(refreshed.status == 400 && refreshed.body.contains("revoked"), "\(refreshed)")
        // A Bearer ID token on a route is refused under either name too.
        #expect(E2E.curl(["-H", "Authorization: Bearer \(old)", "\(g.url)/api/x"]).status == 401)

        // Once the clock is past the cutoff, a new sign-in makes a session that lasts.
        while Self.now <= cutoff { usleep(50_000) }
        let fresh = Self.exchange(g, try Self.idToken(g, sub: "117"))
        let again = try #require(SessionsEndToEndTests.pair(fresh.body), "a sign-in after the cutoff works: \(fresh)")
        #expect(SessionsEndToEndTests.api(g, again.access).status == 200)
        #expect(SessionsEndToEndTests.refresh(g, again.refresh).status == 200)
        // Another user is untouched.
        #expect(Self.exchange(g, try Self.idToken(g, sub: "118", age: "60s")).status == 200)
    }

    /// With the lookup hook the session's user is the app's id (`u-117`): a sign-out under it,
    /// under `117` or under `google:117` refuses the old ID token, the access token and refresh.
    @Test func aSignOutUnderTheLookupIdOrTheProviderSubject() throws {
        let upstream = try EchoUpstream()
        let port = Loopback.freePort()
        let log = NSTemporaryDirectory() + "signout-lookup-\(UUID().uuidString).jsonl"
        let app = try RedisProcess.spawn(["/usr/bin/python3", E2E.packageRoot.appendingPathComponent(
            "Tests/PortcullisEndToEndTests/Fixtures/lookup_app.py").path, "\(port)", log], stdout: nil)
        defer { kill(app, SIGKILL); var s: Int32 = 0; waitpid(app, &s, 0) }
        #expect(Loopback.waitForPort(port))
        let g = try GatewayProcess(Self.config(upstream, lookupPort: port), adminToken: Self.adminToken)
        let old = try Self.idToken(g, sub: "117", age: "60s")
        for name in ["u-117", "117", "google:117"] {
            let signedIn = Self.exchange(g, old)
            let pair = try #require(SessionsEndToEndTests.pair(signedIn.body), "\(name): \(signedIn)")
            #expect(pair.user == "u-117")
            #expect(SessionsEndToEndTests.api(g, pair.access).status == 200)
            #expect(Self.revoke(g, subject: name, before: Self.now + 1) == 201)
            let replayed = Self.exchange(g, old)
            #expect(Self.refusedExchange(replayed), "\(name): \(replayed)")
            if name == "u-117" { #expect(replayed.status == 400, "only the exchange knows the app's id: \(replayed)") }
            #expect(SessionsEndToEndTests.api(g, pair.access).status == 401, "\(name)")
            #expect(SessionsEndToEndTests.refresh(g, pair.refresh).status == 400, "\(name)")
            #expect(Self.undo(g, subject: name) == 200, "\(name)")
        }
        #expect(Self.exchange(g, old).status == 200, "with every sign-out undone the old ID token signs in")
    }

    /// `revoke_on_success` with a session access token ends its session: the refresh token and
    /// every access token it issued are refused, on every instance.
    @Test func revokeOnSuccessWithASessionTokenEndsTheSession() throws {
        let upstream = try EchoUpstream()
        let g = try GatewayProcess(Self.config(upstream), adminToken: Self.adminToken)
        let pair = try #require(SessionsEndToEndTests.pair(Self.exchange(g, try Self.idToken(g, sub: "200")).body))
        let next = try #require(SessionsEndToEndTests.pair(SessionsEndToEndTests.refresh(g, pair.refresh).body))
        let other = try #require(SessionsEndToEndTests.pair(Self.exchange(g, try Self.idToken(g, sub: "200")).body))
        #expect(E2E.curl(["-X", "POST", "-H", "Authorization: Bearer \(next.access)", "\(g.url)/api/logout"]).status == 200)
        // The revocation is written after the app's answer: wait for it to be enforced.
        var refused = false
        for _ in 0..<100 where !refused {
            refused = SessionsEndToEndTests.api(g, next.access).status == 401
            if !refused { usleep(20_000) }
        }
        #expect(refused)
        #expect(SessionsEndToEndTests.api(g, pair.access).status == 401, "the session's earlier access token")
        let refreshed = SessionsEndToEndTests.refresh(g, next.refresh)
        #expect(refreshed.status == 400 && refreshed.body.contains("invalid_grant"), "\(refreshed)")
        #expect(SessionsEndToEndTests.api(g, other.access).status == 200, "the user's other session stays")
        #expect(SessionsEndToEndTests.refresh(g, other.refresh).status == 200)
    }
}
