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
