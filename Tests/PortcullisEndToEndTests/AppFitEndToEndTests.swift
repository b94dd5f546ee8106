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

    static func writeConfig(_ text: String) throws -> String {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("appfit-\(UUID().uuidString).yaml").path
        try text.write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }
}
