import Foundation
import PortcullisTestSupport
import Testing

/// #36: a shard's primary killed under load on a real 6-node Redis Cluster (3 masters, 3
/// replicas): every revocation and every session change the gateway acknowledged before or
/// during the failover is enforced after it, by the instance that made it and by one started
/// afterwards (which reads only what the cluster holds); authenticated traffic running
/// through it meanwhile is answered 2xx (the read path never waits for Redis).
@Suite(.serialized) struct ClusterFailoverEndToEndTests {
    static let token = "admin-token-0123456789abcdef"

    @Test func everyAcknowledgedRevocationAndSessionSurvivesAShardsFailover() throws {
        let cluster = try RedisCluster()
        let upstream = try EchoUpstream()
        let key = NSTemporaryDirectory() + "session-es256-\(UUID().uuidString).pem"
        E2E.run("/usr/bin/openssl", ["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", key])
        let seeds = cluster.nodes.map { "\"127.0.0.1:\($0.port)\"" }.joined(separator: ", ")
        let config = """
        \(AuthFixtures.providers)
        sessions:
          issuer: "https://api.example.test"
          accept: [google]
          access_token: {signing_keys: ["\(key)"]}
          refresh_token: {secret: "\(SessionsEndToEndTests.secret)", reuse_grace: 2s}
          require_tls: false
        store: {cluster: {nodes: [\(seeds)]}}
        upstreams:
          app: {url: "http://127.0.0.1:\(upstream.port)"}
        routes:
          - {path: /, upstream: app, auth: required}
        """
        let a = try GatewayProcess(config, adminToken: Self.token)
        #expect(waitUntil(10) { E2E.curl(["http://127.0.0.1:\(a.adminPort)/readyz"]).status == 200 })
        let count = 24
        let credentials = try a.mint(["--provider", "app", "--sub", "user", "--count", "\(count)", "--age", "60s"])
            .split(separator: "\n").map(String.init)
        #expect(credentials.count == count)

        // Sessions before the kill: two logged out at once (acknowledged), five kept (the first
        // carries the load; four of the others are logged out during the failover).
        var live: [SessionsEndToEndTests.Pair] = []
        var ended: [SessionsEndToEndTests.Pair] = []
        for i in 0..<7 {
            let pair = try #require(SessionsEndToEndTests.pair(try SessionsEndToEndTests.exchange(a, sub: "before-\(i)").1))
            if i < 2 {
                #expect(E2E.curl(["-X", "POST", "-H", "Authorization: Bearer \(pair.access)", "\(a.url)/auth/logout"]).status == 204)
                ended.append(pair)
            } else {
                live.append(pair)
            }
        }

        // The victim: the master serving the first user's revocation key.
        let probeKey = "portcullis:revoked:subject:user1"
        let victim = try #require(cluster.master(ofKey: probeKey))
        let victimPort = victim.port
        let others = cluster.nodes.filter { $0.port != victimPort }

        // Authenticated load through A for the whole failover (bounded: 8 s).
        let dir = NSTemporaryDirectory() + "portcullis-cluster-failover-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        let load = try RedisProcess.spawn(["/usr/bin/wrk", "-t1", "-c4", "-d8s", "--timeout", "5s",
                                           "-H", "Authorization: Bearer \(live[0].access)", "\(a.url)/load"],
                                          stdout: "\(dir)/wrk.out")
        defer { kill(load, SIGKILL); var s: Int32 = 0; waitpid(load, &s, 0) }
        usleep(300_000)
        victim.stop()

        // Revocations, sign-ins and logouts posted while the shard fails over: some are refused
        // (503, not acknowledged: their outcome is unknown, so they are not checked); every
        // acknowledged one must hold.
        var acknowledged: [Int] = []
        var madeDuring: [SessionsEndToEndTests.Pair] = []
        var endedDuring: [SessionsEndToEndTests.Pair] = []
        var unsure = 0
        for i in 1...count {
            let (status, _) = E2E.curl(["-X", "POST", "-H", "Authorization: Bearer \(Self.token)", "--data", "{\"subject\": \"user\(i)\"}",
                                        "http://127.0.0.1:\(a.adminPort)/revocations"])
            if status == 201 { acknowledged.append(i) }
            if i % 6 == 0 {
                if let pair = SessionsEndToEndTests.pair(try SessionsEndToEndTests.exchange(a, sub: "during-\(i)").1) { madeDuring.append(pair) }
                // One of the sessions kept from before is logged out.
                let pair = live.removeLast()
                if E2E.curl(["-X", "POST", "-H", "Authorization: Bearer \(pair.access)", "\(a.url)/auth/logout"]).status == 204 {
                    endedDuring.append(pair)
                } else {
                    unsure += 1
                }
            }
            usleep(100_000)
        }
        #expect(waitUntil(30) { others.allSatisfy { $0.cli(["CLUSTER", "INFO"]).contains("cluster_state:ok") } }, "the cluster recovered")
        #expect(waitUntil(30) { cluster.master(ofKey: probeKey).map { $0.port != victimPort } ?? false }, "a replica took the slot")
        print("cluster failover: \(acknowledged.count) of \(count) revocations acknowledged; "
              + "\(madeDuring.count) sign-ins and \(endedDuring.count) of \(endedDuring.count + unsure) logouts acknowledged during it")
        #expect(!acknowledged.isEmpty)

        // The load ran through it, every answer 2xx.
        _ = waitUntil(20) { var s: Int32 = 0; return waitpid(load, &s, WNOHANG) == load }
        let output = (try? String(contentsOfFile: "\(dir)/wrk.out", encoding: .utf8)) ?? ""
        #expect(output.contains("requests in") && !output.contains("Non-2xx") && !output.contains("Socket errors"), "\(output)")

        // An instance started after the failover reads everything from the cluster.
        let c = try GatewayProcess(config, adminToken: Self.token)
        for i in acknowledged {
            for g in [a, c] {
                #expect(waitUntil(10) { E2E.curl(["-H", credentials[i - 1], "\(g.url)/x"]).status == 401 },
                        "user\(i) still allowed on \(g.port)")
            }
        }
        for pair in ended + endedDuring {
            #expect(SessionsEndToEndTests.refresh(c, pair.refresh).status == 400, "a logged-out session stays ended")
            #expect(E2E.curl(["-H", "Authorization: Bearer \(pair.access)", "\(c.url)/x"]).status == 401)
        }
        for pair in live + madeDuring {
            let refreshed = SessionsEndToEndTests.refresh(c, pair.refresh)
            #expect(SessionsEndToEndTests.pair(refreshed.body) != nil, "an acknowledged session refreshes after the failover: \(refreshed)")
        }
    }
}

extension ClusterFailoverEndToEndTests {
    /// Each user's 4 requests, every user's at once on one multiplexed h2c connection (so an
    /// event loop reads many users' requests in one pass and charges them together, one script
    /// call per master): the statuses by user, in `users`' order.
    static func burst(_ gateway: GatewayProcess, _ users: [(sub: String, header: String)], each: Int = 4) -> [[String]] {
        var arguments = ["-s", "--http2-prior-knowledge", "--parallel", "--parallel-immediate", "--parallel-max", "100", "--max-time", "20"]
        for (index, user) in users.enumerated() {
            for request in 0..<each {
                if index + request > 0 { arguments.append("--next") }
                arguments += ["-H", user.header, "-o", "/dev/null", "-w", "%{http_code} %{url}\n", "\(gateway.url)/api/\(user.sub)/\(request)"]
            }
        }
        let (_, out, _) = E2E.run("/usr/bin/curl", arguments)
        var byUser: [String: [String]] = [:]
        for line in out.split(separator: "\n") {
            let parts = line.split(separator: " ")
            guard parts.count == 2, let path = parts[1].split(separator: "/api/").last?.split(separator: "/").first else { continue }
            byUser[String(path), default: []].append(String(parts[0]))
        }
        return users.map { (byUser[$0.sub] ?? []).sorted() }
    }

    /// #36: a shard's primary killed on a real 6-node cluster; once the cluster recovered,
    /// every user's limit holds exactly again on every master, the promoted replica's too
    /// (the gateway's calls, grouped by master, follow the new slot map), and users counted
    /// on the surviving masters before the kill are still refused.
    @Test func everyUsersLimitHoldsOnEveryMasterAfterAShardsFailover() throws {
        let cluster = try RedisCluster()
        let upstream = try EchoUpstream()
        let seeds = cluster.nodes.map { "\"127.0.0.1:\($0.port)\"" }.joined(separator: ", ")
        let config = """
        providers:
          - {name: app, type: hs256, secret: "\(AuthFixtures.appSecret)"}
        upstreams:
          app: {url: "http://127.0.0.1:\(upstream.port)"}
        routes:
          - {path: /api, upstream: app, auth: required}
        store: {cluster: {nodes: [\(seeds)]}}
        rate_limits:
          - {name: per-user, key: user, rate: 3/m, burst: 3}
        """
        let gateway = try GatewayProcess(config, adminToken: Self.token, listen: "  - {address: \"127.0.0.1:PORT\", h2c: true}")
        func users(_ prefix: String, _ count: Int) throws -> [(sub: String, header: String)] {
            let headers = try gateway.mint(["--provider", "app", "--sub", prefix, "--count", "\(count)"]).split(separator: "\n").map(String.init)
            return headers.enumerated().map { ("\(prefix)\($0.offset + 1)", $0.element) }
        }
        func master(_ sub: String) -> UInt16? { cluster.master(ofKey: "portcullis:ratelimit:per-user:u:\(sub)")?.port }
        let exact = ["200", "200", "200", "429"]

        let before = try users("before", 12)
        let masters = before.map { master($0.sub) }
        #expect(Set(masters.compactMap { $0 }).count == 3, "the users' keys span every master")
        let first = Self.burst(gateway, before)
        #expect(first.allSatisfy { $0 == exact }, "\(first)")

        let victim = try #require(cluster.nodes.first { $0.port == masters[0] })
        let victimPort = victim.port
        let others = cluster.nodes.filter { $0.port != victimPort }
        victim.stop()
        #expect(waitUntil(30) { others.allSatisfy { $0.cli(["CLUSTER", "INFO"]).contains("cluster_state:ok") } }, "the cluster recovered")
        #expect(waitUntil(30) { master(before[0].sub).map { $0 != victimPort } ?? false }, "a replica took the slot")

        // The gateway decides on every master again: a probe user per master is refused
        // once its budget is spent (a request Redis could not decide is let through, uncounted).
        let probes = try users("probe", 30)
        let live = Set(cluster.nodes.filter { $0.port != victimPort && $0.cli(["ROLE"]).hasPrefix("master") }.map(\.port))
        #expect(live.count == 3)
        for port in live {
            let probe = try #require(probes.first { master($0.sub) == port })
            #expect(waitUntil(20) { E2E.curl(["-H", probe.header, "\(gateway.url)/api/probe"]).status == 429 }, "master \(port) decides again")
        }

        let after = try users("after", 12)
        #expect(Set(after.compactMap { master($0.sub) }).count == 3)
        let second = Self.burst(gateway, after)
        #expect(second.allSatisfy { $0 == exact }, "\(second)")
        // Users counted on the masters that stayed are still refused.
        for (user, port) in zip(before, masters) where port != victimPort {
            #expect(E2E.curl(["-H", user.header, "\(gateway.url)/api/again"]).status == 429, "\(user.sub)")
        }
    }
}
