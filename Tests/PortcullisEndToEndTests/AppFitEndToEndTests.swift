import Foundation
import PortcullisTestSupport
import Testing

/// Tokens as the five apps' own backends issue them, minted by the tests with PyJWT
/// (Fixtures/mint_jwt.py), through the real binary: issue 15's app-fit behaviour.
@Suite(.serialized) struct AppFitEndToEndTests {
    static let mintScript = E2E.packageRoot.appendingPathComponent("Tests/PortcullisEndToEndTests/Fixtures/mint_jwt.py").path
    static let secret = "golfai-app-secret-0123456789abcdef0123"

    static func mint(_ claims: String, secret: String = secret) throws -> String {
        let (status, out, err) = E2E.run("/usr/bin/python3", [mintScript, secret, claims])
        guard status == 0 else { throw TestFailure("mint_jwt: \(err)") }
        return out.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// An app JWT naming its user `userId` (golfai, FolioMind), a nested Firebase claim
    /// forwarded and required by its dotted path.
    @Test func userIdFromAnotherClaimAndNestedClaimsByDottedPath() throws {
        let upstream = try EchoUpstream()
        let gateway = try GatewayProcess("""
        providers:
          - {name: app, type: hs256, secret: "\(Self.secret)", user_id_claim: userId}
          - {name: nested, type: hs256, secret: "nested-secret-0123456789abcdef012345", user_id_claim: account.id,
             forward_claims: [firebase.sign_in_provider]}
        identity: {user_id_header: X-User-Id, claims: {firebase.sign_in_provider: X-Sign-In-Provider}}
        upstreams:
          app: {url: "http://127.0.0.1:\(upstream.port)"}
        routes:
          - {path: /google-only, upstream: app, auth: required, providers: [nested], require_claims: {firebase.sign_in_provider: google.com}}
          - {path: /, upstream: app, auth: required}
        """)
        func get(_ path: String, _ token: String) -> (status: Int, body: String) {
            E2E.curl(["-H", "Authorization: Bearer \(token)", "\(gateway.url)\(path)"])
        }
        // `userId` as a string and as an integer; `sub` (absent or different) is not the user id.
        let stringId = try Self.mint(#"{"userId": "golfer-7", "sub": "not-this", "exp": "+600"}"#)
        let byString = get("/rounds", stringId)
        #expect(byString.status == 200)
        #expect(try Echo(byString.body).values("x-user-id") == ["golfer-7"])
        let numeric = get("/rounds", try Self.mint(#"{"userId": 42, "exp": "+600"}"#))
        #expect(numeric.status == 200)
        #expect(try Echo(numeric.body).values("x-user-id") == ["42"])
        // `portcullis mint` puts the user in the provider's user_id_claim, nested for a dotted one.
        let minted = get("/rounds", String(try gateway.mint(["--provider", "app", "--sub", "golfer-9"]).dropFirst("Authorization: Bearer ".count)))
        let mintedUser = try Echo(minted.body).values("x-user-id")
        #expect(minted.status == 200 && mintedUser == ["golfer-9"], "\(minted)")
        let nestedMint = get("/other", String(try gateway.mint(["--provider", "nested", "--sub", "acct-9"]).dropFirst("Authorization: Bearer ".count)))
        let nestedUser = try Echo(nestedMint.body).values("x-user-id")
        #expect(nestedMint.status == 200 && nestedUser == ["acct-9"], "\(nestedMint)")
        // No `userId`: refused, even with a `sub`.
        let missing = get("/rounds", try Self.mint(#"{"sub": "someone", "exp": "+600"}"#))
        #expect(missing.status == 401, "\(missing)")
        #expect(get("/rounds", try Self.mint(#"{"userId": {"id": 1}, "exp": "+600"}"#)).status == 401, "an object is no user id")

        // Dotted paths: the user id and a forwarded, required claim inside nested objects.
        let nestedSecret = "nested-secret-0123456789abcdef012345"
        let google = try Self.mint(#"{"account": {"id": "acct-1"}, "firebase": {"sign_in_provider": "google.com"}, "exp": "+600"}"#,
                                   secret: nestedSecret)
        let ok = get("/google-only/x", google)
        #expect(ok.status == 200, "\(ok)")
        let echo = try Echo(ok.body)
        #expect(echo.values("x-user-id") == ["acct-1"])
        #expect(echo.values("x-sign-in-provider") == ["google.com"])
        let password = try Self.mint(#"{"account": {"id": "acct-2"}, "firebase": {"sign_in_provider": "password"}, "exp": "+600"}"#,
                                     secret: nestedSecret)
        #expect(get("/google-only/x", password).status == 403)
        // A claim whose own name has dots is found before the path.
        let literal = try Self.mint(#"{"account.id": "literal", "account": {"id": "nested"}, "exp": "+600"}"#, secret: nestedSecret)
        #expect(try Echo(get("/other", literal).body).values("x-user-id") == ["literal"])
    }

    /// FastAPI clients read `{"detail": …}`; another route keeps its own shape. Status and
    /// `WWW-Authenticate` stay as they were.
    @Test func refusalBodiesTakeTheAppsShapeGloballyAndPerRoute() throws {
        let upstream = try EchoUpstream()
        let gateway = try GatewayProcess("""
        providers:
          - {name: app, type: hs256, secret: "\(Self.secret)"}
        identity: {error_body: detail}
        upstreams:
          app: {url: "http://127.0.0.1:\(upstream.port)"}
        routes:
          - {path: /express, upstream: app, auth: required, error_body: '{"ok": false, "error": {"code": {error}, "status": {status}, "message": {description}}}'}
          - {path: /oauth, upstream: app, auth: required, error_body: oauth}
          - {path: /web, upstream: app, auth: required, on_unauthenticated: redirect, sign_in_url: /signin}
          - {path: /, upstream: app, auth: required}
        """)
        func refusal(_ path: String, _ arguments: [String] = []) throws -> (status: Int, body: [String: Any], challenge: String) {
            let (_, out, _) = E2E.run("/usr/bin/curl", ["-s", "-i", "--max-time", "10"] + arguments + ["\(gateway.url)\(path)"])
            let parts = out.components(separatedBy: "\r\n\r\n")
            let head = parts.first ?? ""
            let status = Int(head.split(separator: " ").dropFirst().first ?? "") ?? 0
            let challenge = head.components(separatedBy: "\r\n").first { $0.lowercased().hasPrefix("www-authenticate:") } ?? ""
            let body = try JSONSerialization.jsonObject(with: Data(parts.dropFirst().joined().utf8)) as? [String: Any] ?? [:]
            return (status, body, challenge)
        }
        let missing = try refusal("/visits")
        #expect(missing.status == 401)
        #expect(missing.body as? [String: String] == ["detail": "No credentials"], "\(missing.body)")
        #expect(missing.challenge.contains("Bearer realm=\"portcullis\""))
        let expired = try Self.mint(#"{"sub": "u1", "exp": "-3600", "iat": "-7200"}"#)
        let late = try refusal("/visits", ["-H", "Authorization: Bearer \(expired)"])
        #expect(late.status == 401)
        #expect((late.body["detail"] as? String ?? "").lowercased().contains("expired"), "\(late.body)")
        #expect(late.challenge.contains("error=\"invalid_token\""), "the challenge keeps the RFC 6750 code")
        let express = try refusal("/express/x", ["-H", "Authorization: Bearer \(expired)"])
        let error = express.body["error"] as? [String: Any]
        #expect(express.status == 401 && express.body["ok"] as? Bool == false)
        #expect(error?["code"] as? String == "invalid_token" && error?["status"] as? Int == 401, "\(express.body)")
        // A sign-in redirect's body has the same shape (browsers follow the Location).
        let signIn = try refusal("/web/page")
        #expect(signIn.status == 302 && signIn.body as? [String: String] == ["detail": "Sign in required"], "\(signIn.body)")
        let oauth = try refusal("/oauth/x")
        #expect(oauth.body["error"] as? String == "unauthorized" && oauth.body["error_description"] as? String == "No credentials")
    }

    /// The embedded store keeps what it acknowledged across a restart (`store.state_dir`);
    /// without one it says once, at start, that it will not.
    @Test func embeddedRevocationsSurviveARestartWithAStateDirectory() throws {
        let upstream = try EchoUpstream()
        let stateDir = FileManager.default.temporaryDirectory.appendingPathComponent("state-\(UUID().uuidString)").path
        let config = """
        providers:
          - {name: app, type: hs256, secret: "\(Self.secret)"}
        store: {state_dir: "\(stateDir)"}
        upstreams:
          app: {url: "http://127.0.0.1:\(upstream.port)"}
        routes:
          - {path: /, upstream: app, auth: required}
        """
        let adminToken = "admin-token-0123456789abcdef"
        let token = try Self.mint(#"{"sub": "carol", "jti": "t-1", "exp": "+3600", "iat": "-10"}"#)
        let old = try Self.mint(#"{"sub": "dave", "jti": "t-2", "exp": "+3600", "iat": "-10"}"#)
        var first: GatewayProcess? = try GatewayProcess(config, adminToken: adminToken)
        let g1 = try #require(first)
        #expect(g1.log.contains("revocations restored"))
        #expect(E2E.curl(["-H", "Authorization: Bearer \(token)", "\(g1.url)/x"]).status == 200)
        let admin = ["-X", "POST", "-H", "Authorization: Bearer \(adminToken)", "http://127.0.0.1:\(g1.adminPort)/revocations"]
        #expect(E2E.curl(admin + ["-d", #"{"jti":"t-1"}"#]).status == 201)
        #expect(E2E.curl(admin + ["-d", #"{"subject":"dave"}"#]).status == 201)
        g1.stop()
        first = nil

        let g2 = try GatewayProcess(config, adminToken: adminToken)
        #expect(g2.waitForLog("\"entries\":\"2\""), "\(g2.log)")
        let refused = E2E.curl(["-H", "Authorization: Bearer \(token)", "\(g2.url)/x"])
        #expect(refused.status == 401 && refused.body.contains("revoked"), "the acknowledged revocation survived the restart")
        #expect(E2E.curl(["-H", "Authorization: Bearer \(old)", "\(g2.url)/x"]).status == 401, "so did sign-out-everywhere")
        let other = try Self.mint(#"{"sub": "erin", "jti": "t-3", "exp": "+3600"}"#)
        #expect(E2E.curl(["-H", "Authorization: Bearer \(other)", "\(g2.url)/x"]).status == 200)
        g2.stop()

        // A write cut short (no newline: never acknowledged) is skipped with a warning; an
        // unreadable line in the middle stops the start, naming the file and line.
        let file = stateDir + "/revocations.jsonl"
        let handle = try #require(FileHandle(forWritingAtPath: file))
        handle.seekToEndOfFile()
        handle.write(Data(#"{"kind":"token","id":"t-"#.utf8))
        try handle.close()
        let g3 = try GatewayProcess(config, adminToken: adminToken)
        #expect(g3.log.contains("incomplete"), "\(g3.log)")
        #expect(E2E.curl(["-H", "Authorization: Bearer \(token)", "\(g3.url)/x"]).status == 401)
        g3.stop()
        try ("garbage\n" + (try String(contentsOfFile: file, encoding: .utf8))).write(toFile: file, atomically: true, encoding: .utf8)
        let (status, _, err) = E2E.run(E2E.binary, ["run", "--config", try Self.writeConfig(config + "\nadmin: off")], timeout: 20)
        #expect(status != 0)
        #expect(err.contains("revocations.jsonl:1"), "\(err)")
    }

    /// "Sign out everywhere" for a user whose tokens carry no `iat`: a token issued before
    /// is refused, a fresh one after is not (judged by `exp` minus the provider's
    /// `max_lifetime`, the app's real access-token lifetime here: 1 h, as the seeds' apps).
    @Test func subjectRevocationJudgesTokensWithoutIatByTheirExpiry() throws {
        let upstream = try EchoUpstream()
        let adminToken = "admin-token-0123456789abcdef"
        let gateway = try GatewayProcess("""
        providers:
          - {name: app, type: hs256, secret: "\(Self.secret)", max_lifetime: 1h}
        upstreams:
          app: {url: "http://127.0.0.1:\(upstream.port)"}
        routes:
          - {path: /, upstream: app, auth: required}
        """, adminToken: adminToken)
        // Issued 20 minutes ago (expires in 40): no iat.
        let before = try Self.mint(#"{"sub": "frank", "exp": "+2400"}"#)
        #expect(E2E.curl(["-H", "Authorization: Bearer \(before)", "\(gateway.url)/x"]).status == 200)
        #expect(E2E.curl(["-X", "POST", "-H", "Authorization: Bearer \(adminToken)", "-d", #"{"subject":"frank"}"#,
                          "http://127.0.0.1:\(gateway.adminPort)/revocations"]).status == 201)
        #expect(E2E.curl(["-H", "Authorization: Bearer \(before)", "\(gateway.url)/x"]).status == 401)
        sleep(1)
        // The app signs the user in again: a fresh 1-hour token, still without iat.
        let after = try Self.mint(#"{"sub": "frank", "exp": "+3600"}"#)
        let fresh = E2E.curl(["-H", "Authorization: Bearer \(after)", "\(gateway.url)/x"])
        #expect(fresh.status == 200, "a token issued after the revocation is accepted: \(fresh.body)")
        // Another user is untouched.
        #expect(E2E.curl(["-H", "Authorization: Bearer \(try Self.mint(#"{"sub": "gina", "exp": "+600"}"#))", "\(gateway.url)/x"]).status == 200)
    }

    @Test func withoutAStateDirectoryTheGatewaySaysRevocationsAreNotKept() throws {
        let upstream = try EchoUpstream()
        let gateway = try GatewayProcess(upstream.openRoute)
        #expect(gateway.waitForLog("will not survive a restart"))
        #expect(gateway.log.components(separatedBy: "will not survive a restart").count == 2, "said once")
    }

    @Test func anErrorBodyThatIsNoJSONObjectIsRefusedAtStart() throws {
        let (status, _, err) = E2E.run(E2E.binary, ["check-config", try Self.writeConfig("""
        upstreams:
          app: {url: "http://127.0.0.1:1"}
        routes:
          - {path: /, upstream: app, auth: none, error_body: '{"detail": {description}'}
        """)])
        #expect(status != 0)
        #expect(err.contains("routes[0].error_body"), "\(err)")
    }

    @Test func aUserIdClaimThatIsNoNameIsRefusedAtStart() throws {
        let (status, _, err) = E2E.run(E2E.binary, ["check-config", try Self.writeConfig("""
        upstreams:
          app: {url: "http://127.0.0.1:1"}
        routes:
          - {path: /, upstream: app}
        providers:
          - {name: app, type: hs256, secret: "\(Self.secret)", user_id_claim: "a..b"}
        """)])
        #expect(status != 0)
        #expect(err.contains("user_id_claim"), "\(err)")
    }

    /// Every revocation can be undone (`DELETE /revocations`, `portcullis revoke --undo`); the
    /// embedded store keeps the undo across a restart.
    @Test func revocationsAreUndoneAndTheUndoSurvivesARestart() throws {
        let upstream = try EchoUpstream()
        let stateDir = FileManager.default.temporaryDirectory.appendingPathComponent("state-\(UUID().uuidString)").path
        let adminToken = "admin-token-0123456789abcdef"
        let config = """
        providers:
          - {name: app, type: hs256, secret: "\(Self.secret)"}
        store: {state_dir: "\(stateDir)"}
        upstreams:
          app: {url: "http://127.0.0.1:\(upstream.port)"}
        routes:
          - {path: /, upstream: app, auth: required}
        """
        var first: GatewayProcess? = try GatewayProcess(config, adminToken: adminToken)
        let g1 = try #require(first)
        let token = try Self.mint(#"{"sub": "hana", "jti": "u-1", "exp": "+3600", "iat": "-10"}"#)
        let kept = try Self.mint(#"{"sub": "ivan", "jti": "u-2", "exp": "+3600", "iat": "-10"}"#)
        let admin = "http://127.0.0.1:\(g1.adminPort)/revocations"
        let auth = ["-H", "Authorization: Bearer \(adminToken)"]
        func status(_ gateway: GatewayProcess, _ token: String) -> Int {
            E2E.curl(["-H", "Authorization: Bearer \(token)", "\(gateway.url)/x"]).status
        }
        #expect(E2E.curl(["-X", "POST"] + auth + ["-d", #"{"jti":"u-1"}"#, admin]).status == 201)
        #expect(E2E.curl(["-X", "POST"] + auth + ["-d", #"{"jti":"u-2"}"#, admin]).status == 201)
        #expect(E2E.curl(["-X", "POST"] + auth + ["-d", #"{"subject":"hana"}"#, admin]).status == 201)
        #expect(status(g1, token) == 401 && status(g1, kept) == 401)

        // The jti undone: still refused, by the subject's cutoff; that undone too: accepted.
        let undone = E2E.curl(["-X", "DELETE"] + auth + ["-d", #"{"jti":"u-1","exp":1900000000}"#, admin])
        #expect(undone.status == 200 && undone.body.contains("\"found\":true"), "\(undone)")
        #expect(status(g1, token) == 401)
        let (cli, out, err) = E2E.run(E2E.binary, ["revoke", "--config", g1.configPath, "--undo", "--subject", "hana"])
        #expect(cli == 0 && out.hasPrefix("200"), "\(out) \(err)")
        #expect(status(g1, token) == 200)
        #expect(status(g1, kept) == 401, "another revocation is untouched")
        let nothing = E2E.curl(["-X", "DELETE"] + auth + ["-d", #"{"session":"never-revoked"}"#, admin])
        #expect(nothing.status == 200 && nothing.body.contains("\"found\":false"))
        #expect(E2E.curl(["-X", "DELETE"] + auth + ["-d", #"{"jti":""}"#, admin]).status == 400)
        #expect(E2E.curl(["-X", "DELETE", "-d", #"{"jti":"u-2"}"#, admin]).status == 401, "the admin token is required")
        g1.stop()
        first = nil

        // After a restart: the undos held, the other revocation too.
        let g2 = try GatewayProcess(config, adminToken: adminToken)
        #expect(status(g2, token) == 200, "the undo survived the restart")
        #expect(status(g2, kept) == 401)
        let lines = try String(contentsOfFile: stateDir + "/revocations.jsonl", encoding: .utf8)
        #expect(!lines.contains("u-1") && !lines.contains("hana") && lines.contains("u-2"), "compacted at start: \(lines)")
    }

    /// An undo on one instance is seen by another sharing a real redis-server, at once
    /// (announced), and by an instance that starts afterwards (the key is gone).
    @Test func anUndoOnOneInstanceIsSeenByAnotherThroughRedis() throws {
        let redis = try RedisProcess()
        let upstream = try EchoUpstream()
        let adminToken = "admin-token-0123456789abcdef"
        let config = """
        providers:
          - {name: app, type: hs256, secret: "\(Self.secret)"}
        revocation: {max_staleness: 1d}
        store: {redis: "redis://127.0.0.1:\(redis.port)/0"}
        upstreams:
          app: {url: "http://127.0.0.1:\(upstream.port)"}
        routes:
          - {path: /, upstream: app, auth: required}
        """
        let a = try GatewayProcess(config, adminToken: adminToken)
        let b = try GatewayProcess(config, adminToken: adminToken)
        let token = try Self.mint(#"{"sub": "jun", "jti": "r-1", "exp": "+3600", "iat": "-10"}"#)
        let bearer = ["-H", "Authorization: Bearer \(token)"]
        #expect(waitUntil(5) { E2E.curl(bearer + ["\(b.url)/x"]).status == 200 })
        let (revoked, _, _) = E2E.run(E2E.binary, ["revoke", "--config", a.configPath, "--subject", "jun"])
        #expect(revoked == 0)
        #expect(waitUntil(5) { E2E.curl(bearer + ["\(b.url)/x"]).status == 401 })
        let (undone, out, err) = E2E.run(E2E.binary, ["revoke", "--config", a.configPath, "--undo", "--subject", "jun"])
        #expect(undone == 0, "\(out) \(err)")
        #expect(E2E.curl(bearer + ["\(a.url)/x"]).status == 200, "the instance that undid it")
        #expect(waitUntil(5) { E2E.curl(bearer + ["\(b.url)/x"]).status == 200 }, "the other instance")
        #expect(!redis.cli(["--scan"]).contains("portcullis:revoked:subject:jun"))
        let c = try GatewayProcess(config, adminToken: adminToken)
        #expect(waitUntil(5) { E2E.curl(bearer + ["\(c.url)/x"]).status == 200 })
        // Redis down: an undo is not acknowledged (the revocation would come back).
        #expect(E2E.run(E2E.binary, ["revoke", "--config", a.configPath, "--jti", "r-2"]).0 == 0)
        redis.stop()
        let refused = E2E.curl(["-X", "DELETE", "-H", "Authorization: Bearer \(adminToken)", "-d", #"{"jti":"r-2"}"#,
                                "http://127.0.0.1:\(a.adminPort)/revocations"])
        #expect(refused.status == 503, "\(refused)")
    }

    static func writeConfig(_ text: String) throws -> String {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("appfit-\(UUID().uuidString).yaml").path
        try text.write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }
}
