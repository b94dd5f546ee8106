import Foundation
import PortcullisTestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// The review's low findings (#33.6), each as a class, through the real binary: the nonce
/// the exchange can demand, the lookup hook's claim types and unverified addresses, what
/// `check-config` refuses (a tracing endpoint that could inject into its request line, the
/// reserved provider name), `tracestate` past W3C's limits, and per-user state bounds.
@Suite(.serialized) struct StateBoundsEndToEndTests {
    static func idToken(_ g: GatewayProcess, sub: String, claims: [String] = []) throws -> String {
        String(try AuthFixtures.mint(g, "google", ["--sub", sub] + claims.flatMap { ["--claim", $0] })
            .dropFirst("Authorization: Bearer ".count))
    }

    static func exchange(_ g: GatewayProcess, _ body: String, agent: String = "TestPhone/1") -> (status: Int, body: String) {
        E2E.curl(["-X", "POST", "-H", "content-type: application/json", "-H", "user-agent: \(agent)", "-d", body, "\(g.url)/auth/session"])
    }

    static func sessionsGateway(_ upstream: EchoUpstream, sessionsExtra: String) throws -> GatewayProcess {
        try GatewayProcess("""
        \(AuthFixtures.providers)
        sessions:
          issuer: "https://api.example.test"
          accept: [google]
          refresh_token: {secret: "\(SessionsEndToEndTests.secret)"}
          require_tls: false
          \(sessionsExtra)
        upstreams:
          app: {url: "http://127.0.0.1:\(upstream.port)"}
        routes:
          - {path: /api, upstream: app, auth: required}
        """)
    }

    @Test func requireNonceRefusesAnExchangeWithoutTheSignInsNonce() throws {
        let upstream = try EchoUpstream()
        let g = try Self.sessionsGateway(upstream, sessionsExtra: "")
        // Off by default: no nonce, no question.
        #expect(Self.exchange(g, "{\"idToken\":\"\(try Self.idToken(g, sub: "1"))\"}").status == 200)
        let strict = try Self.sessionsGateway(upstream, sessionsExtra: "require_nonce: true")
        let withNonce = try Self.idToken(strict, sub: "2", claims: ["nonce=n-0123456789"])
        let without = try Self.idToken(strict, sub: "3")
        let noMember = Self.exchange(strict, "{\"idToken\":\"\(withNonce)\"}")
        #expect(noMember.status == 400 && noMember.body.contains("invalid_grant") && noMember.body.contains("nonce"), "\(noMember)")
        let noClaim = Self.exchange(strict, "{\"idToken\":\"\(without)\",\"nonce\":\"n-0123456789\"}")
        #expect(noClaim.status == 400 && noClaim.body.contains("invalid_grant"), "\(noClaim)")
        let bearer = E2E.curl(["-X", "POST", "-H", "Authorization: Bearer \(withNonce)", "\(strict.url)/auth/session"])
        #expect(bearer.status == 400 && bearer.body.contains("nonce"), "the Bearer form carries no nonce: \(bearer)")
        let wrong = Self.exchange(strict, "{\"idToken\":\"\(withNonce)\",\"nonce\":\"another\"}")
        #expect(wrong.status == 400, "\(wrong)")
        #expect(Self.exchange(strict, "{\"idToken\":\"\(withNonce)\",\"nonce\":\"n-0123456789\"}").status == 200)
    }

    /// Replaying one ID token grows nothing: it finds the session it began (the same pair),
    /// so neither the sessions nor the revocations grow; under `require_nonce` the replay is
    /// refused. Embedded and Redis.
    @Test(arguments: ["embedded", "redis"])
    func replayingOneIDTokenGrowsNeitherSessionsNorRevocations(_ store: String) throws {
        let upstream = try EchoUpstream()
        var redis: RedisProcess?
        var extra = ""
        if store == "redis" {
            let process = try RedisProcess()
            redis = process
            let key = NSTemporaryDirectory() + "replay-es256-\(UUID().uuidString).pem"
            E2E.run("/usr/bin/openssl", ["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", key])
            extra = "access_token: {signing_keys: [\"\(key)\"]}"
            _ = process
        }
        let g = try GatewayProcess("""
        \(AuthFixtures.providers)
        sessions:
          issuer: "https://api.example.test"
          accept: [google]
          refresh_token: {secret: "\(SessionsEndToEndTests.secret)"}
          require_tls: false
          max_per_user: 3
          \(extra)
        \(redis.map { "store: {redis: \"redis://127.0.0.1:\($0.port)/0\"}" } ?? "")
        upstreams:
          app: {url: "http://127.0.0.1:\(upstream.port)"}
        routes:
          - {path: /api, upstream: app, auth: required}
        """, metricsPublic: true)
        let token = try Self.idToken(g, sub: "900")
        let first = try #require(SessionsEndToEndTests.pair(Self.exchange(g, "{\"idToken\":\"\(token)\"}").body))
        for _ in 0..<20 {
            let again = try #require(SessionsEndToEndTests.pair(Self.exchange(g, "{\"idToken\":\"\(token)\"}").body))
            #expect(again.session == first.session && again.refresh == first.refresh)
        }
        let list = E2E.curl(["-H", "Authorization: Bearer \(first.access)", "\(g.url)/auth/sessions"]).body
        #expect(list.components(separatedBy: "\"id\":").count - 1 == 1, "one session: \(list)")
        let metrics = E2E.curl(["http://127.0.0.1:\(g.adminPort)/metrics"]).body
        #expect(!metrics.contains("event=\"evicted\""), "no eviction, so no revocation: \(metrics.split(separator: "\n").filter { $0.contains("sessions_total") })")
        #expect(SessionsEndToEndTests.api(g, first.access).status == 200)
        // Another ID token of the same user is another sign-in.
        let other = try #require(SessionsEndToEndTests.pair(Self.exchange(g, "{\"idToken\":\"\(try Self.idToken(g, sub: "900"))\"}").body))
        #expect(other.session != first.session)
    }

    @Test func underRequireNonceAReplayedIDTokenIsRefused() throws {
        let upstream = try EchoUpstream()
        let g = try Self.sessionsGateway(upstream, sessionsExtra: "require_nonce: true")
        let token = try Self.idToken(g, sub: "901", claims: ["nonce=n-abcdef012345"])
        let body = "{\"idToken\":\"\(token)\",\"nonce\":\"n-abcdef012345\"}"
        #expect(Self.exchange(g, body).status == 200)
        let replayed = Self.exchange(g, body)
        #expect(replayed.status == 400 && replayed.body.contains("already exchanged"), "\(replayed)")
    }

    @Test func theLookupHookKeepsClaimTypesAndNeverVouchesForAnUnverifiedEmail() throws {
        let upstream = try EchoUpstream()
        let port = Loopback.freePort()
        let log = NSTemporaryDirectory() + "lookup-types-\(UUID().uuidString).jsonl"
        let app = try RedisProcess.spawn(["/usr/bin/python3", E2E.packageRoot.appendingPathComponent(
            "Tests/PortcullisEndToEndTests/Fixtures/lookup_app.py").path, "\(port)", log], stdout: nil)
        defer { kill(app, SIGKILL); var s: Int32 = 0; waitpid(app, &s, 0) }
        #expect(Loopback.waitForPort(port))
        let g = try GatewayProcess("""
        \(AuthFixtures.providers)
        sessions:
          issuer: "https://api.example.test"
          accept: [google]
          user: {lookup: {upstream: users, path: /internal/users/resolve, timeout: 2s}}
          refresh_token: {secret: "\(SessionsEndToEndTests.secret)"}
          require_tls: false
        upstreams:
          app: {url: "http://127.0.0.1:\(upstream.port)"}
          users: {url: "http://127.0.0.1:\(port)"}
        routes:
          - {path: /api, upstream: app, auth: required}
        """)
        func asked(_ claims: [String], body: (String) -> String = { "{\"idToken\":\"\($0)\"}" }) throws -> [String: Any] {
            try? FileManager.default.removeItem(atPath: log)
            let token = try Self.idToken(g, sub: "t\(claims.count)", claims: claims)
            let r = Self.exchange(g, body(token))
            #expect(r.status == 200, "\(r)")
            let line = try #require(((try? String(contentsOfFile: log, encoding: .utf8)) ?? "").split(separator: "\n").last)
            let object = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
            return try #require(object["body"] as? [String: Any])
        }
        let unverified = try asked(["email=who@example.com", "email_verified=false"])
        #expect(unverified["email"] is NSNull, "an unverified address is not presented as the user's: \(unverified)")
        #expect(unverified["email_verified"] as? Bool == false)
        let claims = try #require(unverified["claims"] as? [String: Any])
        #expect((claims["email_verified"] as? NSNumber).map { String(cString: $0.objCType) == "c" && !$0.boolValue } == true,
                "email_verified stays a JSON false: \(claims)")
        let verified = try asked(["email=me@example.com", "email_verified=true"])
        #expect(verified["email"] as? String == "me@example.com" && verified["email_verified"] as? Bool == true, "\(verified)")
        // Apple's string form "false" is no verification either; the Bearer form is read too.
        let apple = try asked(["email=x@privaterelay.example", "email_verified=\"false\""], body: { "{\"id_token\":\"\($0)\"}" })
        #expect(apple["email"] is NSNull, "\(apple)")
    }

    @Test func checkConfigRefusesInjectableTracingEndpointsAndTheReservedProviderName() throws {
        func errors(_ endpoint: String) -> String {
            E2E.configErrors("""
            tracing: {endpoint: "\(endpoint)"}
            upstreams:
              app: {url: "http://127.0.0.1:1"}
            routes:
              - {path: /, upstream: app, auth: none}
            """)
        }
        for bad in ["http://127.0.0.1:4318/v1/tr aces", "http://127.0.0.1:4318/v1/traces%0d%0aX-Injected:%20yes",
                    "http://127.0.0.1:4318/v1/\\u0007bell", "http://user@127.0.0.1:4318/v1/traces", "ftp://127.0.0.1/x",
                    "http://127.0.0.1:4318/v1/traces#frag", "http://127.0.0.1:4318/v1/caf%C3%A9"] {
            #expect(errors(bad).contains("tracing.endpoint"), "\(bad) → \(errors(bad))")
        }
        #expect(errors("http://127.0.0.1:4318/v1/traces").isEmpty)
        let reserved = E2E.configErrors("""
        providers:
          - {name: session, type: hs256, secret: "\(AppFitEndToEndTests.secret)"}
        upstreams:
          app: {url: "http://127.0.0.1:1"}
        routes:
          - {path: /, upstream: app}
        """)
        #expect(reserved.contains("providers[0].name") && reserved.contains("reserved"), "\(reserved)")
    }

    @Test func aTraceStatePastW3CLimitsIsDroppedNotForwarded() throws {
        let upstream = try EchoUpstream()
        let g = try GatewayProcess("""
        tracing: {endpoint: "http://127.0.0.1:9/v1/traces", accept_parent: always, sample_ratio: 0}
        \(upstream.openRoute)
        """)
        let parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
        func forwarded(_ state: [String]) throws -> [String] {
            let r = E2E.curl(["-H", "traceparent: \(parent)"] + state.flatMap { ["-H", "tracestate: \($0)"] } + ["\(g.url)/t"])
            // (Passed on in the W3C package's canonical form: ", " between members.)
            return try Echo(r.body).values("tracestate").map { $0.replacingOccurrences(of: ", ", with: ",") }
        }
        let members = (1...32).map { "v\($0)=x" }
        let full = try forwarded([members.joined(separator: ",")])
        let small = try forwarded(["a=1,b=2"])
        #expect(full == [members.joined(separator: ",")], "\(full) \(small)")
        #expect(try forwarded([(members + ["v33=x"]).joined(separator: ",")]).isEmpty, "33 members")
        #expect(try forwarded([members.prefix(20).joined(separator: ","), (members.suffix(12) + ["v33=x"]).joined(separator: ",")]).isEmpty,
                "33 members over two fields")
        let first = "a=" + String(repeating: "x", count: 255)  // 257 bytes: values are at most 256 characters
        #expect(try forwarded([first + ",b=" + String(repeating: "x", count: 253)]).isEmpty, "513 bytes")
        #expect(try forwarded([first + ",b=" + String(repeating: "x", count: 252)]).count == 1, "512 bytes")
    }

    @Test func aDeviceNameIsKeptToSixtyFourCharacters() throws {
        let upstream = try EchoUpstream()
        let g = try SessionsEndToEndTests.gateway(upstream)
        let long = String(repeating: "d", count: 300)
        let r = Self.exchange(g, "{\"idToken\":\"\(try Self.idToken(g, sub: "700"))\",\"device_name\":\"\(long)\"}")
        let pair = try #require(SessionsEndToEndTests.pair(r.body), "\(r)")
        let other = Self.exchange(g, "{\"idToken\":\"\(try Self.idToken(g, sub: "700"))\"}", agent: String(repeating: "u", count: 300))
        #expect(other.status == 200)
        let list = E2E.curl(["-H", "Authorization: Bearer \(pair.access)", "\(g.url)/auth/sessions"]).body
        let object = try #require(try JSONSerialization.jsonObject(with: Data(list.utf8)) as? [String: Any])
        let devices = (object["sessions"] as? [[String: Any]] ?? []).compactMap { $0["device"] as? String }
        #expect(devices.count == 2 && devices.allSatisfy { $0.count == 64 }, "\(devices)")
    }

    /// A Redis password holding '/', '%' and '@' (written as is) authenticates, and no log
    /// line carries it, at start, at a refused reload naming another URL, or when Redis is gone.
    @Test func aRedisPasswordWithURLCharactersAuthenticatesAndIsNeverLogged() throws {
        let password = "s3cr/et%zz@pass"
        let redis = try RedisProcess(extra: ["--requirepass", password])
        let upstream = try EchoUpstream()
        let admin = "bounds-admin-token-0123456789abcdef"
        let store = "store: {redis: \"redis://:\(password)@127.0.0.1:\(redis.port)/0\"}"
        let g = try GatewayProcess("""
        providers:
          - {name: app, type: hs256, secret: "\(AppFitEndToEndTests.secret)"}
        \(store)
        upstreams:
          app: {url: "http://127.0.0.1:\(upstream.port)"}
        routes:
          - {path: /, upstream: app, auth: required}
        """, adminToken: admin)
        #expect(E2E.curl(["-X", "POST", "-H", "Authorization: Bearer \(admin)", "-d", #"{"jti":"pw-1"}"#,
                          "http://127.0.0.1:\(g.adminPort)/revocations"]).status == 201, "authenticated: \(g.log.suffix(800))")
        #expect(redis.cli(["-a", password, "--no-auth-warning", "EXISTS", "portcullis:revoked:jti:pw-1"]) == "1")
        let text = try String(contentsOfFile: g.configPath, encoding: .utf8)
        try text.replacingOccurrences(of: "/0\"}", with: "/1\"}").write(toFile: g.configPath, atomically: true, encoding: .utf8)
        let refused = E2E.curl(["-X", "POST", "-H", "authorization: Bearer \(admin)", "http://127.0.0.1:\(g.adminPort)/reload"])
        #expect(refused.status == 422 && !refused.body.contains("s3cr"), "\(refused)")
        redis.stop()
        #expect(waitUntil(10) { g.log.contains("degraded") || g.log.contains("unreachable") || g.log.contains("disconnected") })
        for fragment in ["s3cr", "et%zz", "zz@pass"] { #expect(!g.log.contains(fragment), "\(fragment) in \(g.log.suffix(1500))") }
    }
}

/// SIGUSR1 reopens the log files at their paths (nginx's logrotate convention), as every
/// applied reload does: a rotated access log file and a service manager's log file get the
/// next lines; the process goes on (SIGUSR1 used to end it with no drain).
@Suite(.serialized) struct LogReopenEndToEndTests {
    @Test func sigusr1ReopensTheAccessLogAndTheProcessLog() throws {
        let upstream = try EchoUpstream()
        let token = "reopen-admin-token-0123456789abcdef"
        let g = try GatewayProcess(upstream.openRoute, adminToken: token)
        #expect(E2E.curl(["\(g.url)/before"]).status == 200)
        #expect(g.waitForLog("/before"))

        // The process log (standard output and error, a file here as under a service manager).
        #expect(rename(g.logPath, g.logPath + ".1") == 0)
        g.send(SIGUSR1)
        #expect(waitUntil(10) { FileManager.default.fileExists(atPath: g.logPath) && g.log.contains("log files reopened") },
                "\(String(describing: try? String(contentsOfFile: g.logPath + ".1", encoding: .utf8).suffix(800)))")
        #expect(E2E.curl(["\(g.url)/after"]).status == 200)
        #expect(g.waitForLog("/after"))
        let rotated = try String(contentsOfFile: g.logPath + ".1", encoding: .utf8)
        #expect(rotated.contains("/before") && !rotated.contains("/after"))
        #expect(g.process.isRunning)

        // An access log file (switched to by a reload), rotated the same way.
        let accessLog = FileManager.default.temporaryDirectory.appendingPathComponent("access-\(UUID().uuidString).log").path
        let text = try String(contentsOfFile: g.configPath, encoding: .utf8)
        try text.replacingOccurrences(of: "access_log: stdout", with: "access_log: \"\(accessLog)\"")
            .write(toFile: g.configPath, atomically: true, encoding: .utf8)
        #expect(E2E.curl(["-X", "POST", "-H", "authorization: Bearer \(token)", "http://127.0.0.1:\(g.adminPort)/reload"]).status == 200)
        #expect(E2E.curl(["\(g.url)/one"]).status == 200)
        #expect(waitUntil(10) { ((try? String(contentsOfFile: accessLog, encoding: .utf8)) ?? "").contains("/one") })
        #expect(rename(accessLog, accessLog + ".1") == 0)
        g.send(SIGUSR1)
        #expect(waitUntil(10) { FileManager.default.fileExists(atPath: accessLog) })
        #expect(E2E.curl(["\(g.url)/two"]).status == 200)
        #expect(waitUntil(10) { ((try? String(contentsOfFile: accessLog, encoding: .utf8)) ?? "").contains("/two") })
        let old = try String(contentsOfFile: accessLog + ".1", encoding: .utf8)
        #expect(old.contains("/one") && !old.contains("/two"))
        // A reload reopens a moved file too (logrotate without the signal).
        #expect(rename(accessLog, accessLog + ".2") == 0)
        #expect(E2E.curl(["-X", "POST", "-H", "authorization: Bearer \(token)", "http://127.0.0.1:\(g.adminPort)/reload"]).status == 200)
        #expect(E2E.curl(["\(g.url)/three"]).status == 200)
        #expect(waitUntil(10) { ((try? String(contentsOfFile: accessLog, encoding: .utf8)) ?? "").contains("/three") })
        #expect(g.process.isRunning)
    }
}
