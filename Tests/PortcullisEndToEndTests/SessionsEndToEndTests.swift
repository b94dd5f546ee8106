import Foundation
import PortcullisTestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Mobile sign-in at the edge (#27), through the real binary: an ID token minted outside
/// the gateway is exchanged for the gateway's own session; its access token is accepted on
/// every route by the `session` provider; the refresh token rotates, racing refreshes within
/// the grace converge on one pair, any other reuse ends the session; logout and the device
/// list; sessions survive a restart with `store.state_dir`.
@Suite(.serialized) struct SessionsEndToEndTests {
    static let secret = "0123456789abcdef0123456789abcdef-session-secret"

    struct Pair {
        let access: String
        let refresh: String
        let session: String
        let user: String
        let expiresIn: Int
        let raw: String
    }

    static func pair(_ body: String) -> Pair? {
        guard let o = try? JSONSerialization.jsonObject(with: Data(body.utf8)) as? [String: Any],
              let access = o["access_token"] as? String, let refresh = o["refresh_token"] as? String,
              let session = o["session_id"] as? String, let user = o["user_id"] as? String,
              o["token_type"] as? String == "Bearer", let expiresIn = o["expires_in"] as? Int else { return nil }
        return Pair(access: access, refresh: refresh, session: session, user: user, expiresIn: expiresIn, raw: body)
    }

    static func gateway(_ upstream: EchoUpstream, stateDir: String? = nil, grace: String = "2s", extra: String = "",
                        requireTLS: Bool = false, listen: String? = nil, signingKey: String? = nil,
                        maxPerUser: Int? = nil) throws -> GatewayProcess {
        try GatewayProcess("""
        \(AuthFixtures.providers)
        sessions:
          issuer: "https://api.example.test"
          accept: [google, apple]
          access_token: {lifetime: 15m\(signingKey.map { ", signing_keys: [\"\($0)\"]" } ?? "")}
          refresh_token: {secret: "\(secret)", reuse_grace: \(grace), lifetime: 90d, idle_timeout: 30d}
          require_tls: \(requireTLS)\(maxPerUser.map { "\n  max_per_user: \($0)" } ?? "")
        \(stateDir.map { "store: {state_dir: \"\($0)\"}" } ?? "")
        \(extra)
        upstreams:
          app: {url: "http://127.0.0.1:\(upstream.port)"}
        routes:
          - {path: /api, upstream: app, auth: required}
        """, metricsPublic: true, listen: listen)
    }

    static func exchange(_ g: GatewayProcess, _ provider: String = "google", sub: String = "117", device: String? = nil,
                         field: String = "idToken", deviceMember: String = "device_name") throws -> (Int, String) {
        let header = try AuthFixtures.mint(g, provider, ["--sub", sub])
        let token = String(header.dropFirst("Authorization: Bearer ".count))
        let body = device.map { "{\"\(field)\":\"\(token)\",\"\(deviceMember)\":\"\($0)\"}" } ?? "{\"\(field)\":\"\(token)\"}"
        let r = E2E.curl(["-X", "POST", "-H", "content-type: application/json", "-H", "user-agent: TestPhone/1", "-d", body,
                          "\(g.url)/auth/session"])
        return (r.status, r.body)
    }

    static func refresh(_ g: GatewayProcess, _ token: String) -> (status: Int, body: String) {
        E2E.curl(["-X", "POST", "-H", "content-type: application/json", "-d", "{\"refresh_token\":\"\(token)\"}", "\(g.url)/auth/refresh"])
    }

    static func api(_ g: GatewayProcess, _ access: String) -> (status: Int, body: String) {
        E2E.curl(["-H", "Authorization: Bearer \(access)", "-H", "X-User-Id: forged", "\(g.url)/api/x"])
    }

    @Test func exchangeRefreshRotationReuseAndLogout() throws {
        let upstream = try EchoUpstream()
        let g = try Self.gateway(upstream)
        let (status, body) = try Self.exchange(g, device: "Jay's iPhone")
        #expect(status == 200, "\(body)")
        let first = try #require(Self.pair(body), "\(body)")
        #expect(first.user == "google:117" && first.expiresIn == 900 && first.session.count == 32)
        #expect(!g.log.contains(first.access) && !g.log.contains(first.refresh), "tokens never in logs")

        // The access token works on every route, as the built-in `session` provider; the app
        // keeps reading X-User-Id (the client's forged one gone).
        let call = Self.api(g, first.access)
        #expect(call.status == 200)
        let echo = try Echo(call.body)
        #expect(echo.values("X-User-Id") == ["google:117"], "\(call.body)")
        #expect(echo.values("X-Auth-Provider") == ["session"])
        // Its claims: iss, aud, sub, sid, iat, exp, jti; ES256 with a published key.
        let payload = try #require(Data(base64Encoded: Self.padded(String(first.access.split(separator: ".")[1]))))
        let claims = try #require(try JSONSerialization.jsonObject(with: payload) as? [String: Any])
        #expect(claims["iss"] as? String == "https://api.example.test" && claims["sub"] as? String == "google:117"
                && claims["sid"] as? String == first.session && claims["jti"] != nil)
        let jwks = E2E.curl(["\(g.url)/.well-known/portcullis/jwks.json"])
        #expect(jwks.status == 200 && jwks.body.contains("\"crv\":\"P-256\""), "\(jwks)")

        // Refresh: a new pair; the old refresh token is spent.
        let second = try #require(Self.pair(Self.refresh(g, first.refresh).body))
        #expect(second.refresh != first.refresh && second.access != first.access && second.session == first.session)
        #expect(Self.api(g, second.access).status == 200)
        // The previous token within the grace: the current pair, the same answer.
        let again = Self.refresh(g, first.refresh)
        #expect(again.status == 200 && Self.pair(again.body)?.refresh == second.refresh
                && Self.pair(again.body)?.access == second.access, "\(again)")
        // After the grace, any reuse ends the session (its access tokens too), logged and counted.
        sleep(3)
        let reused = Self.refresh(g, first.refresh)
        #expect(reused.status == 400 && reused.body.contains("\"invalid_grant\"") && reused.body.contains("already used"), "\(reused)")
        #expect(Self.api(g, second.access).status == 401, "the session's access token is refused at once")
        #expect(Self.refresh(g, second.refresh).status == 400, "the current refresh token is dead too")
        #expect(g.log.contains("refresh token reused: the session is ended"))
        #expect(!g.log.contains(first.refresh), "no token in the log line")

        // Forged, malformed and wrong-session tokens.
        let forged = first.refresh.dropLast(4) + "AAAA"
        #expect(Self.refresh(g, String(forged)).body.contains("invalid_grant"))
        let malformed = E2E.curl(["-X", "POST", "-d", "not json", "\(g.url)/auth/refresh"])
        #expect(malformed.status == 400 && malformed.body.contains("invalid_request"), "\(malformed)")
        let missing = E2E.curl(["-X", "POST", "-d", "{}", "\(g.url)/auth/refresh"])
        #expect(missing.status == 400 && missing.body.contains("no refresh_token member"), "\(missing)")

        // Logout ends the session: its access token and its refresh token.
        let (_, body2) = try Self.exchange(g, sub: "118")
        let third = try #require(Self.pair(body2))
        let logout = E2E.curl(["-X", "POST", "-H", "Authorization: Bearer \(third.access)", "\(g.url)/auth/logout"])
        #expect(logout.status == 204, "\(logout)")
        #expect(Self.api(g, third.access).status == 401)
        #expect(Self.refresh(g, third.refresh).body.contains("invalid_grant"))
        // The exchange refuses what any route refuses, in RFC 6749's shape for bad bodies.
        let badBody = E2E.curl(["-X", "POST", "-d", "{\"device_name\":\"x\"}", "\(g.url)/auth/session"])
        #expect(badBody.status == 400 && badBody.body.contains("invalid_request"), "\(badBody)")
        let appToken = try AuthFixtures.mint(g, "app")
        let notAccepted = E2E.curl(["-X", "POST", "-d", "{\"idToken\":\"\(appToken.dropFirst("Authorization: Bearer ".count))\"}",
                                    "\(g.url)/auth/session"])
        #expect(notAccepted.status == 400 && notAccepted.body.contains("\"error\":\"invalid_grant\""),
                "only the accepted ID-token providers, refused as a grant: \(notAccepted)")
        // A token endpoint's refusal carries no Bearer challenge (RFC 6749 §5.2, not RFC 6750).
        let head = E2E.run("/usr/bin/curl", ["-s", "-i", "--max-time", "10", "-X", "POST", "-d",
                                             "{\"idToken\":\"\(appToken.dropFirst("Authorization: Bearer ".count))\"}", "\(g.url)/auth/session"]).1
        #expect(head.hasPrefix("HTTP/1.1 400") && !head.lowercased().contains("www-authenticate"), "\(head.prefix(400))")
        #expect(try Self.exchange(g, "apple", sub: "001.abc").0 == 200)
        // A nonce sent with the exchange must be the ID token's (raw, or its SHA-256 hex).
        let raw = "n-0123456789"
        let hashed = E2E.run("/bin/sh", ["-c", "printf %s '\(raw)' | sha256sum | cut -d' ' -f1"]).1
            .trimmingCharacters(in: .whitespacesAndNewlines)
        for (claim, sent, expected) in [(raw, raw, 200), (hashed, raw, 200), (raw, "other", 400), (nil, raw, 400)] as [(String?, String, Int)] {
            var args = ["--provider", "google", "--sub", "500"]
            if let claim { args += ["--claim", "nonce=\(claim)"] }
            let id = try AuthFixtures.mint(g, "google", Array(args.dropFirst(2)))
            let r = E2E.curl(["-X", "POST", "-d", "{\"idToken\":\"\(id.dropFirst("Authorization: Bearer ".count))\",\"nonce\":\"\(sent)\"}",
                              "\(g.url)/auth/session"])
            #expect(r.status == expected, "nonce claim \(claim ?? "none"), sent \(sent): \(r)")
            if expected == 400 { #expect(r.body.contains("invalid_grant") && r.body.contains("nonce"), "\(r)") }
        }
        // The ID token also as `id_token`, or as Bearer with a body that has no member.
        #expect(try Self.exchange(g, sub: "301", field: "id_token").0 == 200)
        let bearer = try AuthFixtures.mint(g, "google", ["--sub", "302"])
        let asBearer = E2E.curl(["-X", "POST", "-H", bearer, "-d", "{\"device_name\":\"x\"}", "\(g.url)/auth/session"])
        #expect(asBearer.status == 200 && Self.pair(asBearer.body)?.user == "google:302", "\(asBearer.status) \(asBearer.body)")
        #expect(try upstream.seen().allSatisfy { !$0.hasPrefix("/auth/") }, "the session endpoints never reach the app")
    }

    /// 50 refreshes of one token at once: one rotates, every other one gets the same pair
    /// (the embedded store's queue, or Redis's script, decides).
    @Test(arguments: ["embedded", "redis", "cluster"])
    func concurrentRefreshesWithinTheGraceConverge(_ store: String) throws {
        let upstream = try EchoUpstream()
        let redis = store == "embedded" ? nil : try SharedRedis(store)
        var extra = ""
        var key: String?
        if let redis {
            let path = NSTemporaryDirectory() + "session-es256-\(UUID().uuidString).pem"
            E2E.run("/usr/bin/openssl", ["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", path])
            extra = redis.storeYAML
            key = path
        }
        let g = try Self.gateway(upstream, grace: "10s", extra: extra, signingKey: key)
        let first = try #require(Self.pair(try Self.exchange(g).1))
        let script = """
        import concurrent.futures, json, sys, urllib.request
        def one(_):
            request = urllib.request.Request(sys.argv[1], data=json.dumps({"refresh_token": sys.argv[2]}).encode(), method="POST")
            try:
                with urllib.request.urlopen(request, timeout=10) as r: return r.status, r.read().decode()
            except urllib.error.HTTPError as e: return e.code, e.read().decode()
        with concurrent.futures.ThreadPoolExecutor(50) as pool:
            print(json.dumps(list(pool.map(one, range(50)))))
        """
        let (status, out, err) = E2E.run("/usr/bin/python3", ["-c", script, "\(g.url)/auth/refresh", first.refresh], timeout: 60)
        #expect(status == 0, "\(err)")
        let results = try #require(try JSONSerialization.jsonObject(with: Data(out.utf8)) as? [[Any]])
        #expect(results.count == 50)
        let bodies = Set(results.compactMap { $0[1] as? String })
        #expect(results.allSatisfy { $0[0] as? Int == 200 }, "\(results.prefix(3))")
        #expect(bodies.count == 1, "every racing refresh got the same pair: \(bodies.count) different")
        let pair = try #require(bodies.first.flatMap(Self.pair))
        #expect(Self.api(g, pair.access).status == 200)
        #expect(Self.pair(Self.refresh(g, pair.refresh).body) != nil, "the converged pair moves on")
    }

    /// With `sessions:` on, a route that lists `providers` accepts the gateway's session
    /// tokens beside them (as a route without a list does), on HTTP/1.1 and HTTP/2; a route
    /// with `accept_sessions: false` refuses them and keeps its list; the key without
    /// `sessions:`, or leaving a route no provider, is refused at start; `check-config` warns
    /// when no route accepts session tokens.
    @Test func routesListingProvidersAcceptSessionTokensUnlessTheyOptOut() throws {
        let upstream = try EchoUpstream()
        let g = try GatewayProcess("""
        \(AuthFixtures.providers)
        sessions:
          issuer: "https://api.example.test"
          accept: [google]
          refresh_token: {secret: "\(Self.secret)"}
          require_tls: false
        upstreams:
          app: {url: "http://127.0.0.1:\(upstream.port)"}
        routes:
          - {path: /listed, upstream: app, auth: required, providers: [apple]}
          - {path: /optional, upstream: app, auth: optional, providers: [apple]}
          - {path: /own-only, upstream: app, auth: required, providers: [apple], accept_sessions: false}
          - {path: /all-but-sessions, upstream: app, auth: required, accept_sessions: false}
          - {path: /api, upstream: app, auth: required}
        """, listen: "  - {address: \"127.0.0.1:PORT\", h2c: true}")
        let pair = try #require(Self.pair(try Self.exchange(g).1))
        for http2 in [false, true] {
            let flags = http2 ? ["--http2-prior-knowledge"] : []
            func get(_ path: String, _ token: String) -> (status: Int, body: String) {
                E2E.curl(flags + ["-H", "Authorization: Bearer \(token)", "\(g.url)\(path)"])
            }
            for path in ["/listed/x", "/optional/x", "/api/x"] {
                let r = get(path, pair.access)
                #expect(r.status == 200, "\(path) over \(http2 ? "h2c" : "HTTP/1.1"): \(r)")
                #expect(try Echo(r.body).values("x-auth-provider") == ["session"], "\(path)")
            }
            let refused = get("/own-only/x", pair.access)
            #expect(refused.status == 401 && refused.body.contains("provider"), "\(refused)")
            #expect(get("/all-but-sessions/x", pair.access).status == 401)
            let google = String(try AuthFixtures.mint(g, "google", ["--sub", "118"]).dropFirst("Authorization: Bearer ".count))
            #expect(get("/all-but-sessions/x", google).status == 200, "every other provider still passes")
            #expect(get("/listed/x", google).status == 401, "the list itself is unchanged")
            let apple = String(try AuthFixtures.mint(g, "apple", ["--sub", "119"]).dropFirst("Authorization: Bearer ".count))
            #expect(get("/own-only/x", apple).status == 200)
        }
        // Refused at start, with the key.
        func check(_ sessions: String, _ routes: String) -> (Int32, String) {
            let file = NSTemporaryDirectory() + "accept-sessions-\(UUID().uuidString).yaml"
            try? """
            \(AuthFixtures.providers)
            \(sessions)
            upstreams:
              app: {url: "http://127.0.0.1:\(upstream.port)"}
            routes:
            \(routes)
            """.write(toFile: file, atomically: true, encoding: .utf8)
            let (code, out, err) = E2E.run(E2E.binary, ["check-config", file])
            return (code, out + err)
        }
        let on = "sessions: {issuer: \"https://x.test\", accept: [google], refresh_token: {secret: \"\(Self.secret)\"}, require_tls: false}"
        let without = check("", "  - {path: /, upstream: app, auth: required, accept_sessions: false}")
        #expect(without.0 == 2 && without.1.contains("accept_sessions") && without.1.contains("needs sessions:"), "\(without)")
        let nothing = check(on, "  - {path: /, upstream: app, auth: required, providers: [session], accept_sessions: false}")
        #expect(nothing.0 == 2 && nothing.1.contains("accept_sessions") && nothing.1.contains("nothing could pass"), "\(nothing)")
        let warned = check(on, "  - {path: /, upstream: app, auth: required, accept_sessions: false}\n  - {path: /p, upstream: app, auth: none}")
        #expect(warned.0 == 0 && warned.1.contains("warning: sessions: is on but no route accepts session tokens"), "\(warned)")
        let quiet = check(on, "  - {path: /, upstream: app, auth: required, providers: [apple]}")
        #expect(quiet.0 == 0 && !quiet.1.contains("warning: sessions"), "\(quiet)")
    }

    /// RFC 6749 §5.2 codes survive the app's refusal shape: with `identity.error_body: detail`
    /// the session endpoints answer `{"detail": …, "error": "invalid_grant"}` (404 and 405
    /// too), routes keep `{"detail": …}`; `sessions.error_body` gives the endpoints a shape
    /// of their own.
    @Test(arguments: [false, true])
    func sessionErrorsKeepTheirCodeInTheAppsShape(_ ownShape: Bool) throws {
        let upstream = try EchoUpstream()
        let g = try GatewayProcess("""
        \(AuthFixtures.providers)
        sessions:
          issuer: "https://api.example.test"
          accept: [google]
          refresh_token: {secret: "\(Self.secret)"}
          require_tls: false\(ownShape ? "\n  error_body: oauth" : "")
        upstreams:
          app: {url: "http://127.0.0.1:\(upstream.port)"}
        routes:
          - {path: /api, upstream: app, auth: required}
        """.replacingOccurrences(of: "identity: {user_id_header: X-User-Id, claims: {email: X-User-Email}}",
                                 with: "identity: {user_id_header: X-User-Id, claims: {email: X-User-Email}, error_body: detail}"))
        func json(_ body: String) -> [String: String] {
            (try? JSONSerialization.jsonObject(with: Data(body.utf8)) as? [String: String]) ?? [:]
        }
        let bad = Self.refresh(g, "rt1.0123.1.nope")
        #expect(bad.status == 400 && json(bad.body)["error"] == "invalid_grant", "\(bad)")
        #expect((json(bad.body)["detail"] != nil) == !ownShape, "\(bad)")
        #expect((json(bad.body)["error_description"] != nil) == ownShape, "\(bad)")
        let refusedExchange = E2E.curl(["-X", "POST", "-d", "{\"idToken\":\"not.a.token\"}", "\(g.url)/auth/session"])
        #expect(refusedExchange.status == 400 && json(refusedExchange.body)["error"] == "invalid_grant", "\(refusedExchange)")
        let wrongMethod = E2E.curl(["\(g.url)/auth/refresh"])
        #expect(wrongMethod.status == 405 && json(wrongMethod.body)["error"] == "invalid_request", "\(wrongMethod)")
        let pair = try #require(Self.pair(try Self.exchange(g).1))
        let unknown = E2E.curl(["-X", "DELETE", "-H", "Authorization: Bearer \(pair.access)", "\(g.url)/auth/sessions/nothex"])
        #expect(unknown.status == 404 && json(unknown.body)["error"] == "invalid_request", "\(unknown)")
        // Routes keep the app's own shape.
        let route = E2E.curl(["\(g.url)/api/x"])
        #expect(route.status == 401 && json(route.body) == ["detail": "No credentials"], "\(route)")
    }

    /// The clients the apps shipped: refresh with RFC 6749's form body (`grant_type=
    /// refresh_token&refresh_token=…`; another grant type is `unsupported_grant_type`, a
    /// repeated parameter `invalid_request`), the device from `device_field` (FolioMind sends
    /// `device_id`), logout answering `200` with `logout_status: 200`.
    @Test func formRefreshDeviceFieldAndLogoutStatus() throws {
        let upstream = try EchoUpstream()
        let h = try GatewayProcess("""
        \(AuthFixtures.providers)
        sessions:
          issuer: "https://api.example.test"
          accept: [google]
          refresh_token: {secret: "\(Self.secret)"}
          require_tls: false
          device_field: device_id
          logout_status: 200
        upstreams:
          app: {url: "http://127.0.0.1:\(upstream.port)"}
        routes:
          - {path: /api, upstream: app, auth: required}
        """)
        let first = try #require(Self.pair(try Self.exchange(h, device: "6F1A0C9E", field: "idToken", deviceMember: "device_id").1))
        func form(_ body: String) -> (status: Int, body: String) {
            E2E.curl(["-X", "POST", "-H", "content-type: application/x-www-form-urlencoded", "--data-raw", body, "\(h.url)/auth/refresh"])
        }
        let encoded = first.refresh.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? first.refresh
        let second = try #require(Self.pair(form("grant_type=refresh_token&refresh_token=\(encoded)").body), "the form body refreshes")
        let other = form("grant_type=password&refresh_token=\(second.refresh)")
        #expect(other.status == 400 && other.body.contains("unsupported_grant_type"), "\(other)")
        let twice = form("refresh_token=\(second.refresh)&refresh_token=\(second.refresh)")
        #expect(twice.status == 400 && twice.body.contains("invalid_request"), "\(twice)")
        let list = E2E.curl(["-H", "Authorization: Bearer \(second.access)", "\(h.url)/auth/sessions"]).body
        #expect(list.contains("\"device\":\"6F1A0C9E\""), "the device from device_id: \(list)")
        let out = E2E.curl(["-X", "POST", "-H", "Authorization: Bearer \(second.access)", "\(h.url)/auth/logout"])
        #expect(out.status == 200 && out.body.contains("logged_out"), "\(out)")
        #expect(waitUntil(3) { Self.api(h, second.access).status == 401 })
        // Refused at start: another status, or the ID token's own member.
        for (line, reason) in [("logout_status: 201", "expected 200 or 204"), ("device_field: idToken", "other than id_token_field")] {
            let errors = E2E.configErrors("""
            \(AuthFixtures.providers)
            sessions: {issuer: "https://x.test", accept: [google], refresh_token: {secret: "\(Self.secret)"}, \(line)}
            upstreams:
              app: {url: "http://127.0.0.1:\(upstream.port)"}
            routes:
              - {path: /api, upstream: app, auth: required}
            """)
            #expect(errors.contains(reason), "\(line): \(errors)")
        }
    }

    /// Keys and tools: `portcullis keys generate` writes a P-256 key (0600, never over a
    /// file); `check-config` names a missing or non-P-256 signing key; `mint --provider
    /// session` signs with the first key and its defaults, the running gateway and `verify`
    /// accept the result; a session path that is also a route's names that route's line.
    @Test func keysGenerateCheckConfigMintAndVerify() throws {
        let dir = NSTemporaryDirectory() + "session-tools-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        let key = dir + "/session.pem"
        let generated = E2E.run(E2E.binary, ["keys", "generate", key])
        #expect(generated.0 == 0 && generated.1.contains("ES256 private key, mode 0600"), "\(generated)")
        let mode = (try FileManager.default.attributesOfItem(atPath: key)[.posixPermissions] as? NSNumber)?.intValue
        #expect(mode == 0o600)
        let text = E2E.run("/usr/bin/openssl", ["pkey", "-in", key, "-noout", "-text"]).1
        #expect(text.contains("prime256v1") || text.contains("P-256"), "\(text.prefix(300))")
        let again = E2E.run(E2E.binary, ["keys", "generate", key])
        #expect(again.0 != 0 && again.2.contains("the file exists"), "never over an existing key: \(again)")
        let p384 = dir + "/p384.pem"
        E2E.run("/usr/bin/openssl", ["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-384", "-out", p384])
        let upstream = try EchoUpstream()
        func file(_ keyPath: String, extraRoute: String = "") throws -> String {
            let path = dir + "/gateway-\(UUID().uuidString).yaml"
            try """
            \(AuthFixtures.providers)
            sessions:
              issuer: "https://api.example.test"
              accept: [google]
              access_token: {signing_keys: ["\(keyPath)"]}
              refresh_token: {secret: "\(Self.secret)"}
              require_tls: false
            upstreams:
              app: {url: "http://127.0.0.1:\(upstream.port)"}
            routes:
              - {path: /api, upstream: app, auth: required, providers: [google]}\(extraRoute)
            """.write(toFile: path, atomically: true, encoding: .utf8)
            return path
        }
        for (keyPath, reason) in [(dir + "/missing.pem", "no such file"), (p384, "a P-256 key is needed")] {
            let (code, out, err) = E2E.run(E2E.binary, ["check-config", try file(keyPath)])
            #expect(code == 2 && (out + err).contains("sessions.access_token.signing_keys") && (out + err).contains(reason),
                    "\(out)\(err)")
        }
        let clashing = try file(key, extraRoute: "\n  - {path: /auth/session, upstream: app, auth: none}")
        let line = try #require(try String(contentsOfFile: clashing, encoding: .utf8).components(separatedBy: "\n")
            .firstIndex { $0.contains("path: /auth/session") }) + 1
        let clash = E2E.run(E2E.binary, ["check-config", clashing])
        #expect(clash.0 == 2 && (clash.1 + clash.2).contains("is also the path of the route at line \(line) "), "\(clash)")
        let config = try file(key)
        let minted = E2E.run(E2E.binary, ["mint", "--config", config, "--provider", "session", "--sub", "alice"])
        #expect(minted.0 == 0, "\(minted)")
        let token = minted.1.trimmingCharacters(in: .whitespacesAndNewlines)
        let verified = E2E.run(E2E.binary, ["verify", "--config", config, token])
        #expect(verified.0 == 0 && verified.1.contains("verified: provider=session user=alice"), "\(verified)")
        let g = try GatewayProcess(try String(contentsOfFile: config, encoding: .utf8))
        let r = E2E.curl(["-H", "Authorization: Bearer \(token)", "\(g.url)/api/x"])
        #expect(r.status == 200 && (try? Echo(r.body).values("x-user-id")) == ["alice"], "\(r)")
        try? FileManager.default.removeItem(atPath: dir)
    }

    /// Moving without signing everyone out: with the app's own `auth: none` refresh route
    /// kept on the refresh path, a refresh token the gateway did not issue goes to the app
    /// as before (body whole, JSON or form, HTTP/1.1 and HTTP/2), the gateway's own are
    /// answered by the gateway; `old_refresh_tokens: refuse` refuses the clash at start.
    @Test func oldRefreshTokensGoToTheAppsRouteAsBefore() throws {
        let upstream = try EchoUpstream()
        let config = """
        \(AuthFixtures.providers)
        sessions:
          issuer: "https://api.example.test"
          accept: [google]
          refresh_token: {secret: "\(Self.secret)"}
          require_tls: false
        upstreams:
          app: {url: "http://127.0.0.1:\(upstream.port)"}
        routes:
          - {path: /auth/refresh, upstream: app, auth: none}
          - {path: /api, upstream: app, auth: required}
        """
        let g = try GatewayProcess(config, listen: "  - {address: \"127.0.0.1:PORT\", h2c: true}")
        let pair = try #require(Self.pair(try Self.exchange(g).1))
        for flags in [[], ["--http2-prior-knowledge"]] {
            let old = E2E.curl(flags + ["-X", "POST", "-H", "content-type: application/json", "-d", #"{"refresh_token":"refresh_abc123"}"#,
                                        "\(g.url)/auth/refresh"])
            #expect(old.status == 200, "\(flags): \(old)")
            let echo = try Echo(old.body)
            #expect(echo.path == "/auth/refresh" && echo.body.contains("refresh_abc123"), "the app got it whole: \(old.body.prefix(400))")
            #expect(echo.values("x-user-id").isEmpty)
            let form = E2E.curl(flags + ["-X", "POST", "-H", "content-type: application/x-www-form-urlencoded",
                                         "--data-raw", "grant_type=refresh_token&refresh_token=opaque-old", "\(g.url)/auth/refresh"])
            let formEcho = try Echo(form.body)
            #expect(form.status == 200 && formEcho.body.contains("opaque-old"), "\(form)")
        }
        // An old client's logout with the app's own token: that token is revoked, as the
        // app's logout route did; nothing reaches the app; a browser cookie may not log out.
        let appToken = try AuthFixtures.mint(g, "app")
        let appBearer = String(appToken.dropFirst("Authorization: Bearer ".count))
        #expect(E2E.curl(["-H", appToken, "\(g.url)/api/x"]).status == 200)
        let oldLogout = E2E.curl(["-X", "POST", "-H", appToken, "\(g.url)/auth/logout"])
        #expect(oldLogout.status == 204, "\(oldLogout)")
        #expect(waitUntil(3) { E2E.curl(["-H", "Authorization: Bearer \(appBearer)", "\(g.url)/api/x"]).status == 401 })
        let cookie = try AuthFixtures.mint(g, "web")
        let byCookie = E2E.curl(["-X", "POST", "-H", cookie, "\(g.url)/auth/logout"])
        #expect(byCookie.status == 400 && byCookie.body.contains("Bearer token is required"), "\(byCookie)")
        #expect(E2E.curl(["-X", "POST", "\(g.url)/auth/logout"]).status == 401)
        _ = try upstream.seen()
        let mine = Self.refresh(g, pair.refresh)
        #expect(Self.pair(mine.body) != nil, "the gateway's own token is the gateway's: \(mine)")
        let seen = try upstream.seen()
        #expect(!seen.contains("/auth/refresh"), "no gateway token reached the app: \(seen)")
        // Refused at start when asked to.
        let errors = E2E.configErrors(config.replacingOccurrences(of: "  require_tls: false",
                                                                  with: "  require_tls: false\n  old_refresh_tokens: refuse"))
        #expect(errors.contains("is also the path of the route at line"), "\(errors)")
    }

    /// `carry_claims`: the ID token's chosen claims, typed, in every access token of the
    /// session (after a refresh too), so claim headers and `require_claims` match session
    /// tokens as they matched the ID token; a registered or dotted name is refused at start.
    @Test func carriedClaimsReachHeadersAndRules() throws {
        let upstream = try EchoUpstream()
        let config = """
        \(AuthFixtures.providers)
        sessions:
          issuer: "https://api.example.test"
          accept: [google]
          refresh_token: {secret: "\(Self.secret)"}
          require_tls: false
          carry_claims: [email, email_verified]
        upstreams:
          app: {url: "http://127.0.0.1:\(upstream.port)"}
        routes:
          - {path: /verified, upstream: app, auth: required, require_claims: {email_verified: true}}
          - {path: /api, upstream: app, auth: required}
        """
        let g = try GatewayProcess(config)
        let first = try #require(Self.pair(try Self.exchange(g, sub: "carry-1").1))
        let second = try #require(Self.pair(Self.refresh(g, first.refresh).body))
        for access in [first.access, second.access] {
            let r = Self.api(g, access)
            #expect(r.status == 200 && (try? Echo(r.body).values("X-User-Email")) == ["carry-1@example.com"], "\(r)")
            let rule = E2E.curl(["-H", "Authorization: Bearer \(access)", "\(g.url)/verified/x"])
            #expect(rule.status == 200, "email_verified: true matches the carried boolean: \(rule)")
            let payload = try #require(TokenPayload.payload(access))
            #expect(payload["email_verified"] as? Bool == true && payload["email"] as? String == "carry-1@example.com", "\(payload)")
        }
        for (names, reason) in [("[sub]", "claim of the access token itself"), ("[firebase.sign_in_provider]", "top-level claim name")] {
            let errors = E2E.configErrors(config.replacingOccurrences(of: "carry_claims: [email, email_verified]",
                                                                      with: "carry_claims: \(names)"))
            #expect(errors.contains("carry_claims") && errors.contains(reason), "\(errors)")
        }
    }

    /// A refresh the store cannot answer (Redis paused past the command timeout) is a 503
    /// that rotated nothing and revoked nothing: the client's retry with the same refresh
    /// token, once Redis answers, rotates as if the outage never happened (no "reuse", no
    /// "session has ended"). The same for the first read and for the rotation script.
    @Test func aRefreshTheStoreCannotAnswerRotatesNothing() throws {
        let upstream = try EchoUpstream()
        let redis = try RedisProcess()
        let key = NSTemporaryDirectory() + "session-es256-\(UUID().uuidString).pem"
        E2E.run("/usr/bin/openssl", ["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", key])
        let g = try Self.gateway(upstream, grace: "1s", extra: "store: {redis: \"redis://127.0.0.1:\(redis.port)/0\"}",
                                 signingKey: key)
        let first = try #require(Self.pair(try Self.exchange(g).1))
        _ = redis.cli(["CLIENT", "PAUSE", "4000", "ALL"])
        let during = Self.refresh(g, first.refresh)
        #expect(during.status == 503 && during.body.contains("temporarily_unavailable"), "\(during)")
        // Past the pause and past the reuse grace: a rotation that had happened would make
        // this a reuse that ends the session.
        #expect(waitUntil(10) { redis.cli(["PING"]).contains("PONG") })
        sleep(2)
        let retry = Self.refresh(g, first.refresh)
        let second = try #require(Self.pair(retry.body), "the retry rotates: \(retry)")
        #expect(second.session == first.session)
        #expect(waitUntil(5) { Self.api(g, second.access).status == 200 }, "the session lives on")
        let metrics = E2E.curl(["http://127.0.0.1:\(g.adminPort)/metrics"]).body
        #expect(metrics.contains("portcullis_sessions_total{event=\"refresh_unavailable\"}"), "counted")
        #expect(!metrics.contains("event=\"refresh_unknown\"} 1") && !metrics.contains("event=\"reuse_detected\"} 1"))
    }

    /// `max_per_user`: a sign-in past the cap ends the user's least recently used session
    /// (its access and refresh tokens too), so replaying one ID token cannot grow the store
    /// without bound; other users are untouched.
    @Test(arguments: ["embedded", "redis", "cluster"])
    func aUserKeepsAtMostMaxPerUserSessions(_ store: String) throws {
        let upstream = try EchoUpstream()
        let redis = store == "embedded" ? nil : try SharedRedis(store)
        var key: String?
        if redis != nil {
            let path = NSTemporaryDirectory() + "session-es256-\(UUID().uuidString).pem"
            E2E.run("/usr/bin/openssl", ["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", path])
            key = path
        }
        let extra = redis?.storeYAML ?? ""
        let g = try Self.gateway(upstream, extra: extra, signingKey: key, maxPerUser: 2)
        let other = try #require(Self.pair(try Self.exchange(g, sub: "900").1))
        let oldest = try #require(Self.pair(try Self.exchange(g, sub: "901").1))
        sleep(1)
        let middle = try #require(Self.pair(try Self.exchange(g, sub: "901").1))
        sleep(1)
        let newest = try #require(Self.pair(try Self.exchange(g, sub: "901").1))
        #expect(waitUntil(3) { Self.api(g, oldest.access).status == 401 }, "the least recently used session ended")
        #expect(Self.refresh(g, oldest.refresh).status == 400)
        for pair in [middle, newest, other] { #expect(Self.api(g, pair.access).status == 200) }
        let list = E2E.curl(["-H", "Authorization: Bearer \(newest.access)", "\(g.url)/auth/sessions"]).body
        #expect(list.contains(middle.session) && list.contains(newest.session) && !list.contains(oldest.session), "\(list)")
    }

    /// The device list: the user's sessions with `current`; ending one of them; another
    /// user's session id is as unknown as a missing one (404).
    @Test func theDeviceListAndEndingOneDevice() throws {
        let upstream = try EchoUpstream()
        let g = try Self.gateway(upstream)
        let phone = try #require(Self.pair(try Self.exchange(g, device: "Phone").1))
        let pad = try #require(Self.pair(try Self.exchange(g).1))  // the User-Agent names it
        let stranger = try #require(Self.pair(try Self.exchange(g, sub: "999").1))
        let list = E2E.curl(["-H", "Authorization: Bearer \(phone.access)", "\(g.url)/auth/sessions"])
        #expect(list.status == 200)
        let sessions = try #require((try JSONSerialization.jsonObject(with: Data(list.body.utf8)) as? [String: Any])?["sessions"] as? [[String: Any]])
        #expect(sessions.count == 2, "only the user's own: \(list.body)")
        #expect(sessions.contains { $0["id"] as? String == phone.session && $0["current"] as? Bool == true && $0["device"] as? String == "Phone" })
        #expect(sessions.contains { $0["id"] as? String == pad.session && $0["current"] as? Bool == false && $0["device"] as? String == "TestPhone/1" })
        #expect(sessions.allSatisfy { $0["provider"] as? String == "google" && $0["created_at"] is Int && $0["last_used_at"] is Int })
        let metrics = E2E.curl(["http://127.0.0.1:\(g.adminPort)/metrics"]).body
        #expect(metrics.contains("portcullis_sessions_total{event=\"created\"} 3"), "\(metrics)")
        let other = E2E.curl(["-X", "DELETE", "-H", "Authorization: Bearer \(phone.access)", "\(g.url)/auth/sessions/\(stranger.session)"])
        #expect(other.status == 404)
        #expect(Self.api(g, stranger.access).status == 200, "another user's session is untouched")
        let ended = E2E.curl(["-X", "DELETE", "-H", "Authorization: Bearer \(phone.access)", "\(g.url)/auth/sessions/\(pad.session)"])
        #expect(ended.status == 204)
        #expect(Self.api(g, pad.access).status == 401)
        #expect(Self.refresh(g, pad.refresh).status == 400)
        #expect(E2E.curl(["\(g.url)/auth/sessions"]).status == 401, "the list needs a session token")
        let idToken = try AuthFixtures.mint(g, "google")
        #expect(E2E.curl(["-H", idToken, "\(g.url)/auth/sessions"]).status == 401, "an ID token is not a session token")
    }

    /// With `store.state_dir` a session survives a restart: its refresh token still
    /// refreshes (the access tokens of a generated key do not, by design), a logged-out one
    /// stays ended.
    @Test func sessionsSurviveARestartWithAStateDirectory() throws {
        let upstream = try EchoUpstream()
        let dir = NSTemporaryDirectory() + "portcullis-sessions-\(UUID().uuidString)"
        var g = try Self.gateway(upstream, stateDir: dir)
        let kept = try #require(Self.pair(try Self.exchange(g).1))
        let next = try #require(Self.pair(Self.refresh(g, kept.refresh).body))
        let gone = try #require(Self.pair(try Self.exchange(g, sub: "200").1))
        #expect(E2E.curl(["-X", "POST", "-H", "Authorization: Bearer \(gone.access)", "\(g.url)/auth/logout"]).status == 204)
        let text = (try? String(contentsOfFile: dir + "/sessions.jsonl", encoding: .utf8)) ?? ""
        #expect(!text.contains(kept.access) && !text.contains(next.access) && !text.contains(next.refresh), "no token on disk")
        g.send(SIGTERM)
        E2E.waitForExit(g.process, timeout: 10)
        g = try Self.gateway(upstream, stateDir: dir)
        let after = Self.refresh(g, next.refresh)
        #expect(after.status == 200, "\(after)")
        if let pair = Self.pair(after.body) { #expect(Self.api(g, pair.access).status == 200 && pair.session == kept.session) }
        #expect(Self.refresh(g, kept.refresh).body.contains("invalid_grant"), "an old token is still a reuse")
        #expect(Self.refresh(g, gone.refresh).body.contains("invalid_grant"), "a logged-out session stays ended")
    }

    /// "Sign out everywhere" (subject revocation) ends every session of the user: their access
    /// tokens at once, their refresh tokens at the next refresh.
    @Test func signingOutEverywhereEndsEverySession() throws {
        let upstream = try EchoUpstream()
        let token = "sessions-admin-token-0123456789abcdef"
        let g = try GatewayProcess("""
        \(AuthFixtures.providers)
        sessions:
          issuer: "https://api.example.test"
          accept: [google]
          refresh_token: {secret: "\(Self.secret)"}
          require_tls: false
        upstreams:
          app: {url: "http://127.0.0.1:\(upstream.port)"}
        routes:
          - {path: /api, upstream: app, auth: required}
        """, adminToken: token)
        let a = try #require(Self.pair(try Self.exchange(g).1))
        let b = try #require(Self.pair(try Self.exchange(g).1))
        let c = try #require(Self.pair(try Self.exchange(g).1))
        // The admin API lists any user's sessions and ends one of them.
        let admin = "http://127.0.0.1:\(g.adminPort)"
        let listed = E2E.curl(["-H", "Authorization: Bearer \(token)", "\(admin)/sessions?user=google:117"])
        #expect(listed.status == 200 && listed.body.contains(a.session) && listed.body.contains(c.session)
                && listed.body.contains("\"user\":\"google:117\""), "\(listed)")
        #expect(E2E.curl(["\(admin)/sessions?user=google:117"]).status == 401, "the admin token is required")
        #expect(E2E.curl(["-X", "DELETE", "-H", "Authorization: Bearer \(token)", "\(admin)/sessions/\(c.session)"]).status == 200)
        #expect(Self.api(g, c.access).status == 401)
        #expect(E2E.curl(["-X", "DELETE", "-H", "Authorization: Bearer \(token)", "\(admin)/sessions/\(c.session)"]).status == 404)
        sleep(1)
        #expect(E2E.curl(["-X", "POST", "-H", "Authorization: Bearer \(token)", "-d", "{\"subject\":\"google:117\"}",
                          "http://127.0.0.1:\(g.adminPort)/revocations"]).status == 201)
        for pair in [a, b] {
            #expect(Self.api(g, pair.access).status == 401)
            let r = Self.refresh(g, pair.refresh)
            #expect(r.status == 400 && r.body.contains("revoked"), "\(r)")
        }
        sleep(1)
        #expect(Self.pair(try Self.exchange(g).1).map { Self.api(g, $0.access).status } == 200, "a new sign-in after it works")
    }

    /// Two instances sharing one `redis-server`, or a Redis Cluster: a session made on A
    /// refreshes on B; its access tokens pass on both; racing refreshes across the two
    /// converge; a reuse on A after the grace ends the session on B at once; logout on B ends
    /// it on A; the device list is the same on both. Sessions need shared signing keys there.
    @Test(arguments: ["redis", "cluster"])
    func twoInstancesShareSessionsThroughRedis(_ kind: String) throws {
        let upstream = try EchoUpstream()
        let redis = try SharedRedis(kind)
        let key = NSTemporaryDirectory() + "session-es256-\(UUID().uuidString).pem"
        E2E.run("/usr/bin/openssl", ["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", key])
        let extra = redis.storeYAML
        func instance() throws -> GatewayProcess {
            try GatewayProcess("""
            \(AuthFixtures.providers)
            sessions:
              issuer: "https://api.example.test"
              accept: [google]
              access_token: {signing_keys: ["\(key)"]}
              refresh_token: {secret: "\(Self.secret)", reuse_grace: 2s}
              require_tls: false
            \(extra)
            upstreams:
              app: {url: "http://127.0.0.1:\(upstream.port)"}
            routes:
              - {path: /api, upstream: app, auth: required}
            """)
        }
        let a = try instance(), b = try instance()
        let first = try #require(Self.pair(try Self.exchange(a, device: "Phone").1))
        #expect(Self.api(b, first.access).status == 200, "B accepts A's access token")
        let second = try #require(Self.pair(Self.refresh(b, first.refresh).body), "B refreshes A's session")
        let replay = Self.refresh(a, first.refresh)
        #expect(replay.status == 200 && replay.body == second.raw, "within the grace, A answers B's pair: \(replay)")
        let listA = E2E.curl(["-H", "Authorization: Bearer \(second.access)", "\(a.url)/auth/sessions"]).body
        let listB = E2E.curl(["-H", "Authorization: Bearer \(second.access)", "\(b.url)/auth/sessions"]).body
        #expect(listA.contains(first.session) && listA.contains("\"device\":\"Phone\""), "\(listA)")
        #expect(listA == listB)
        sleep(3)
        let reused = Self.refresh(a, first.refresh)
        #expect(reused.status == 400 && reused.body.contains("already used"), "\(reused)")
        #expect(waitUntil(3) { Self.api(b, second.access).status == 401 }, "the reuse on A ends the session on B")
        #expect(Self.refresh(b, second.refresh).status == 400)
        let third = try #require(Self.pair(try Self.exchange(b, sub: "400").1))
        #expect(E2E.curl(["-X", "POST", "-H", "Authorization: Bearer \(third.access)", "\(b.url)/auth/logout"]).status == 204)
        #expect(waitUntil(3) { Self.api(a, third.access).status == 401 })
        #expect(Self.refresh(a, third.refresh).status == 400)
        // Without shared signing keys the file is refused.
        let file = NSTemporaryDirectory() + "sessions-redis-\(UUID().uuidString).yaml"
        try """
        \(AuthFixtures.providers)
        sessions: {issuer: "https://x.test", accept: [google], refresh_token: {secret: "\(Self.secret)"}}
        \(extra)
        upstreams:
          app: {url: "http://127.0.0.1:\(upstream.port)"}
        routes:
          - {path: /api, upstream: app, auth: required}
        """.write(toFile: file, atomically: true, encoding: .utf8)
        let (code, out, err) = E2E.run(E2E.binary, ["check-config", file])
        #expect(code == 2 && (out + err).contains("signing_keys is required with store.redis"), "\(out)\(err)")
    }

    /// ID tokens minted outside the gateway (PyJWT), shaped as Google, Apple and Firebase
    /// issue them, with keys from local key hosts (Firebase's as a kid → PEM certificate
    /// map): each is exchanged; the wrong audience, a token past its expiry and another
    /// project's Firebase token are refused as on any route.
    @Test func googleAppleAndFirebaseTokensFromKeyHostsAreExchanged() throws {
        let upstream = try EchoUpstream()
        let google = try KeyHost(kids: ["g1"]), apple = try KeyHost(kids: ["a1"]), firebase = try KeyHost(kids: ["f1"])
        try firebase.publish(["f1"], format: "pem")
        let g = try GatewayProcess("""
        providers:
          - {name: google, type: google, audiences: ["ios.apps.googleusercontent.com"], jwks_url: "http://127.0.0.1:\(google.port)/"}
          - {name: apple, type: apple, audiences: ["com.example.app"], jwks_url: "http://127.0.0.1:\(apple.port)/"}
          - {name: firebase, type: firebase, project_id: "demo-project", jwks_url: "http://127.0.0.1:\(firebase.port)/"}
        sessions:
          issuer: "https://api.example.test"
          accept: [google, apple, firebase]
          refresh_token: {secret: "\(Self.secret)"}
          require_tls: false
        upstreams:
          app: {url: "http://127.0.0.1:\(upstream.port)"}
        routes:
          - {path: /api, upstream: app, auth: required}
        """)
        #expect(waitUntil(10) { E2E.curl(["http://127.0.0.1:\(g.adminPort)/readyz"]).status == 200 })
        let mint = E2E.packageRoot.appendingPathComponent("Tests/PortcullisEndToEndTests/Fixtures/mint_jwt.py").path
        func token(_ host: KeyHost, _ kid: String, _ claims: String) -> String {
            E2E.run("/usr/bin/python3", [mint, "--rs256", host.keyPath(kid), kid, claims]).1.trimmingCharacters(in: .whitespacesAndNewlines)
        }
        func exchange(_ id: String) -> (status: Int, body: String) {
            E2E.curl(["-X", "POST", "-H", "content-type: application/json", "-d", "{\"idToken\":\"\(id)\"}", "\(g.url)/auth/session"])
        }
        let cases: [(String, String, String)] = [
            ("google:1175", token(google, "g1", #"{"iss":"https://accounts.google.com","aud":"ios.apps.googleusercontent.com","azp":"ios.apps.googleusercontent.com","sub":"1175","email":"a@gmail.com","email_verified":true,"iat":"-0","exp":"+3600"}"#), "Google"),
            ("apple:001.abc.002", token(apple, "a1", #"{"iss":"https://appleid.apple.com","aud":"com.example.app","sub":"001.abc.002","email_verified":"true","auth_time":"-0","iat":"-0","exp":"+600"}"#), "Apple"),
            ("firebase:uid42", token(firebase, "f1", #"{"iss":"https://securetoken.google.com/demo-project","aud":"demo-project","sub":"uid42","auth_time":"-60","iat":"-0","exp":"+3600","firebase":{"sign_in_provider":"google.com"}}"#), "Firebase"),
        ]
        for (user, id, shape) in cases {
            let r = exchange(id)
            #expect(r.status == 200 && Self.pair(r.body)?.user == user, "\(shape): \(r)")
            if let pair = Self.pair(r.body) { #expect(try Echo(Self.api(g, pair.access).body).values("X-User-Id") == [user]) }
        }
        let wrongAudience = exchange(token(google, "g1", #"{"iss":"https://accounts.google.com","aud":"other.apps.googleusercontent.com","sub":"1","iat":"-0","exp":"+3600"}"#))
        // Refused as a token endpoint refuses a grant (RFC 6749 §5.2), with the reason.
        #expect(wrongAudience.status == 400 && wrongAudience.body.contains("\"error\":\"invalid_grant\"")
                && wrongAudience.body.contains("The ID token audience is not accepted"),
                "\(wrongAudience)")
        let expired = exchange(token(apple, "a1", #"{"iss":"https://appleid.apple.com","aud":"com.example.app","sub":"x","iat":"-7200","exp":"-3600"}"#))
        #expect(expired.status == 400 && expired.body.contains("invalid_grant") && expired.body.contains("The ID token expired"), "\(expired)")
        let otherProject = exchange(token(firebase, "f1", #"{"iss":"https://securetoken.google.com/other","aud":"other","sub":"u","auth_time":"-60","iat":"-0","exp":"+3600"}"#))
        #expect(otherProject.status == 400 && otherProject.body.contains("invalid_grant"), "\(otherProject)")
        #expect(!g.log.contains(cases[0].1), "no ID token in the log")
    }

    /// `user: {lookup}`: the exchange asks the app who the verified identity is (with the
    /// upstream's secret headers); its `user_id` is the session's user and its claims ride in
    /// every access token (never replacing a registered one); a 4xx refuses the sign-in (403),
    /// a bad answer or a dead app is 503.
    @Test func theLookupHookLetsTheAppNameItsUser() throws {
        let upstream = try EchoUpstream()
        let app = try LookupApp()
        let (port, log) = (app.port, app.log)
        let g = try GatewayProcess("""
        \(AuthFixtures.providers.replacingOccurrences(of: "claims: {email: X-User-Email}", with: "claims: {email: X-User-Email, plan: X-User-Plan}"))
        sessions:
          issuer: "https://api.example.test"
          accept: [google]
          user: {lookup: {upstream: users, path: /internal/users/resolve, timeout: 2s}}
          refresh_token: {secret: "\(Self.secret)"}
          require_tls: false
        upstreams:
          app: {url: "http://127.0.0.1:\(upstream.port)"}
          users: {url: "http://127.0.0.1:\(port)", request_headers: {x-internal-key: {value: "lookup-secret-0123456789"}}}
        routes:
          - {path: /api, upstream: app, auth: required}
          - {path: /u, upstream: users, auth: none, strip_prefix: true}
          - {path: /, upstream: users, auth: none}
        """, listen: "  - {address: \"127.0.0.1:PORT\", h2c: true}")
        let (status, body) = try Self.exchange(g, sub: "117")
        #expect(status == 200, "\(body)")
        let pair = try #require(Self.pair(body))
        #expect(pair.user == "u-117")
        // The hook is the gateway's alone: no client request reaches it, through any route, any
        // prefix stripping, any letter case, a trailing slash or a path below it; HTTP/2 too.
        func asked() -> Int { ((try? String(contentsOfFile: log, encoding: .utf8)) ?? "").split(separator: "\n").count }
        let before = asked()
        for path in ["/internal/users/resolve", "/INTERNAL/Users/resolve", "/internal/users/resolve/", "/internal/users/resolve/x",
                     "/u/internal/users/resolve", "/internal/./users/resolve", "/internal/users/%72esolve"] {
            for flags in [[], ["--http2-prior-knowledge"]] {
                let r = E2E.curl(flags + ["-X", "POST", "-H", "content-type: application/json",
                                          "-d", #"{"provider":"google","subject":"x","email":"victim@example.com"}"#, "\(g.url)\(path)"])
                #expect(r.status == 404, "\(path) \(flags): \(r)")
            }
        }
        // An encoded slash (which uvicorn and Next.js decode) never reaches an upstream at all.
        for path in ["/internal%2Fusers/resolve", "/internal%2fusers%2Fresolve", "/internal%5Cusers/resolve"] {
            let r = E2E.curl(["-X", "POST", "-d", "{}", "\(g.url)\(path)"])
            #expect(r.status == 400, "\(path): \(r)")
        }
        #expect(asked() == before, "the app's find-or-create was never run for a client")
        let call = Self.api(g, pair.access)
        let echo = try Echo(call.body)
        #expect(echo.values("X-User-Id") == ["u-117"] && echo.values("X-User-Plan") == ["pro"], "\(call.body)")
        let payload = try #require(Data(base64Encoded: Self.padded(String(pair.access.split(separator: ".")[1]))))
        let claims = try #require(try JSONSerialization.jsonObject(with: payload) as? [String: Any])
        #expect(claims["plan"] as? String == "pro" && claims["sub"] as? String == "u-117", "the app's sub is ignored")
        // Refreshed access tokens carry the claims too.
        let next = try #require(Self.pair(Self.refresh(g, pair.refresh).body))
        #expect(try Echo(Self.api(g, next.access).body).values("X-User-Plan") == ["pro"])
        // What the app was asked, with the upstream's secret header.
        let lines = ((try? String(contentsOfFile: log, encoding: .utf8)) ?? "").split(separator: "\n")
        let first = try #require(lines.first.flatMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] })
        let asked = try #require(first["body"] as? [String: Any])
        #expect(first["path"] as? String == "/internal/users/resolve")
        #expect(asked["provider"] as? String == "google" && asked["subject"] as? String == "117"
                && asked["email"] as? String == "117@example.com", "\(asked)")
        #expect((first["headers"] as? [String: String])?["x-internal-key"] == "lookup-secret-0123456789"
                || (first["headers"] as? [String: String])?["X-Internal-Key"] == "lookup-secret-0123456789", "\(first)")
        // The app refuses one identity; another answer has no user_id.
        let blocked = try Self.exchange(g, sub: "blocked")
        #expect(blocked.0 == 403 && blocked.1.contains("access_denied"), "\(blocked)")
        let broken = try Self.exchange(g, sub: "broken")
        #expect(broken.0 == 503 && broken.1.contains("temporarily_unavailable"), "\(broken)")
        app.stop()
        let down = try Self.exchange(g, sub: "118")
        #expect(down.0 == 503, "\(down)")
        #expect(g.log.contains("session lookup failed"))
    }

    /// `paths.exchange` as a list (RVU Tracker signs in with Google at one path and Apple at
    /// another, each with its own member): each path takes its own member and its own
    /// providers; another provider's ID token there is `400 invalid_grant`; bad entries are
    /// named at start.
    @Test func severalExchangePathsEachWithItsMemberAndProviders() throws {
        let upstream = try EchoUpstream()
        let config = """
        \(AuthFixtures.providers)
        sessions:
          issuer: "https://api.example.test"
          accept: [google, apple]
          refresh_token: {secret: "\(Self.secret)"}
          require_tls: false
          paths:
            exchange:
              - {path: /mobile/google, id_token_field: idToken, accept: [google]}
              - {path: /mobile/apple, id_token_field: identityToken, accept: [apple]}
              - /mobile/any
        upstreams:
          app: {url: "http://127.0.0.1:\(upstream.port)"}
        routes:
          - {path: /api, upstream: app, auth: required}
        """
        let g = try GatewayProcess(config)
        let google = String(try AuthFixtures.mint(g, "google", ["--sub", "g-1"]).dropFirst("Authorization: Bearer ".count))
        let apple = String(try AuthFixtures.mint(g, "apple", ["--sub", "a-1"]).dropFirst("Authorization: Bearer ".count))
        func post(_ path: String, _ member: String, _ token: String) -> (status: Int, body: String) {
            E2E.curl(["-X", "POST", "-H", "content-type: application/json", "-d", "{\"\(member)\":\"\(token)\"}", "\(g.url)\(path)"])
        }
        let cases: [(String, String, String, Int, String)] = [
            ("/mobile/google", "idToken", google, 200, "google:g-1"),
            ("/mobile/apple", "identityToken", apple, 200, "apple:a-1"),
            ("/mobile/apple", "id_token", apple, 200, "apple:a-1"),          // id_token is read everywhere
            ("/mobile/any", "idToken", apple, 200, "apple:a-1"),             // a bare path: sessions.accept, id_token_field
            ("/mobile/apple", "identityToken", google, 400, "invalid_grant"),
            ("/mobile/google", "identityToken", google, 400, "has no idToken member"),
        ]
        for (path, member, token, status, expected) in cases {
            let r = post(path, member, token)
            #expect(r.status == status && (status == 200 ? Self.pair(r.body)?.user == expected : r.body.contains(expected)),
                    "\(path) \(member): \(r)")
            if status == 200, let pair = Self.pair(r.body) { #expect(Self.api(g, pair.access).status == 200) }
        }
        #expect(post("/auth/session", "idToken", google).status == 404, "the default path is no exchange any more: unrouted")
        let exchanges = "      - {path: /mobile/google, id_token_field: idToken, accept: [google]}\n      - {path: /mobile/apple, id_token_field: identityToken, accept: [apple]}\n      - /mobile/any"
        for (bad, reason) in [("      - {path: /m, accept: [firebase]}", "'firebase' is not in sessions.accept"),
                              ("      - /m\n      - {path: /m}", "/m is listed twice"),
                              ("      - {path: /m, id_token: x}", "id_token"),
                              ("      - {accept: [google]}", "path"),
                              ("      - {path: /api}", "/api is also the path of the route at line")] {
            let errors = E2E.configErrors(config.replacingOccurrences(of: exchanges, with: bad))
            #expect(errors.contains("sessions.paths.exchange") && errors.contains(reason), "\(bad): \(errors)")
        }
        let clash = E2E.configErrors(config.replacingOccurrences(of: "  require_tls: false", with: "  require_tls: false\n  device_field: identityToken"))
        #expect(clash.contains("sessions.device_field"), "\(clash)")
    }

    /// With `identity.assertion`, the lookup hook's request carries an assertion the app
    /// verifies with the gateway's JWKS (an independent library): `sub` the ID token's
    /// `<provider>:<subject>`, `aud` the upstream, `purpose: session_lookup` (no route's
    /// assertion has it), so the app can tell the gateway's own request from any other.
    @Test func theLookupHooksRequestCarriesAnAssertionTheAppVerifies() throws {
        let app = try LookupApp()
        let (port, log) = (app.port, app.log)
        let g = try GatewayProcess("""
        \(AuthFixtures.providers.replacingOccurrences(of: "claims: {email: X-User-Email}}",
                                                     with: "claims: {email: X-User-Email}, assertion: {issuer: \"https://api.example.test\", lifetime: 60s}}"))
        sessions:
          issuer: "https://api.example.test"
          accept: [google]
          user: {lookup: {upstream: users, path: /internal/users/resolve}}
          refresh_token: {secret: "\(Self.secret)"}
          require_tls: false
        upstreams:
          users: {url: "http://127.0.0.1:\(port)"}
        routes:
          - {path: /api, upstream: users, auth: required}
        """)
        let (status, body) = try Self.exchange(g, sub: "117")
        #expect(status == 200 && Self.pair(body)?.user == "u-117", "\(body)")
        let line = try #require(((try? String(contentsOfFile: log, encoding: .utf8)) ?? "").split(separator: "\n").first)
        let asked = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
        let headers = (asked["headers"] as? [String: String] ?? [:]).reduce(into: [String: String]()) { $0[$1.key.lowercased()] = $1.value }
        let token = try #require(headers["x-portcullis-assertion"], "\(headers)")
        let jwks = try LockingUpstreamsEndToEndTests.jwks("\(g.url)/.well-known/portcullis/jwks.json")
        let verified = LockingUpstreamsEndToEndTests.verify(jwks.path, token, audience: "http://127.0.0.1:\(port)")
        #expect(verified.ok, "\(verified.output)")
        let claims = try #require(try JSONSerialization.jsonObject(with: Data(verified.output.utf8)) as? [String: Any])
        #expect(claims["sub"] as? String == "google:117" && claims["purpose"] as? String == "session_lookup"
                && claims["provider"] as? String == "google", "\(claims)")
    }

    /// A locked app (mutual TLS, as golfai's): the lookup hook presents the upstream's client
    /// certificate, so the app can be asked; without one the app refuses the handshake and the
    /// exchange is a 503.
    @Test func theLookupHookPresentsTheUpstreamsClientCertificate() throws {
        let pki = try TestPKI()
        let server = try pki.leaf(["localhost", "IP:127.0.0.1"])
        // A client certificate with a CN only (no subjectAltName), as golfai's nginx CA issues it.
        let client = try pki.leaf([], clientAuth: true)
        let app = try LookupApp(tls: [server.certificate, server.key, pki.caCertificate])
        let (port, log) = (app.port, app.log)
        func config(withCertificate: Bool, port: UInt16 = port) -> String {
            let certificate = withCertificate ? ", client_certificate: \"\(client.certificate)\", client_private_key: \"\(client.key)\"" : ""
            return """
            \(AuthFixtures.providers)
            sessions:
              issuer: "https://api.example.test"
              accept: [google]
              user: {lookup: {upstream: users, path: /internal/users/resolve, timeout: 3s}}
              refresh_token: {secret: "\(Self.secret)"}
              require_tls: false
            upstreams:
              users: {url: "https://127.0.0.1:\(port)", ca_file: "\(pki.caCertificate)"\(certificate)}
            routes:
              - {path: /api, upstream: users, auth: required}
            """
        }
        func gateway(withCertificate: Bool) throws -> GatewayProcess { try GatewayProcess(config(withCertificate: withCertificate)) }
        // `check-config --probe` names a hook the gateway cannot reach (exit 1), never running
        // the app's find-or-create (a GET); without --probe nothing is sent.
        func probe(_ yaml: String, _ flags: [String] = ["--probe"]) throws -> (Int32, String) {
            let file = NSTemporaryDirectory() + "probe-\(UUID().uuidString).yaml"
            try yaml.write(toFile: file, atomically: true, encoding: .utf8)
            defer { unlink(file) }
            let (code, out, err) = E2E.run(E2E.binary, ["check-config"] + flags + [file])
            return (code, out + err)
        }
        let reached = try probe(config(withCertificate: true))
        #expect(reached.0 == 0, "\(reached.1)")
        for (yaml, reason) in [(config(withCertificate: false), "upstreams.users cannot be reached"),
                               (config(withCertificate: true, port: Loopback.freePort()), "upstreams.users cannot be reached")] {
            let (code, out) = try probe(yaml)
            #expect(code == 1 && out.contains("sessions.user.lookup") && out.contains(reason), "\(out)")
            #expect(try probe(yaml, []).0 == 0, "without --probe the file is only read")
        }
        let lines = ((try? String(contentsOfFile: log, encoding: .utf8)) ?? "").split(separator: "\n")
        #expect(lines.isEmpty, "a probe never POSTs to the hook: \(lines)")
        let locked = try gateway(withCertificate: true)
        let (status, body) = try Self.exchange(locked, sub: "golfer")
        #expect(status == 200 && Self.pair(body)?.user == "u-golfer", "\(status) \(body)")
        let without = try gateway(withCertificate: false)
        let refused = try Self.exchange(without, sub: "golfer2")
        #expect(refused.0 == 503, "no certificate, no answer from a locked app: \(refused)")
    }

    /// `sessions.response`: the exchange and the refresh answer in the shape the app's clients
    /// already decode (RVU Tracker's `sessionToken`/`user`, golfai's `is_new_user` from the
    /// lookup hook's answer), typed; the tokens in it work; a template without the tokens, with
    /// an unknown placeholder or that is not a JSON object is refused at start.
    @Test func theExchangeAnswersInTheShapeTheClientsDecode() throws {
        let upstream = try EchoUpstream()
        let app = try LookupApp()
        let port = app.port
        let template = #"'{"success": true, "user": {"id": {user_id}, "email": {claim.email}, "plan": {claim.plan}}, "sessionToken": {access_token}, "expiresIn": {expires_in}, "refreshToken": {refresh_token}, "is_new_user": {lookup.is_new_user}, "user_profile": {lookup.user}}'"#
        let config = """
        \(AuthFixtures.providers)
        sessions:
          issuer: "https://api.example.test"
          accept: [google]
          user: {lookup: {upstream: users, path: /internal/users/resolve}}
          refresh_token: {secret: "\(Self.secret)"}
          require_tls: false
          carry_claims: [email]
          response: \(template)
        upstreams:
          app: {url: "http://127.0.0.1:\(upstream.port)"}
          users: {url: "http://127.0.0.1:\(port)"}
        routes:
          - {path: /api, upstream: app, auth: required}
        """
        let g = try GatewayProcess(config)
        func object(_ body: String) -> [String: Any] { (try? JSONSerialization.jsonObject(with: Data(body.utf8)) as? [String: Any]) ?? [:] }
        let (status, body) = try Self.exchange(g, sub: "new-7")
        let answer = object(body)
        #expect(status == 200 && answer["success"] as? Bool == true && answer["is_new_user"] as? Bool == true, "\(body)")
        let user = answer["user"] as? [String: Any] ?? [:]
        #expect(user["id"] as? String == "u-new-7" && user["email"] as? String == "new-7@example.com" && user["plan"] as? String == "pro",
                "\(body)")
        #expect((answer["user_profile"] as? [String: Any])?["plan"] as? String == "pro" && answer["expiresIn"] as? Int == 900, "\(body)")
        let token = try #require(answer["sessionToken"] as? String)
        let refreshToken = try #require(answer["refreshToken"] as? String)
        #expect(Self.api(g, token).status == 200, "the sessionToken is the access token")
        let returning = object(try Self.exchange(g, sub: "back-8").1)
        #expect(returning["is_new_user"] as? Bool == false)
        // The refresh answers in the same shape (no lookup answer there: null).
        let refreshed = Self.refresh(g, refreshToken)
        let next = object(refreshed.body)
        #expect(refreshed.status == 200 && next["sessionToken"] is String && next["refreshToken"] as? String != refreshToken
                && next["is_new_user"] is NSNull && (next["user"] as? [String: Any])?["email"] as? String == "new-7@example.com",
                "\(refreshed)")
        // Refused at start.
        for (bad, reason) in [(#"'{"token": {access_token}}'"#, "must carry {access_token} and {refresh_token}"),
                              (#"'{"a": {access_token}, "b": {refresh_token}, "c": {nonsense}}'"#, "unknown placeholder {nonsense}"),
                              (#"'[{access_token}, {refresh_token}]'"#, "not a JSON object")] {
            let errors = E2E.configErrors(config.replacingOccurrences(of: "response: \(template)", with: "response: \(bad)"))
            #expect(errors.contains("sessions.response") && errors.contains(reason), "\(bad): \(errors)")
        }
    }

    /// The session endpoints answer over TLS only by default (a plain listener: 403), and
    /// `check-config` names bad `sessions` keys.
    @Test func tlsOnlyByDefaultAndBadSettingsAreNamed() throws {
        let upstream = try EchoUpstream()
        let g = try Self.gateway(upstream, requireTLS: true)
        let (status, body) = try Self.exchange(g)
        #expect(status == 403 && body.contains("HTTPS only"), "\(status) \(body)")
        for (yaml, expected) in [
            ("accept: [app]", "only ID tokens"),
            ("accept: [nobody]", "no provider 'nobody'"),
            ("refresh_token: {secret: \"short\"}", "at least 32 bytes"),
            ("user: {lookup: {upstream: nobody, path: /x}}", "no upstream 'nobody'"),
        ] {
            var lines = ["issuer: \"https://x.test\"", "accept: [google]", "refresh_token: {secret: \"\(Self.secret)\"}"]
            let key = String(yaml.prefix { $0 != ":" })
            lines.removeAll { $0.hasPrefix(key + ":") }
            lines.append(yaml)
            let file = NSTemporaryDirectory() + "sessions-\(UUID().uuidString).yaml"
            try """
            \(AuthFixtures.providers)
            sessions:
            \(lines.map { "  " + $0 }.joined(separator: "\n"))
            upstreams:
              app: {url: "http://127.0.0.1:\(upstream.port)"}
            routes:
              - {path: /api, upstream: app, auth: required}
            """.write(toFile: file, atomically: true, encoding: .utf8)
            let (code, out, err) = E2E.run(E2E.binary, ["check-config", file])
            #expect(code == 2 && (out + err).contains("sessions") && (out + err).contains(expected), "\(yaml): \(out)\(err)")
        }
    }

    static func padded(_ text: String) -> String {
        var s = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while s.count % 4 != 0 { s += "=" }
        return s
    }

    /// The session endpoints are routes like any other for `rate_limits:` (the first use of a
    /// limit: sign-in and refresh by client address): past the rate, 429 with Retry-After, and
    /// the exchange never ran (no session was made).
    @Test func signInAndRefreshCanBeRateLimitedByClientAddress() throws {
        let upstream = try EchoUpstream()
        let g = try Self.gateway(upstream, extra: """
        rate_limits:
          - {name: sign-in, routes: [/auth/session, /auth/refresh], key: client_address, rate: 2/h}
        """)
        let (first, body) = try Self.exchange(g, sub: "rl-1")
        #expect(first == 200, "\(body)")
        let pair = try #require(Self.pair(body))
        #expect(Self.refresh(g, pair.refresh).status == 200)
        let (third, refused) = try Self.exchange(g, sub: "rl-2")
        #expect(third == 429 && refused.contains("rate_limited"), "\(refused)")
        #expect(Self.refresh(g, pair.refresh).status == 429)
        // The API itself is not limited by that rule.
        #expect(Self.api(g, pair.access).status == 200)
        let (_, metrics) = E2E.curl(["http://127.0.0.1:\(g.adminPort)/metrics"])
        #expect(metrics.contains("portcullis_sessions_total{event=\"created\"} 1"), "\(metrics)")
    }
}

/// A JWT's payload, decoded (no verification: the tests read what the gateway signed).
enum TokenPayload {
    static func payload(_ token: String) -> [String: Any]? {
        let parts = token.split(separator: ".")
        guard parts.count == 3 else { return nil }
        var text = parts[1].replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while text.count % 4 != 0 { text += "=" }
        guard let data = Data(base64Encoded: text) else { return nil }
        return try? JSONSerialization.jsonObject(with: data) as? [String: Any]
    }
}

/// The app's user lookup (`Fixtures/lookup_app.py`) on a free port, its requests logged as
/// JSON lines in `log`; `tls`: certificate, key and, for mutual TLS, the client CA.
final class LookupApp {
    let port = Loopback.freePort()
    let log = NSTemporaryDirectory() + "lookup-\(UUID().uuidString).jsonl"
    private var pid: pid_t = 0

    init(tls: [String] = []) throws {
        pid = try RedisProcess.spawn(["/usr/bin/python3", E2E.packageRoot.appendingPathComponent(
            "Tests/PortcullisEndToEndTests/Fixtures/lookup_app.py").path, "\(port)", log] + tls, stdout: nil)
        guard Loopback.waitForPort(port) else { stop(); throw TestFailure("lookup_app.py did not listen on \(port)") }
    }

    func stop() {
        guard pid != 0 else { return }
        kill(pid, SIGKILL)
        var status: Int32 = 0
        waitpid(pid, &status, 0)
        pid = 0
    }

    deinit { stop() }
}
