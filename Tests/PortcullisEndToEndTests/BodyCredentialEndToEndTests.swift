import Foundation
import PortcullisTestSupport
import Testing

/// Credentials in a JSON request body (`credential: {json_field, providers}`), through the
/// real binary: a refresh route that never forwards a revoked or forged token and passes a
/// valid one's body through unchanged; an exchange route that forwards only a verified
/// Google ID token. Tokens are minted by the tests with PyJWT (HS256, and RS256 with the
/// local key host's keys).
@Suite(.serialized) struct BodyCredentialEndToEndTests {
    static let secret = AppFitEndToEndTests.secret
    static let adminToken = "admin-token-0123456789abcdef"

    static func mintRS256(_ host: KeyHost, kid: String, _ claims: String) throws -> String {
        let (status, out, err) = E2E.run("/usr/bin/python3", [AppFitEndToEndTests.mintScript, "--rs256", host.keyPath(kid), kid, claims])
        guard status == 0 else { throw TestFailure("mint_jwt: \(err)") }
        return out.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    static func post(_ url: String, _ body: String, _ extra: [String] = []) -> (status: Int, body: String) {
        E2E.curl(["-X", "POST", "-H", "Content-Type: application/json", "--data-binary", body] + extra + [url])
    }

    @Test func aRefreshRouteVerifiesTheBodyTokenAndForwardsTheBodyUnchanged() throws {
        let upstream = try EchoUpstream()
        let gateway = try GatewayProcess("""
        providers:
          - {name: app, type: hs256, secret: "\(Self.secret)"}
        upstreams:
          app: {url: "http://127.0.0.1:\(upstream.port)"}
        routes:
          - {path: /auth/refresh, upstream: app, auth: required, credential: {json_field: token, max_body: 2KiB}}
          - {path: /, upstream: app, auth: required}
        """, adminToken: Self.adminToken, listen: "  - {address: \"127.0.0.1:PORT\", h2c: true}")
        let refresh = "\(gateway.url)/auth/refresh"
        let valid = try AppFitEndToEndTests.mint(#"{"sub": "rvu-user-1", "jti": "refresh-1", "exp": "+3600", "iat": "-5"}"#)

        // A valid token: the identity is injected and the app gets the body byte for byte.
        let body = #"{"device": "ios", "token": "\#(valid)", "note": "caf\u00e9 \ud83c\udf75"}"#
        let ok = Self.post(refresh, body)
        #expect(ok.status == 200, "\(ok)")
        let echo = try Echo(ok.body)
        #expect(echo.body == body)
        #expect(echo.values("x-user-id") == ["rvu-user-1"])
        #expect(echo.values("content-length") == ["\(body.utf8.count)"])

        // An expired access token in the header does not matter on this route: the body's does.
        let expired = try AppFitEndToEndTests.mint(#"{"sub": "rvu-user-1", "exp": "-60", "iat": "-3600"}"#)
        #expect(Self.post(refresh, body, ["-H", "Authorization: Bearer \(expired)"]).status == 200)
        #expect(E2E.curl(["-H", "Authorization: Bearer \(expired)", "\(gateway.url)/visits"]).status == 401)

        // Chunked, with Expect: 100-continue: read whole, forwarded with its length.
        let chunked = Self.post(refresh, body, ["-H", "Transfer-Encoding: chunked", "-H", "Expect: 100-continue"])
        #expect(chunked.status == 200, "\(chunked)")
        let chunkedEcho = try Echo(chunked.body)
        #expect(chunkedEcho.body == body && chunkedEcho.values("content-length") == ["\(body.utf8.count)"])
        #expect(!chunkedEcho.has("transfer-encoding"))

        // Over HTTP/2 (h2c), the same.
        let h2 = Self.post(refresh, body, ["--http2-prior-knowledge"])
        #expect(h2.status == 200, "\(h2)")
        #expect(try Echo(h2.body).body == body)
        _ = try upstream.seen()

        // Revoked, forged, expired, missing, malformed: refused, and the app never sees them.
        #expect(E2E.curl(["-X", "POST", "-H", "Authorization: Bearer \(Self.adminToken)", "-d", #"{"jti":"refresh-1"}"#,
                          "http://127.0.0.1:\(gateway.adminPort)/revocations"]).status == 201)
        let revoked = Self.post(refresh, body)
        #expect(revoked.status == 401 && revoked.body.contains("revoked"), "\(revoked)")
        #expect(Self.post(refresh, body, ["--http2-prior-knowledge"]).status == 401)
        let forged = try AppFitEndToEndTests.mint(#"{"sub": "rvu-user-1", "exp": "+3600"}"#,
                                                  secret: "another-secret-0123456789abcdef0123456")
        #expect(Self.post(refresh, #"{"token": "\#(forged)"}"#).status == 401)
        let expiredBody = Self.post(refresh, #"{"token": "\#(expired)"}"#)
        #expect(expiredBody.status == 401 && expiredBody.body.contains("The token expired"), "names what failed: \(expiredBody)")
        #expect(Self.post(refresh, #"{"token": "none.none.none"}"#).status == 401)
        // A body without the member is a malformed request, as the apps' own handlers answer it.
        let missing = Self.post(refresh, #"{"device": "ios"}"#)
        #expect(missing.status == 400 && missing.body.contains("invalid_request")
                && missing.body.contains("The request body has no token member"), "\(missing)")
        #expect(Self.post(refresh, "").status == 400)
        #expect(Self.post(refresh, #"{"token": null}"#).status == 400)
        for malformed in ["token=abc", #"["\#(valid)"]"#, #"{"token": 5}"#, #"{"token": {"t": "x"}}"#,
                          #"{"token": "\#(valid)", "token": "other"}"#, #"{"token": "\#(valid)""#] {
            let refused = Self.post(refresh, malformed)
            #expect(refused.status == 400 && refused.body.contains("invalid_request"), "\(malformed): \(refused)")
        }
        let large = #"{"pad": "\#(String(repeating: "x", count: 3000))", "token": "\#(valid)"}"#
        #expect(Self.post(refresh, large).status == 413)
        #expect(try upstream.seen().isEmpty, "no refused request reached the app")
    }

    /// An exchange route takes only a verified Google ID token in `idToken` (not the app's own
    /// token, though the route's other providers include it), with its identity injected; a
    /// token signed by a key the gateway has not fetched yet waits for the refetch.
    @Test func anExchangeRouteForwardsOnlyAVerifiedGoogleIdToken() throws {
        let host = try KeyHost(kids: ["k1", "k2"])
        try host.publish(["k1"])
        let upstream = try EchoUpstream()
        let gateway = try GatewayProcess("""
        providers:
          - {name: google, type: google, audiences: ["ios-client.apps.googleusercontent.com"],
             jwks_url: "http://127.0.0.1:\(host.port)/jwks"}
          - {name: app, type: hs256, secret: "\(Self.secret)"}
        keys: {min_refetch_interval: 1s}
        upstreams:
          app: {url: "http://127.0.0.1:\(upstream.port)"}
        routes:
          - {path: /api/auth/google, upstream: app, auth: required, providers: [google, app],
             credential: {json_field: idToken, providers: [google]}}
          - {path: /, upstream: app, auth: required}
        """)
        let exchange = "\(gateway.url)/api/auth/google"
        func google(_ kid: String, sub: String) throws -> String {
            try Self.mintRS256(host, kid: kid, """
            {"iss": "https://accounts.google.com", "aud": "ios-client.apps.googleusercontent.com", "sub": "\(sub)",
             "email": "\(sub)@example.com", "email_verified": true, "exp": "+3600", "iat": "-5"}
            """)
        }
        let ok = Self.post(exchange, #"{"idToken": "\#(try google("k1", sub: "1175"))"}"#)
        #expect(ok.status == 200, "\(ok)")
        let echo = try Echo(ok.body)
        #expect(echo.values("x-user-id") == ["1175"] && echo.values("x-auth-provider") == ["google"])

        let appToken = try AppFitEndToEndTests.mint(#"{"sub": "app-user", "exp": "+600"}"#)
        #expect(E2E.curl(["-H", "Authorization: Bearer \(appToken)", "\(gateway.url)/books"]).status == 200)
        #expect(Self.post(exchange, #"{"idToken": "\#(appToken)"}"#).status == 401, "the app's token is no Google ID token")
        let wrongAudience = try Self.mintRS256(host, kid: "k1", """
        {"iss": "https://accounts.google.com", "aud": "someone-else", "sub": "9", "exp": "+3600", "iat": "-5"}
        """)
        let refusedAudience = Self.post(exchange, #"{"idToken": "\#(wrongAudience)"}"#)
        #expect(refusedAudience.status == 401 && refusedAudience.body.contains("The ID token audience is not accepted"),
                "the description names the ID token: \(refusedAudience)")
        let expiredGoogle = try Self.mintRS256(host, kid: "k1", """
        {"iss": "https://accounts.google.com", "aud": "ios-client.apps.googleusercontent.com", "sub": "9", "exp": "-3600", "iat": "-7200"}
        """)
        let expired = Self.post(exchange, #"{"idToken": "\#(expiredGoogle)"}"#, ["-D", "-"])
        #expect(expired.status == 401 && expired.body.contains("The ID token expired")
                && expired.body.contains(#"error_description="The ID token expired""#), "\(expired)")
        let missing = Self.post(exchange, #"{"id_token": "x"}"#)
        #expect(missing.status == 400 && missing.body.contains("The request body has no idToken member"), "\(missing)")

        // Google rotated its keys: the request waits for the refetch, then passes.
        try host.publish(["k1", "k2"])
        let rotated = Self.post(exchange, #"{"idToken": "\#(try google("k2", sub: "2288"))"}"#)
        #expect(rotated.status == 200, "\(rotated)")
        #expect(try Echo(rotated.body).values("x-user-id") == ["2288"])
    }

    @Test func credentialSettingsThatCannotWorkAreRefusedAtStart() throws {
        func check(_ route: String) -> String {
            E2E.configErrors("""
            providers:
              - {name: app, type: hs256, secret: "\(Self.secret)"}
              - {name: other, type: hs256, secret: "\(Self.secret)-other"}
            upstreams:
              app: {url: "http://127.0.0.1:1"}
            routes:
              - \(route)
            """)
        }
        #expect(check("{path: /, upstream: app, credential: {json_field: token}}").isEmpty)
        #expect(check("{path: /, upstream: app, auth: none, credential: {json_field: token}}").contains("routes[0].credential"))
        #expect(check("{path: /, upstream: app, credential: {field: token}}").contains("routes[0].credential.json_field"))
        #expect(check("{path: /, upstream: app, credential: {json_field: token, providers: [nobody]}}").contains("nobody"))
        #expect(check("{path: /, upstream: app, providers: [app], credential: {json_field: token, providers: [other]}}")
            .contains("not among the route's providers"))
        #expect(check("{path: /, upstream: app, credential: {json_field: token, max_body: 10MiB}}").contains("max_body"))
    }
}
