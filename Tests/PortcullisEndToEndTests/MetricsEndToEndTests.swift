import Foundation
import Testing
import PortcullisTestSupport

/// `GET /metrics` on the admin listener of the real binary: after a known mix
/// of requests (verified, cached, expired, missing, revoked, unrouted; a key
/// fetched from a local key host), every counter the issue names has the
/// exact value those requests imply.
@Suite(.serialized)
struct MetricsEndToEndTests {
    static let adminToken = "metrics-admin-token-0123456789"

    /// Series line → value, from Prometheus text (`name{labels} value`).
    static func parse(_ text: String) -> [String: Double] {
        var series: [String: Double] = [:]
        for line in text.split(separator: "\n") where !line.hasPrefix("#") {
            guard let space = line.lastIndex(of: " "), let value = Double(line[line.index(after: space)...]) else { continue }
            series[String(line[..<space])] = value
        }
        return series
    }

    static func scrape(_ gateway: GatewayProcess, token: String? = adminToken) -> (status: Int, series: [String: Double], body: String) {
        var arguments = ["http://127.0.0.1:\(gateway.adminPort)/metrics"]
        if let token { arguments = ["-H", "Authorization: Bearer \(token)"] + arguments }
        let (status, body) = E2E.curl(arguments)
        return (status, parse(body), body)
    }

    /// `portcullis --version` and `portcullis_build_info` say the same: the version in
    /// CHANGELOG.md, the commit the sources are at (this clone's HEAD), its date, and the
    /// libraries the process runs with (the OpenSSL version is the one `openssl version` of
    /// the same system prints).
    @Test func versionAndBuildInfoSayWhatTheBinaryIs() throws {
        let (status, out, _) = E2E.run(E2E.binary, ["--version"])
        #expect(status == 0, "\(out)")
        let head = E2E.run("/usr/bin/git", ["-C", E2E.packageRoot.path, "rev-parse", "--short=12", "HEAD"]).1
            .trimmingCharacters(in: .whitespacesAndNewlines)
        let changelog = try String(contentsOf: E2E.packageRoot.appendingPathComponent("CHANGELOG.md"), encoding: .utf8)
        let version = try #require(out.split(separator: " ").dropFirst().first.map(String.init))
        #expect(out.hasPrefix("portcullis \(version) (commit \(head), built 20") && changelog.contains("## [\(version)]"), "\(out)")
        let openssl = E2E.run("/usr/bin/openssl", ["version"]).1.split(separator: " ").prefix(2).joined(separator: " ")
        #expect(out.contains("openssl: \(openssl)") && out.contains("nghttp2: 1.") && out.contains("hiredis: "), "\(out) vs \(openssl)")
        let upstream = try EchoUpstream()
        let g = try GatewayProcess(upstream.openRoute, adminToken: Self.adminToken)
        let scrape = Self.scrape(g)
        let line = try #require(scrape.body.split(separator: "\n").first { $0.hasPrefix("portcullis_build_info{") }, "\(scrape.body)")
        #expect(line.contains("version=\"\(version)\"") && line.contains("commit=\"\(head)\"") && (line.hasSuffix(" 1") || line.hasSuffix(" 1.0"))
                && line.contains("openssl=\"\(openssl)") && line.contains("hiredis=\""), "\(line)")
        #expect(g.log.contains("\"version\":\"\(version)\""), "the start line names the version")
    }

    /// Metrics operators alert on (#35.4): the edge request-duration histogram by route and
    /// status class (cumulative buckets past the longest timeout, `_count` equal to the
    /// requests counted), `process_*` as the Prometheus clients name them, and the expiry of
    /// each certificate a TLS listener serves.
    @Test func durationHistogramProcessMetricsAndCertificateExpiry() throws {
        let pki = try TestPKI()
        let leaf = try pki.leaf(["api.test"], endDays: 30)
        let upstream = try EchoUpstream()
        // Whole seconds: the kernel's boot time (btime) is.
        let launched = Date().timeIntervalSince1970.rounded(.down) - 1
        let g = try GatewayProcess("""
        providers:
          - {name: app, type: hs256, secret: "\(AuthFixtures.appSecret)"}
        upstreams:
          app: {url: "http://127.0.0.1:\(upstream.port)"}
        routes:
          - {path: /open, upstream: app, auth: none}
          - {path: /api, upstream: app, auth: required}
        """, adminToken: Self.adminToken, listen: "  - {address: \"127.0.0.1:PORT\", tls: {certificates: [{certificate: \"\(leaf.certificate)\", private_key: \"\(leaf.key)\"}]}}")
        let base = ["-k", "--resolve", "api.test:\(g.port):127.0.0.1"]
        for _ in 0..<5 { #expect(E2E.curl(base + ["https://api.test:\(g.port)/open/x"]).status == 200) }
        for _ in 0..<3 { #expect(E2E.curl(base + ["https://api.test:\(g.port)/api/x"]).status == 401) }
        #expect(E2E.curl(base + ["https://api.test:\(g.port)/open/slow/300"]).status == 200)
        let scraped = Date().timeIntervalSince1970
        let scrape = Self.scrape(g)
        let s = scrape.series
        #expect(scrape.body.contains("# TYPE portcullis_request_duration_seconds histogram"), "\(scrape.body.prefix(400))")
        let ok = #"route="/open",code_class="2xx""#, refused = #"route="/api",code_class="4xx""#
        #expect(s["portcullis_request_duration_seconds_count{\(ok)}"] == 6 && s["portcullis_request_duration_seconds_count{\(refused)}"] == 3,
                "\(scrape.body.split(separator: "\n").filter { $0.contains("duration_seconds") })")
        #expect(s["portcullis_request_duration_seconds_bucket{\(ok),le=\"+Inf\"}"] == 6)
        #expect(s["portcullis_request_duration_seconds_bucket{\(ok),le=\"300\"}"] == 6)
        // The 300 ms request is past the 250 ms bucket, within the 500 ms one.
        let below = s["portcullis_request_duration_seconds_bucket{\(ok),le=\"0.25\"}"] ?? -1
        let within = s["portcullis_request_duration_seconds_bucket{\(ok),le=\"0.5\"}"] ?? -1
        #expect(below <= 5 && within == 6, "\(below) \(within)")
        #expect((s["portcullis_request_duration_seconds_sum{\(ok)}"] ?? 0) >= 0.3)
        #expect(s[#"portcullis_requests_total{route="/open",code="200"}"#] == 6)
        // process_*.
        #expect((s["process_open_fds"] ?? 0) > 5 && (s["process_max_fds"] ?? 0) > (s["process_open_fds"] ?? 0))
        #expect((s["process_resident_memory_bytes"] ?? 0) > 1_000_000 && (s["process_cpu_seconds_total"] ?? 0) > 0)
        // The process's start (from the kernel), not the first scrape's time: after the launch,
        // before the 300 ms request that preceded the scrape.
        let start = s["process_start_time_seconds"] ?? 0
        #expect(start >= launched && start < scraped - 0.25, "\(start): launched \(launched), scraped \(scraped)")
        // The served certificate's expiry: 30 days out.
        let expiry = s["portcullis_certificate_expiry_timestamp_seconds{listener=\"127.0.0.1:\(g.port)\",certificate=\"\(leaf.certificate)\"}"] ?? 0
        #expect(abs(expiry - Date().addingTimeInterval(30 * 86_400).timeIntervalSince1970) < 2 * 86_400, "\(expiry)")
    }

    /// Connections by listener and protocol, TLS handshake failures by reason, Redis command
    /// latency (#35.4): each failure made by a real client (curl, openssl s_client, a raw
    /// socket), each connection held open while the scrape counts it.
    @Test func connectionsHandshakeFailuresAndRedisLatency() throws {
        let pki = try TestPKI()
        let leaf = try pki.leaf(["api.test"])
        let upstream = try EchoUpstream()
        let redis = try RedisProcess()
        let g = try GatewayProcess("""
        store: {redis: "redis://127.0.0.1:\(redis.port)/0"}
        upstreams:
          app: {url: "http://127.0.0.1:\(upstream.port)"}
        routes:
          - {path: /, upstream: app, auth: none}
        """, adminToken: Self.adminToken,
             listen: "  - {address: \"127.0.0.1:PORT\", tls: {min_version: \"1.3\", handshake_timeout: 1s, certificates: [{certificate: \"\(leaf.certificate)\", private_key: \"\(leaf.key)\"}]}}")
        let listener = "127.0.0.1:\(g.port)"
        /// Scrapes until `done` holds (bounded), returning the last scrape's series.
        func scrape(until done: ([String: Double]) -> Bool) -> [String: Double] {
            var series: [String: Double] = [:]
            for _ in 0..<100 {
                series = Self.scrape(g).series
                if done(series) { break }
                usleep(100_000)
            }
            return series
        }
        func connections(_ proto: String, _ s: [String: Double], at address: String? = nil) -> Double? {
            s["portcullis_connections{listener=\"\(address ?? listener)\",protocol=\"\(proto)\"}"]
        }
        func failures(_ reason: String, _ s: [String: Double]) -> Double {
            s["portcullis_tls_handshake_failures_total{listener=\"\(listener)\",reason=\"\(reason)\"}"] ?? 0
        }

        // Held: a connection that never starts its handshake, and an HTTP/2 one (ALPN h2,
        // held by s_client reading its standard input for a while).
        let idle = try RawConnection(port: g.port)
        let h2 = try RedisProcess.spawn(["/bin/sh", "-c", "sleep 20 | openssl s_client -alpn h2 -servername api.test -connect \(listener)"], stdout: nil)
        defer { kill(h2, SIGKILL) }
        let held = scrape { connections("handshake", $0) == 1 && connections("h2", $0) == 1 }
        #expect(connections("handshake", held) == 1 && connections("h2", held) == 1 && connections("websocket", held) == 0,
                "\(held.filter { $0.key.hasPrefix("portcullis_connections") })")
        // The scrape's own connection on the admin listener.
        #expect((connections("http1", held, at: "127.0.0.1:\(g.adminPort)") ?? 0) >= 1)
        // An HTTP/1.1 request over TLS completes: nothing counted as a failure.
        #expect(E2E.curl(["-k", "--resolve", "api.test:\(g.port):127.0.0.1", "https://api.test:\(g.port)/x"]).status == 200)

        // Failures, one per reason: the held connection times out (handshake_timeout 1s);
        // plain HTTP on the TLS port; TLS 1.2 against min_version 1.3; a client that does not
        // trust the certificate (an unknown-CA alert); a ClientHello cut short; a TCP
        // connection closed without a byte (a health check).
        #expect(E2E.curl(["http://127.0.0.1:\(g.port)/x"]).status == 400)
        _ = TLSEndToEndTests.sClient(g.port, ["-tls1_2", "-servername", "api.test"])
        let stranger = try TestPKI()  // a CA that did not issue the gateway's certificate
        _ = TLSEndToEndTests.sClient(g.port, ["-servername", "api.test", "-verify_return_error", "-CAfile", stranger.caCertificate])
        let cut = try RawConnection(port: g.port)
        cut.send(bytes: [0x16, 0x03, 0x01, 0x00, 0x80, 0x01, 0x00])
        cut.close()
        try RawConnection(port: g.port).close()
        let expected = ["timeout", "plaintext_http", "protocol_version", "certificate_rejected", "closed", "empty"]
        let s = scrape { s in expected.allSatisfy { failures($0, s) >= 1 } }
        let counted = s.filter { $0.key.hasPrefix("portcullis_tls_handshake_failures_total") }
        for reason in expected { #expect(failures(reason, s) >= 1, "\(reason): \(counted)") }
        #expect(counted.values.reduce(0, +) == Double(expected.count), "one failure each, the good handshakes none: \(counted)")
        #expect(connections("handshake", s) == 0, "the timed-out handshake left")
        _ = idle

        // Redis: the store's commands (its start-up sync at least) have round trips counted.
        let scrapeBody = Self.scrape(g).body
        #expect(scrapeBody.contains("# TYPE portcullis_redis_command_duration_seconds histogram"))
        #expect((Self.scrape(g).series["portcullis_redis_command_duration_seconds_count"] ?? 0) >= 1)
    }

    /// Two Authorization fields on the admin listener are refused, never read as the last one.
    @Test func theAdminListenerRefusesTwoAuthorizationFields() throws {
        let upstream = try EchoUpstream()
        let g = try GatewayProcess(upstream.openRoute, adminToken: Self.adminToken)
        let url = "http://127.0.0.1:\(g.adminPort)/metrics"
        #expect(E2E.curl(["-H", "Authorization: Bearer \(Self.adminToken)", url]).status == 200)
        let twice = E2E.curl(["-H", "Authorization: Bearer wrong", "-H", "Authorization: Bearer \(Self.adminToken)", url])
        #expect(twice.status == 400, "\(twice.body)")
        #expect(E2E.curl(["-H", "Authorization: Bearer \(Self.adminToken)", "-H", "Authorization: Bearer wrong", url]).status == 400)
    }

    @Test func countersMatchTheRequestsSent() throws {
        let host = try KeyHost(kids: ["k1"])
        try host.publish(["k1"])
        let upstream = try EchoUpstream()
        let g = try GatewayProcess("""
        providers:
          - {name: app, type: hs256, secret: "\(AuthFixtures.appSecret)"}
          - {name: corp, type: oidc, issuer: "https://id.example.test", audiences: ["api"], jwks_url: "http://127.0.0.1:\(host.port)/jwks"}
        upstreams:
          app: {url: "http://127.0.0.1:\(upstream.port)"}
        routes:
          - {path: /api, upstream: app, auth: required}
          - {path: /open, upstream: app, auth: none}
        """, adminToken: Self.adminToken)

        let app = try g.mint(["--provider", "app", "--sub", "alice"])
        let expired = try g.mint(["--provider", "app", "--age", "2h"])
        let corp = try g.mint(["--provider", "corp", "--key", host.keyPath("k1"), "--kid", "k1"])
        // Wait until the corp keys are fetched (GET /metrics shows it).
        #expect(waitUntil(10) { Self.scrape(g).series[#"portcullis_keys_health{provider="corp",state="fresh"}"#] == 1 })
        let before = Self.scrape(g)
        #expect(before.status == 200)
        #expect(before.series[#"portcullis_keys_health{provider="corp",state="fresh"}"#] == 1)
        // Fetched moments ago; the inline provider's keys have no age.
        let age = before.series[#"portcullis_keys_age_seconds{provider="corp"}"#] ?? -1
        #expect(age >= 0 && age < 30, "\(age)")
        #expect(before.series[#"portcullis_keys_age_seconds{provider="app"}"#] == nil)
        #expect(before.series[#"portcullis_key_fetches_total{provider="corp",result="ok"}"#] == 1)
        #expect(before.series[#"portcullis_key_fetches_total{provider="corp",result="error"}"#] == 0)
        let openBefore = before.series[#"portcullis_requests_total{route="/open",code="200"}"#] ?? 0

        for _ in 0..<3 { #expect(E2E.curl(["-H", app, "\(g.url)/api/a"]).status == 200) }
        #expect(E2E.curl(["-H", corp, "\(g.url)/api/b"]).status == 200)
        #expect(E2E.curl(["-H", expired, "\(g.url)/api/c"]).status == 401)
        #expect(E2E.curl(["\(g.url)/api/d"]).status == 401)
        #expect(E2E.curl(["\(g.url)/elsewhere"]).status == 404)
        #expect(E2E.curl(["\(g.url)/open/e"]).status == 200)
        sleep(1)  // sign-out-everywhere covers tokens issued before the current second
        #expect(E2E.curl(["-X", "POST", "-H", "Authorization: Bearer \(Self.adminToken)", "-d", "{\"subject\":\"alice\"}",
                          "http://127.0.0.1:\(g.adminPort)/revocations"]).status == 201)
        #expect(E2E.curl(["-H", app, "\(g.url)/api/f"]).status == 401)

        let after = Self.scrape(g)
        #expect(after.status == 200)
        #expect(after.body.contains("# HELP portcullis_requests_total "))
        #expect(after.body.contains("# TYPE portcullis_upstream_response_seconds histogram"))
        let s = after.series
        #expect(s[#"portcullis_requests_total{route="/api",code="200"}"#] == 4)
        #expect(s[#"portcullis_requests_total{route="/api",code="401"}"#] == 3)
        #expect(s[#"portcullis_requests_total{route="unmatched",code="404"}"#] == 1)
        #expect(s[#"portcullis_requests_total{route="/open",code="200"}"#] == openBefore + 1)
        #expect(s[#"portcullis_auth_decisions_total{provider="app",outcome="verified"}"#] == 3)
        #expect(s[#"portcullis_auth_decisions_total{provider="corp",outcome="verified"}"#] == 1)
        #expect(s[#"portcullis_auth_decisions_total{provider="app",outcome="expired"}"#] == 1)
        #expect(s[#"portcullis_auth_decisions_total{provider="app",outcome="revoked"}"#] == 1)
        #expect(s[#"portcullis_auth_decisions_total{provider="none",outcome="no_credential"}"#] == 1)
        #expect(s[#"portcullis_revocation_checks_total{result="allowed"}"#] == 4)
        #expect(s[#"portcullis_revocation_checks_total{result="revoked"}"#] == 1)
        // alice's token: one miss then three hits; corp's: one miss; the expired one is never cached.
        #expect(s[#"portcullis_verification_cache_lookups_total{result="hit"}"#] == 3)
        #expect(s[#"portcullis_verification_cache_lookups_total{result="miss"}"#] == 3)
        #expect(s[#"portcullis_verification_cache_entries"#] == 2)
        // Routes with auth: none never look at credentials, so /open adds nothing above.
        #expect(s[#"portcullis_upstream_response_seconds_count{upstream="app"}"#] == 4 + 1 + openBefore)
        #expect(s[#"portcullis_upstream_connections{upstream="app",state="open"}"#].map { $0 >= 1 } == true)
        #expect(s[#"portcullis_upstream_connections_limit{upstream="app"}"#].map { $0 >= 1 } == true)
        #expect(s[#"portcullis_upstream_connections{upstream="app",state="max"}"#] == nil, "the limit is its own gauge")
        #expect(s[#"portcullis_upstream_waiting_requests{upstream="app"}"#] == 0)
        #expect(s[#"portcullis_store_health{state="ok"}"#] == 1)
        #expect(s[#"portcullis_key_fetches_total{provider="corp",result="ok"}"#] == 1)

        // GET /keys (answered off the loop queues) shows the fetched kid.
        let keys = E2E.curl(["-H", "Authorization: Bearer \(Self.adminToken)", "http://127.0.0.1:\(g.adminPort)/keys"])
        #expect(keys.status == 200)
        #expect(keys.body.contains("\"provider\":\"corp\"") && keys.body.contains("\"k1\"") && keys.body.contains("\"fresh\""), "\(keys.body)")

        // The scrape needs the admin token unless metrics_public is set; only GET.
        #expect(Self.scrape(g, token: nil).status == 401)
        #expect(Self.scrape(g, token: "wrong-token-0123456789abcdef").status == 401)
        #expect(E2E.curl(["-X", "POST", "-H", "Authorization: Bearer \(Self.adminToken)", "http://127.0.0.1:\(g.adminPort)/metrics"]).status == 405)
    }

    @Test func metricsPublicServesTheScrapeWithoutTheToken() throws {
        let upstream = try EchoUpstream()
        let g = try GatewayProcess("""
        upstreams:
          app: {url: "http://127.0.0.1:\(upstream.port)"}
        routes:
          - {path: /, upstream: app, auth: none}
        """, adminToken: Self.adminToken, metricsPublic: true)
        #expect(E2E.curl(["\(g.url)/x"]).status == 200)
        let scrape = Self.scrape(g, token: nil)
        #expect(scrape.status == 200)
        #expect(scrape.series[#"portcullis_requests_total{route="/",code="200"}"#] == 1)
        // Other admin endpoints still need the token.
        #expect(E2E.curl(["http://127.0.0.1:\(g.adminPort)/keys"]).status == 401)
    }
}
