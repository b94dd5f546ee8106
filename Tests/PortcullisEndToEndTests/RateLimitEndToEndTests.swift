import Foundation
import Testing
import PortcullisTestSupport

/// `rate_limits:` through the real binary (#36 part 3, one instance, embedded store): a
/// per-user limit held across HTTP/1.1 and a multiplexed HTTP/2 connection, the 429's
/// headers and body, nothing limited reaching the app, the counts on `/metrics`, the
/// budget kept across a reload, and bad rules refused at start.
@Suite(.serialized)
struct RateLimitEndToEndTests {
    static let adminToken = "rate-limit-admin-token-0123456789"

    /// Status codes (and, with `-w` extras, more) of `curl` fetching `count` URLs in one run:
    /// one connection, reused on HTTP/1.1 and multiplexed on HTTP/2 (`--parallel`).
    static func statuses(_ url: String, count: Int, _ extra: [String]) -> [String] {
        let urls = (0..<count).flatMap { _ in [url, "-o", "/dev/null"] }
        let (_, out, _) = E2E.run("/usr/bin/curl", ["-s", "-w", "%{http_code} %{num_connects}\n", "--max-time", "20"] + extra + urls)
        return out.split(separator: "\n").map(String.init)
    }

    /// The `:status` of each of `streams` requests `nghttp` sends at once on one h2c connection.
    static func http2Statuses(_ url: String, streams: Int, header: String) -> [String] {
        let (_, out, _) = E2E.run("/usr/bin/nghttp", ["-n", "-v", "-m", "\(streams)", "-H", header.lowercased().hasPrefix("authorization")
                                                      ? "authorization:" + header.dropFirst("authorization:".count) : header, url])
        return out.split(separator: "\n").compactMap { line in
            guard line.contains("recv (stream_id="), let range = line.range(of: ":status: ") else { return nil }
            return String(line[range.upperBound...]).trimmingCharacters(in: .whitespaces)
        }
    }

    @Test func aPerUserLimitHoldsAcrossHTTP1AndHTTP2AndLimitedRequestsNeverReachTheApp() throws {
        let upstream = try EchoUpstream()
        let g = try GatewayProcess("""
        providers:
          - {name: app, type: hs256, secret: "\(AuthFixtures.appSecret)"}
        upstreams:
          app: {url: "http://127.0.0.1:\(upstream.port)"}
        routes:
          - {path: /api, upstream: app, auth: required, error_body: detail}
          - {path: /open, upstream: app, auth: none}
        rate_limits:
          rules:
            - {name: per-user, routes: [/api], key: user, rate: 5/m, burst: 5}
        """, adminToken: Self.adminToken, listen: "  - {address: \"127.0.0.1:PORT\", h2c: true}")
        let alice = try g.mint(["--provider", "app", "--sub", "alice"])
        let bob = try g.mint(["--provider", "app", "--sub", "bob"])
        _ = try upstream.seen()

        // HTTP/1.1, one keep-alive connection: 3 pass; then HTTP/2, 10 streams at once on one
        // connection: only the 2 left pass.
        let h1 = Self.statuses("\(g.url)/api/a", count: 3, ["-H", alice])
        #expect(h1.map { $0.prefix(3) } == ["200", "200", "200"], "\(h1)")
        let h2 = Self.http2Statuses("\(g.url)/api/b", streams: 10, header: alice)
        #expect(h2.filter { $0 == "200" }.count == 2 && h2.filter { $0 == "429" }.count == 8, "\(h2)")
        // Limited requests never reached the app.
        let seen = try upstream.seen()
        #expect(seen.count == 5, "\(seen)")
        // Another user has their own budget; an unlimited route is not counted.
        #expect(E2E.curl(["-H", bob, "\(g.url)/api/c"]).status == 200)
        for _ in 0..<3 { #expect(E2E.curl(["\(g.url)/open/x"]).status == 200) }

        // The refusal: 429, Retry-After, the draft's headers, the route's error shape, and the
        // connection kept (a second request on it does not reconnect).
        let (_, head, _) = E2E.run("/usr/bin/curl", ["-s", "-i", "--max-time", "10", "-H", alice, "\(g.url)/api/d"])
        #expect(head.hasPrefix("HTTP/1.1 429 Too Many Requests"), "\(head)")
        let lower = head.lowercased()
        #expect(lower.contains("retry-after: 12") || lower.contains("retry-after: 11"), "\(head)")  // one interval: 60 s / 5
        #expect(lower.contains("ratelimit-policy: \"per-user\";q=5;w=60"), "\(head)")
        #expect(lower.contains("ratelimit: \"per-user\";r=0;t="), "\(head)")
        #expect(!lower.contains("connection: close"), "\(head)")
        #expect(head.contains("{\"detail\": \"Too many requests; retry in"), "\(head)")
        let again = Self.statuses("\(g.url)/api/e", count: 2, ["-H", alice])
        #expect(again == ["429 1", "429 0"], "\(again)")

        // /metrics counts each decision of the rule.
        let (_, metrics) = E2E.curl(["-H", "Authorization: Bearer \(Self.adminToken)", "http://127.0.0.1:\(g.adminPort)/metrics"])
        #expect(metrics.contains("portcullis_rate_limit_decisions_total{rule=\"per-user\",result=\"allowed\"} 6"), "\(metrics)")
        #expect(metrics.contains("portcullis_rate_limit_decisions_total{rule=\"per-user\",result=\"limited\"} 11"), "\(metrics)")
        // The access log names why.
        #expect(g.log.contains("\"auth_reason\":\"rate_limited\""), "\(g.log.suffix(600))")
    }

    @Test func anonymousClientsAreLimitedByAddressAndAReloadKeepsTheirBudget() throws {
        let upstream = try EchoUpstream()
        let body = """
        upstreams:
          app: {url: "http://127.0.0.1:\(upstream.port)"}
        routes:
          - {path: /signin, upstream: app, auth: none}
          - {path: /other, upstream: app, auth: none}
        rate_limits:
          - {name: signin, routes: [/signin], key: client_address, rate: 2/h}
        """
        let g = try GatewayProcess(body, adminToken: Self.adminToken)
        #expect(E2E.curl(["\(g.url)/signin"]).status == 200)
        #expect(E2E.curl(["\(g.url)/signin"]).status == 200)
        #expect(E2E.curl(["\(g.url)/signin"]).status == 429)
        // A reload (another route added) keeps the rule's budget: still limited.
        let changed = try String(contentsOfFile: g.configPath, encoding: .utf8)
            .replacingOccurrences(of: "  - {path: /other, upstream: app, auth: none}",
                                  with: "  - {path: /other, upstream: app, auth: none}\n  - {path: /third, upstream: app, auth: none}")
        try changed.write(toFile: g.configPath, atomically: true, encoding: .utf8)
        let reload = E2E.curl(["-X", "POST", "-H", "authorization: Bearer \(Self.adminToken)", "http://127.0.0.1:\(g.adminPort)/reload"])
        #expect(reload.status == 200, "\(reload)")
        #expect(E2E.curl(["\(g.url)/third"]).status == 200)
        #expect(E2E.curl(["\(g.url)/signin"]).status == 429)
        #expect(E2E.curl(["\(g.url)/other"]).status == 200)
    }

    /// Two instances on `redis` with `rule` as their one rate limit (h2c on), before an echo
    /// upstream, behind an HS256 provider `app` on the route `/api`.
    static func fleet(on redis: SharedRedis, rule: String) throws -> (GatewayProcess, GatewayProcess, EchoUpstream) {
        let upstream = try EchoUpstream()
        let body = """
        providers:
          - {name: app, type: hs256, secret: "\(AuthFixtures.appSecret)"}
        upstreams:
          app: {url: "http://127.0.0.1:\(upstream.port)"}
        routes:
          - {path: /api, upstream: app, auth: required}
        \(redis.storeYAML)
        rate_limits:
          - \(rule)
        """
        let listen = "  - {address: \"127.0.0.1:PORT\", h2c: true}"
        return (try GatewayProcess(body, adminToken: Self.adminToken, listen: listen),
                try GatewayProcess(body, adminToken: Self.adminToken, listen: listen), upstream)
    }

    /// Two instances sharing one Redis (or one Redis Cluster) hold one limit together,
    /// whichever instance and protocol the requests come on (#36: "the fleet-wide limit held
    /// within one burst").
    @Test(arguments: ["redis", "cluster"])
    func twoInstancesOnOneRedisHoldOneLimitOnBothProtocols(_ kind: String) throws {
        let redis = try SharedRedis(kind)
        let (one, two, upstream) = try Self.fleet(on: redis, rule: "{name: per-user, key: user, rate: 5/m, burst: 5}")
        let alice = try one.mint(["--provider", "app", "--sub", "alice"])
        _ = try upstream.seen()
        let h1 = Self.statuses("\(one.url)/api/a", count: 3, ["-H", alice])
        #expect(h1.map { $0.prefix(3) } == ["200", "200", "200"], "\(h1)")
        let h2 = Self.http2Statuses("\(two.url)/api/b", streams: 10, header: alice)
        #expect(h2.filter { $0 == "200" }.count == 2 && h2.filter { $0 == "429" }.count == 8, "\(h2)")
        #expect(E2E.curl(["-H", alice, "\(one.url)/api/c"]).status == 429)
        #expect(E2E.curl(["-H", alice, "\(two.url)/api/c"]).status == 429)
        #expect(try upstream.seen().count == 5)
        let bob = try two.mint(["--provider", "app", "--sub", "bob"])
        #expect(E2E.curl(["-H", bob, "\(one.url)/api/d"]).status == 200)
        // Redis holds the budget, with an expiry: nothing is left once it is whole again.
        let ttl = Int(redis.cli(["PTTL", "portcullis:ratelimit:per-user:u:alice"]).trimmingCharacters(in: .whitespacesAndNewlines)) ?? -9
        #expect(ttl > 0 && ttl <= 60_000, "\(ttl)")
    }

    /// A rule with a burst wide enough for leases (64: up to 4 requests charged at once, see
    /// `KeyPicture`), through two real instances and both protocols: the fleet still admits
    /// within one burst (64 - 4 ... 64 + 2 × 8), every admitted request reached the app, and
    /// Redis was charged at least every request admitted — with fewer script calls than
    /// requests on one server (the leases' units went without any).
    @Test(arguments: ["redis", "cluster"])
    func leasesKeepTheFleetWithinOneBurstAndRedisCountsEveryRequest(_ kind: String) throws {
        let redis = try SharedRedis(kind)
        let (one, two, upstream) = try Self.fleet(on: redis, rule: "{name: per-user, key: user, rate: 64/h, burst: 64}")
        let alice = try one.mint(["--provider", "app", "--sub", "alice"])
        _ = try upstream.seen()
        var statuses = Self.statuses("\(one.url)/api/a", count: 30, ["-H", alice]).map { String($0.prefix(3)) }
        statuses += Self.http2Statuses("\(two.url)/api/b", streams: 30, header: alice)
        statuses += Self.statuses("\(two.url)/api/c", count: 20, ["-H", alice]).map { String($0.prefix(3)) }
        statuses += Self.statuses("\(one.url)/api/d", count: 20, ["-H", alice]).map { String($0.prefix(3)) }
        let admitted = statuses.filter { $0 == "200" }.count
        #expect(statuses.count == 100 && admitted + statuses.filter { $0 == "429" }.count == 100, "\(statuses)")
        #expect(admitted >= 60 && admitted <= 80, "\(admitted) admitted: \(statuses)")
        #expect(try upstream.seen().count == admitted)
        // Redis's TAT for alice, in intervals (56.25 s each) from now: the units it was charged.
        let key = "portcullis:ratelimit:per-user:u:alice"
        let tat = Int64(redis.cli(["GET", key]).trimmingCharacters(in: .whitespacesAndNewlines)) ?? 0
        let time = redis.cli(["TIME"]).split(whereSeparator: \.isNewline).compactMap { Int64($0) }
        let interval: Int64 = 3_600_000_000 / 64
        let charged = time.count == 2 ? (tat - (time[0] * 1_000_000 + time[1]) + interval - 1) / interval : -1
        #expect(charged >= Int64(min(admitted, 64)) && charged <= 64 + 2 * 4, "\(charged) units for \(admitted) admitted")
        if let server = redis.server {
            let calls = server.calls(of: "evalsha")
            print("leases, one redis-server: \(admitted) admitted, \(charged) units charged, \(calls) script calls")
            #expect(calls > 0 && calls < admitted / 2, "\(calls) script calls for \(admitted) admitted")
        }
    }

    /// With Redis down, `on_unavailable` decides: `allow` forwards (uncounted), `deny`
    /// answers 503 with Retry-After; the change is logged once, and counted.
    @Test func withRedisDownOnUnavailableDecides() throws {
        let redis = try RedisProcess()
        let upstream = try EchoUpstream()
        func config(_ policy: String) -> String {
            """
            upstreams:
              app: {url: "http://127.0.0.1:\(upstream.port)"}
            routes:
              - {path: /signin, upstream: app, auth: none}
            store: {redis: "redis://127.0.0.1:\(redis.port)/0"}
            rate_limits:
              on_unavailable: \(policy)
              rules:
                - {name: signin, key: client_address, rate: 100/m}
            """
        }
        let allow = try GatewayProcess(config("allow"), adminToken: Self.adminToken)
        let deny = try GatewayProcess(config("deny"), adminToken: Self.adminToken)
        #expect(E2E.curl(["\(allow.url)/signin"]).status == 200)
        #expect(E2E.curl(["\(deny.url)/signin"]).status == 200)
        redis.stop()
        for _ in 0..<3 {
            #expect(E2E.curl(["\(allow.url)/signin"]).status == 200)
            let refused = E2E.curl(["\(deny.url)/signin"])
            #expect(refused.status == 503 && refused.body.contains("rate-limit store is unavailable"), "\(refused)")
        }
        #expect(allow.log.components(separatedBy: "rate-limit store unavailable").count == 2, "\(allow.log.suffix(2000))")
        let (_, metrics) = E2E.curl(["-H", "Authorization: Bearer \(Self.adminToken)", "http://127.0.0.1:\(deny.adminPort)/metrics"])
        #expect(metrics.contains("portcullis_rate_limit_decisions_total{rule=\"signin\",result=\"unavailable\"} 3"), "\(metrics)")
    }

    @Test func badRulesAreRefusedAtStartNamingTheKey() {
        let head = """
        listen: [{address: "127.0.0.1:1"}]
        upstreams:
          app: {url: "http://127.0.0.1:2"}
        routes:
          - {path: /api, upstream: app, auth: none}
        """
        let cases: [(String, String)] = [
            ("rate_limits: [{name: a, routes: [/nope], key: user, rate: 1/s}]", "rate_limits[0].routes: '/nope' is no route's path"),
            ("rate_limits: [{name: a, key: user, rate: 1/fortnight}]", "rate_limits[0].rate: expected <count>/<unit>"),
            ("rate_limits: [{name: a, key: email, rate: 1/s}]", "rate_limits[0].key: expected user, client_address or claim:<name>"),
            ("rate_limits: [{name: a, key: user, rate: 1/s}, {name: a, key: user, rate: 2/s}]", "rate_limits[1].name: 'a' names another rule too"),
            ("rate_limits: [{name: \"a b\", key: user, rate: 1/s}]", "rate_limits[0].name: expected 1-64 letters"),
            ("rate_limits: [{name: a, key: user, rate: 1/s, burst: 0}]", "rate_limits[0].burst"),
            ("rate_limits: {on_unavailable: maybe, rules: []}", "rate_limits.on_unavailable: expected allow or deny"),
            ("rate_limits: [{name: a, key: user, rate: 1/s, per: ip}]", "rate_limits[0].per: unknown key"),
        ]
        for (yaml, expected) in cases {
            let errors = E2E.configErrors(head + "\n" + yaml)
            #expect(errors.contains(expected), "\(yaml) → \(errors)")
        }
    }
}
