import Foundation
import PortcullisTestSupport
import Testing

/// Browser routes behave like the web app behind them (issue 15, item 4), through the real
/// binary with NextAuth cookies: a stale cookie on a page route redirects to sign-in and is
/// expired; an optional route can take it as anonymous; NextAuth's sign-out form (302)
/// revokes the cookie it was sent with.
@Suite(.serialized) struct BrowserRoutesEndToEndTests {
    static let webSecret = AuthFixtures.webSecret

    struct Answer {
        let status: Int
        let head: String
        let body: String
        func headers(_ name: String) -> [String] {
            head.components(separatedBy: "\r\n").compactMap { line in
                let pair = line.split(separator: ":", maxSplits: 1)
                guard pair.count == 2, pair[0].lowercased() == name else { return nil }
                return pair[1].trimmingCharacters(in: .whitespaces)
            }
        }
    }

    static func request(_ url: String, _ headers: [String], method: String = "GET") -> Answer {
        var arguments = ["-s", "-D", "-", "-o", "-", "-X", method, "--max-time", "10"]
        for h in headers { arguments += ["-H", h] }
        let (_, out, _) = E2E.run("/usr/bin/curl", arguments + [url])
        let parts = out.components(separatedBy: "\r\n\r\n")
        let head = parts.first ?? ""
        return Answer(status: Int(head.split(separator: " ").dropFirst().first ?? "") ?? 0, head: head,
                      body: parts.dropFirst().joined(separator: "\r\n\r\n"))
    }

    @Test func staleCookiesRedirectOrPassAnonymouslyAndTheSignOutFormRevokes() throws {
        let upstream = try EchoUpstream()
        let gateway = try GatewayProcess("""
        providers:
          - {name: web, type: nextauth, secret: "\(Self.webSecret)"}
        upstreams:
          app: {url: "http://127.0.0.1:\(upstream.port)"}
        routes:
          - {path: /api/auth/signout, upstream: app, auth: required, revoke_on_success: [2xx, 302, 303]}
          - {path: /dashboard, upstream: app, auth: required, on_unauthenticated: redirect, sign_in_url: /api/auth/signin}
          - {path: /feed, upstream: app, auth: optional, on_invalid: anonymous}
          - {path: /strict, upstream: app, auth: optional}
          - {path: /, upstream: app, auth: required}
        """)
        let valid = try gateway.mint(["--provider", "web", "--sub", "web-user"])
        let expired = try gateway.mint(["--provider", "web", "--sub", "web-user", "--ttl", "1h", "--age", "2h"])
        // A cookie no secret decrypts (one byte of the ciphertext changed).
        var bytes = Array(valid.utf8)
        let middle = bytes.count - 60
        bytes[middle] = bytes[middle] == UInt8(ascii: "A") ? UInt8(ascii: "B") : UInt8(ascii: "A")
        let garbled = String(decoding: bytes, as: UTF8.self)
        let other = "; theme=dark"

        #expect(Self.request("\(gateway.url)/dashboard", [valid]).status == 200)
        for stale in [expired, garbled] {
            let page = Self.request("\(gateway.url)/dashboard/week?x=1", [stale + other])
            #expect(page.status == 302, "\(page.head)")
            #expect(page.headers("location") == ["/api/auth/signin?callbackUrl=/dashboard/week%3Fx%3D1"])
            let cleared = page.headers("set-cookie")
            #expect(cleared.count == 1 && cleared[0].hasPrefix("next-auth.session-token=;") && cleared[0].contains("Max-Age=0"),
                    "\(cleared)")
            // A form post is no page load: 401, as before.
            #expect(Self.request("\(gateway.url)/dashboard", [stale], method: "POST").status == 401)
            // The optional route with on_invalid: anonymous passes it without identity or the cookie.
            let feed = Self.request("\(gateway.url)/feed", [stale + other])
            #expect(feed.status == 200, "\(feed.head)")
            let echo = try Echo(feed.body)
            #expect(!echo.has("x-user-id"))
            #expect(echo.values("cookie") == ["theme=dark"], "\(echo.values("cookie"))")
            // Without on_invalid: refused.
            #expect(Self.request("\(gateway.url)/strict", [stale]).status == 401)
        }
        // A Bearer token is an API client's: never redirected.
        let bearer = Self.request("\(gateway.url)/dashboard", ["Authorization: Bearer not.a.token"])
        #expect(bearer.status == 401)

        // NextAuth's sign-out form is answered with a redirect: the cookie it carried is revoked.
        let signOut = Self.request("\(gateway.url)/api/auth/signout/status/302", [valid], method: "POST")
        #expect(signOut.status == 302)
        #expect(waitUntil(5) { Self.request("\(gateway.url)/api/visits", [valid]).status == 401 })
        let afterwards = Self.request("\(gateway.url)/dashboard", [valid])
        #expect(afterwards.status == 302 && afterwards.headers("set-cookie").count == 1, "revoked: sent to sign in again")
        let anonymous = Self.request("\(gateway.url)/feed", [valid])
        let anonymousEcho = try Echo(anonymous.body)
        #expect(anonymous.status == 200 && !anonymousEcho.has("x-user-id"))
    }

    @Test func aSignOutAnsweredWithAStatusNotListedRevokesNothing() throws {
        let upstream = try EchoUpstream()
        let gateway = try GatewayProcess("""
        providers:
          - {name: web, type: nextauth, secret: "\(Self.webSecret)"}
        upstreams:
          app: {url: "http://127.0.0.1:\(upstream.port)"}
        routes:
          - {path: /api/auth/signout, upstream: app, auth: required, revoke_on_success: true}
          - {path: /, upstream: app, auth: required}
        """)
        let valid = try gateway.mint(["--provider", "web", "--sub", "web-user"])
        #expect(Self.request("\(gateway.url)/api/auth/signout/status/302", [valid], method: "POST").status == 302)
        #expect(Self.request("\(gateway.url)/api/auth/signout/status/500", [valid], method: "POST").status == 500)
        sleep(1)
        #expect(Self.request("\(gateway.url)/api/visits", [valid]).status == 200, "true means 2xx only")
    }

    @Test func browserSettingsThatCannotWorkAreRefusedAtStart() throws {
        func check(_ route: String) -> String {
            E2E.configErrors("""
            providers:
              - {name: web, type: nextauth, secret: "\(Self.webSecret)"}
            upstreams:
              app: {url: "http://127.0.0.1:1"}
            routes:
              - \(route)
            """)
        }
        #expect(check("{path: /, upstream: app, auth: optional, on_invalid: anonymous, revoke_on_success: [2xx, 303]}").isEmpty)
        #expect(check("{path: /, upstream: app, on_invalid: anonymous}").contains("routes[0].on_invalid"))
        #expect(check("{path: /, upstream: app, auth: optional, on_invalid: maybe}").contains("anonymous or refuse"))
        #expect(check("{path: /, upstream: app, revoke_on_success: [2xx, 3xy]}").contains("routes[0].revoke_on_success"))
        #expect(check("{path: /, upstream: app, revoke_on_success: []}").contains("routes[0].revoke_on_success"))
    }
}

/// Firebase session cookies (`type: firebase_session`, issue 15 item 6): a JWS in the
/// `__session` cookie, verified against the session-cookie keys (a local key host here),
/// issuer `https://session.firebase.google.com/<project>`; tokens minted with PyJWT.
@Suite(.serialized) struct FirebaseSessionEndToEndTests {
    @Test func aFirebaseSessionCookieIsACredentialOfItsOwnKind() throws {
        let host = try KeyHost(kids: ["s1"])
        try host.publish(["s1"], format: "pem")
        let upstream = try EchoUpstream()
        let gateway = try GatewayProcess("""
        providers:
          - {name: fb-session, type: firebase_session, project_id: "vc-notebook", jwks_url: "http://127.0.0.1:\(host.port)/keys"}
        upstreams:
          app: {url: "http://127.0.0.1:\(upstream.port)"}
        routes:
          - {path: /, upstream: app, auth: required}
        """)
        func cookie(_ claims: String) throws -> String {
            "Cookie: theme=dark; __session=" + (try BodyCredentialEndToEndTests.mintRS256(host, kid: "s1", claims))
        }
        let valid = try cookie("""
        {"iss": "https://session.firebase.google.com/vc-notebook", "aud": "vc-notebook", "sub": "fb-uid-1", "user_id": "fb-uid-1",
         "auth_time": "-60", "iat": "-60", "exp": "+1209000", "firebase": {"sign_in_provider": "password"}}
        """)
        let ok = E2E.curl(["-H", valid, "\(gateway.url)/notes"])
        #expect(ok.status == 200, "\(ok)")
        #expect(try Echo(ok.body).values("x-user-id") == ["fb-uid-1"])
        #expect(try Echo(ok.body).values("x-auth-provider") == ["fb-session"])
        // An ID token's issuer is not a session cookie's; another project's neither; expired is expired.
        for claims in [
            #"{"iss": "https://securetoken.google.com/vc-notebook", "aud": "vc-notebook", "sub": "u", "auth_time": "-60", "iat": "-60", "exp": "+600"}"#,
            #"{"iss": "https://session.firebase.google.com/other", "aud": "other", "sub": "u", "auth_time": "-60", "iat": "-60", "exp": "+600"}"#,
            #"{"iss": "https://session.firebase.google.com/vc-notebook", "aud": "vc-notebook", "sub": "u", "auth_time": "-7200", "iat": "-7200", "exp": "-3600"}"#,
        ] {
            let refused = E2E.curl(["-H", try cookie(claims), "\(gateway.url)/notes"])
            #expect(refused.status == 401 && refused.body.contains("invalid_token"), "\(claims): \(refused)")
        }
        #expect(E2E.curl(["-H", "Cookie: __session=", "\(gateway.url)/notes"]).status == 401)
    }

    @Test func providerSettingsThatHaveNoEffectAreRefused() throws {
        func check(_ provider: String) -> String {
            E2E.configErrors("""
            providers:
              - \(provider)
            upstreams:
              app: {url: "http://127.0.0.1:1"}
            routes:
              - {path: /, upstream: app}
            """)
        }
        #expect(check("{name: s, type: firebase_session, project_id: p, cookie_name: __session}").isEmpty)
        #expect(check("{name: s, type: firebase_session}").contains("project_id"))
        #expect(check("{name: g, type: google, audiences: [x], cookie_name: sid}").contains("providers[0].cookie_name"))
    }
}
