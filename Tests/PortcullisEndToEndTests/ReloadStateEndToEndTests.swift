import Foundation
import PortcullisTestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Review finding #33.3, as a class: a reload changes no security state it was not asked to
/// change. The store (revocations, sessions) is opened once and never replaced: a reload
/// naming another store is refused and changes nothing (no journal is reopened behind the
/// serving one), a `revocation:` policy change is applied in place and forgets nothing, no
/// Redis connection is opened or leaked by reloads; session signing keys are read again, a
/// replaced key keeps verifying beside the new one, a key removed from the list stops at once.
@Suite(.serialized) struct ReloadStateEndToEndTests {
    static let token = ReloadEndToEndTests.token

    static func config(_ upstream: EchoUpstream, store: String, revocation: String = "", keys: [String] = []) -> String {
        """
        \(AuthFixtures.providers)
        sessions:
          issuer: "https://api.example.test"
          accept: [google]
          \(keys.isEmpty ? "" : "access_token: {signing_keys: [\(keys.map { "\"\($0)\"" }.joined(separator: ", "))]}")
          refresh_token: {secret: "\(SessionsEndToEndTests.secret)"}
          require_tls: false
        \(store)
        \(revocation)
        upstreams:
          app: {url: "http://127.0.0.1:\(upstream.port)"}
        routes:
          - {path: /api, upstream: app, auth: required}
        """
    }

    /// Rewrites the running file: `body` replaces the part that came from `config`.
    static func rewrite(_ g: GatewayProcess, from old: String, to new: String) throws {
        let text = try String(contentsOfFile: g.configPath, encoding: .utf8)
        try #require(text.contains(old))
        try text.replacingOccurrences(of: old, with: new).write(toFile: g.configPath, atomically: true, encoding: .utf8)
    }

    static func revoke(_ g: GatewayProcess, jti: String) -> Int {
        E2E.curl(["-X", "POST", "-H", "Authorization: Bearer \(token)", "-d", "{\"jti\":\"\(jti)\"}",
                  "http://127.0.0.1:\(g.adminPort)/revocations"]).status
    }

    static func status(_ g: GatewayProcess, jti: String) throws -> Int {
        let credential = try AuthFixtures.mint(g, "app", ["--claim", "jti=\(jti)"])
        return E2E.curl(["-H", credential, "\(g.url)/api/x"]).status
    }

    static func signIn(_ g: GatewayProcess, sub: String) throws -> SessionsEndToEndTests.Pair {
        let (status, body) = try SessionsEndToEndTests.exchange(g, sub: sub)
        guard let pair = SessionsEndToEndTests.pair(body) else { throw TestFailure("sign-in \(status): \(body)") }
        return pair
    }

    @Test func aReloadNamingAnotherStoreIsRefusedAndNothingAcknowledgedIsLost() throws {
        let upstream = try EchoUpstream()
        let stateDir = FileManager.default.temporaryDirectory.appendingPathComponent("reload-state-\(UUID().uuidString)").path
        let storeLine = "store: {state_dir: \"\(stateDir)\"}"
        let key = NSTemporaryDirectory() + "reload-state-es256-\(UUID().uuidString).pem"
        E2E.run("/usr/bin/openssl", ["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", key])
        let body = Self.config(upstream, store: storeLine, keys: [key])
        var first: GatewayProcess? = try GatewayProcess(body, adminToken: Self.token)
        let g = try #require(first)
        #expect(Self.revoke(g, jti: "before") == 201)
        let a = try Self.signIn(g, sub: "301")
        let b = try Self.signIn(g, sub: "302")

        let redis = try RedisProcess()
        for (other, named) in [("store: {state_dir: \"\(stateDir)-other\"}", "store.state_dir"),
                               ("store: {redis: \"redis://127.0.0.1:\(redis.port)/0\"}", "the store kind"),
                               ("", "store.state_dir")] {
            try Self.rewrite(g, from: storeLine, to: other.isEmpty ? "store: {}" : other)
            let refused = ReloadEndToEndTests.post(g, "/reload")
            #expect(refused.status == 422 && refused.body.contains(named) && refused.body.contains("restart to apply it"), "\(refused)")
            try Self.rewrite(g, from: other.isEmpty ? "store: {}" : other, to: storeLine)
        }
        #expect(ReloadEndToEndTests.readyz(g)["generation"] as? Int == 1)
        #expect(!FileManager.default.fileExists(atPath: stateDir + "-other"), "a refused reload opened nothing")
        // What is acknowledged after the refusals lands in the serving journal.
        #expect(Self.revoke(g, jti: "after") == 201)
        #expect(E2E.curl(["-X", "POST", "-H", "Authorization: Bearer \(a.access)", "\(g.url)/auth/logout"]).status == 204)
        g.stop()
        first = nil

        let restarted = try GatewayProcess(body, adminToken: Self.token)
        #expect(try Self.status(restarted, jti: "before") == 401 && (try Self.status(restarted, jti: "after")) == 401)
        #expect(try Self.status(restarted, jti: "other") == 200)
        #expect(SessionsEndToEndTests.refresh(restarted, a.refresh).status == 400, "the logout held")
        #expect(SessionsEndToEndTests.refresh(restarted, b.refresh).status == 200, "the other session survived")
    }

    /// In memory (no state_dir): a reload that changes only `revocation:` forgets nothing.
    @Test func aPolicyChangeIsAppliedInPlaceAndForgetsNothing() throws {
        let upstream = try EchoUpstream()
        let policy = "revocation: {max_staleness: 30s}"
        let g = try GatewayProcess(Self.config(upstream, store: "", revocation: policy), adminToken: Self.token)
        #expect(Self.revoke(g, jti: "kept") == 201)
        let pair = try Self.signIn(g, sub: "401")
        try Self.rewrite(g, from: policy, to: "revocation: {max_staleness: 5s, on_unavailable: allow}")
        let applied = ReloadEndToEndTests.post(g, "/reload")
        #expect(applied.status == 200 && applied.body.contains("revocation policy applied in place"), "\(applied)")
        #expect(try Self.status(g, jti: "kept") == 401, "the revocation is still enforced")
        #expect(SessionsEndToEndTests.api(g, pair.access).status == 200)
        let next = SessionsEndToEndTests.refresh(g, pair.refresh)
        #expect(next.status == 200, "the session is still there: \(next)")
    }

    /// With Redis, reloads open no connection and leak none: the server's client count after
    /// twenty reloads (policy changes among them) is what it was.
    @Test func reloadsNeitherOpenNorLeakRedisConnections() throws {
        let upstream = try EchoUpstream()
        let redis = try RedisProcess()
        let key = NSTemporaryDirectory() + "reload-es256-\(UUID().uuidString).pem"
        E2E.run("/usr/bin/openssl", ["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", key])
        let store = "store: {redis: \"redis://127.0.0.1:\(redis.port)/0\"}"
        let g = try GatewayProcess(Self.config(upstream, store: store, revocation: "revocation: {max_staleness: 30s}", keys: [key]),
                                   adminToken: Self.token)
        let pair = try Self.signIn(g, sub: "501")
        #expect(Self.revoke(g, jti: "kept") == 201)
        func clients() -> Int {
            let (_, out, _) = E2E.run("/usr/bin/redis-cli", ["-p", "\(redis.port)", "CLIENT", "LIST"])
            return out.split(separator: "\n").filter { !$0.contains("cmd=client") }.count
        }
        let before = clients()
        var staleness = 30
        for round in 0..<20 {
            let next = round % 2 == 0 ? staleness + 1 : staleness
            try Self.rewrite(g, from: "max_staleness: \(staleness)s", to: "max_staleness: \(next)s")
            staleness = next
            #expect(ReloadEndToEndTests.post(g, "/reload").status == 200)
        }
        #expect(clients() == before, "connections before: \(before), after: \(clients())")
        try Self.rewrite(g, from: store, to: "store: {redis: \"redis://127.0.0.1:\(redis.port)/1\"}")
        let refused = ReloadEndToEndTests.post(g, "/reload")
        #expect(refused.status == 422 && refused.body.contains("store.redis"), "\(refused)")
        #expect(clients() == before)
        #expect(try Self.status(g, jti: "kept") == 401)
        #expect(SessionsEndToEndTests.refresh(g, pair.refresh).status == 200)
    }

    /// A replaced signing key file rotates: new tokens are signed with the new key, the old
    /// key's tokens keep verifying and both are published; a key file removed from the list
    /// stops verifying at once.
    @Test func sessionSigningKeysRotateWithAnOverlap() throws {
        let upstream = try EchoUpstream()
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("reload-keys-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        func generate(_ path: String) {
            E2E.run("/usr/bin/openssl", ["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", path])
        }
        let main = dir + "/main.pem", spare = dir + "/spare.pem"
        generate(main)
        generate(spare)
        let g = try GatewayProcess(Self.config(upstream, store: "", keys: [main, spare]), adminToken: Self.token)
        func kid(_ token: String) -> String? {
            guard let header = Data(base64Encoded: SessionsEndToEndTests.padded(String(token.split(separator: ".")[0]))),
                  let object = try? JSONSerialization.jsonObject(with: header) as? [String: Any] else { return nil }
            return object["kid"] as? String
        }
        func published() -> [String] {
            let body = E2E.curl(["\(g.url)/.well-known/portcullis/jwks.json"]).body
            let object = (try? JSONSerialization.jsonObject(with: Data(body.utf8))) as? [String: Any]
            return (object?["keys"] as? [[String: Any]] ?? []).compactMap { $0["kid"] as? String }
        }
        let before = try Self.signIn(g, sub: "601")
        let oldKid = try #require(kid(before.access))
        #expect(published().count == 2)

        // The main key file is replaced (written beside and renamed): a rotation.
        generate(main + ".next")
        #expect(rename(main + ".next", main) == 0)
        let applied = ReloadEndToEndTests.post(g, "/reload")
        #expect(applied.status == 200 && applied.body.contains("session signing keys rotated"), "\(applied)")
        let after = try Self.signIn(g, sub: "602")
        let newKid = try #require(kid(after.access))
        #expect(newKid != oldKid, "new tokens are signed with the new key")
        #expect(SessionsEndToEndTests.api(g, before.access).status == 200, "the old key's token still verifies")
        #expect(SessionsEndToEndTests.api(g, after.access).status == 200)
        #expect(Set(published()).isSuperset(of: [oldKid, newKid]) && published().count == 3, "\(published())")

        // The spare key (verifying, never signing) leaves the list: a token it signed is refused
        // at once; the rotated-out main key is still within its overlap.
        let spareKid = try #require(published().first { $0 != oldKid && $0 != newKid })
        let script = """
        import jwt, sys, time
        now = int(time.time())
        key = open(sys.argv[1]).read()
        print(jwt.encode({"iss": "https://api.example.test", "aud": "https://api.example.test", "sub": "google:603",
                          "iat": now, "exp": now + 600, "jti": "spare-1"}, key, algorithm="ES256", headers={"kid": sys.argv[2]}))
        """
        let (minted, out, err) = E2E.run("/usr/bin/python3", ["-c", script, spare, spareKid])
        try #require(minted == 0, "\(err)")
        let spareToken = out.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(SessionsEndToEndTests.api(g, spareToken).status == 200, "the spare key verifies while listed")
        try Self.rewrite(g, from: "signing_keys: [\"\(main)\", \"\(spare)\"]", to: "signing_keys: [\"\(main)\"]")
        #expect(ReloadEndToEndTests.post(g, "/reload").status == 200)
        #expect(Set(published()) == [oldKid, newKid], "\(published())")
        #expect(SessionsEndToEndTests.api(g, spareToken).status == 401, "a key removed from the list stops verifying")
        #expect(SessionsEndToEndTests.api(g, before.access).status == 200, "the rotated-out key is still in its overlap")
    }
}
