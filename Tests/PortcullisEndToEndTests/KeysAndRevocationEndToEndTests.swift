import Foundation
import Testing
import PortcullisTestSupport
#if canImport(Glibc)
import Glibc
#endif

/// The local key host of the PortcullisKeys tests (Tests/PortcullisKeysTests/Fixtures/key_server.py),
/// as a real process: JWKS over HTTP on 127.0.0.1, publishing what state.json says.
final class KeyHost {
    let directory: String
    let port: UInt16
    let process = Process()
    let stdin = Pipe()

    init(kids: [String]) throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("portcullis-keyhost-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let script = E2E.packageRoot.appendingPathComponent("Tests/PortcullisKeysTests/Fixtures/key_server.py").path
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", script, "--dir", directory, "--keys", kids.map { "\($0):RS256" }.joined(separator: ",")]
        process.standardInput = stdin
        process.standardOutput = FileHandle.nullDevice
        try process.run()
        let portFile = "\(directory)/port"
        let end = Date().addingTimeInterval(20)
        while !FileManager.default.fileExists(atPath: portFile) && Date() < end { usleep(50_000) }
        guard let text = try? String(contentsOfFile: portFile, encoding: .utf8), let p = UInt16(text.trimmingCharacters(in: .whitespacesAndNewlines)) else {
            throw TestFailure("key host did not start")
        }
        port = p
    }

    /// `format: "pem"` serves a `kid` → PEM certificate map (Google's x509 form) instead of a JWKS.
    func publish(_ kids: [String], format: String = "jwks") throws {
        let json = "{\"publish\": [\(kids.map { "\"\($0)\"" }.joined(separator: ","))], \"cache_control\": \"max-age=600\", \"format\": \"\(format)\"}"
        try json.write(toFile: "\(directory)/state.json", atomically: true, encoding: .utf8)
    }

    func keyPath(_ kid: String) -> String { "\(directory)/\(kid).key.pem" }

    func fetchCount() -> Int {
        let (_, body) = E2E.curl(["http://127.0.0.1:\(port)/__count"])
        return (try? JSONSerialization.jsonObject(with: Data(body.utf8)) as? [String: Int])?["total"] ?? -1
    }

    deinit {
        try? stdin.fileHandleForWriting.close()
        E2E.stop(process, signal: SIGTERM)
    }
}

/// Fetched signing keys and revocation through the real binary: a rotated
/// key is fetched once when a token names it (the request waits, it is not
/// refused); revocations through the admin API and through a logout route
/// are enforced on the next request, on this instance and on another one
/// sharing a real redis-server.
@Suite(.serialized)
struct KeysAndRevocationEndToEndTests {
    static func mint(_ gateway: GatewayProcess, key: String, kid: String, sub: String = "user") throws -> String {
        try gateway.mint(["--provider", "corp", "--key", key, "--kid", kid, "--sub", sub])
    }

    /// Key documents are typed by their content, not their URL: a certificate map
    /// served by a mirror or a local key host works, and so does a JWKS for a
    /// Firebase provider pointed elsewhere.
    @Test func aCertificateMapFromAnyURLAndAJWKSForFirebaseAreRecognisedByContent() throws {
        let host = try KeyHost(kids: ["k1"])
        let upstream = try EchoUpstream()
        for (format, kind) in [("pem", "oidc"), ("jwks", "oidc"), ("pem", "firebase"), ("jwks", "firebase")] {
            try host.publish(["k1"], format: format)
            let provider = kind == "firebase"
                ? "{name: corp, type: firebase, project_id: \"demo-project\", jwks_url: \"http://127.0.0.1:\(host.port)/mirror/keys\"}"
                : "{name: corp, type: oidc, issuer: \"https://id.example.test\", audiences: [\"api\"], jwks_url: \"http://127.0.0.1:\(host.port)/mirror/keys\"}"
            let g = try GatewayProcess("""
            providers:
              - \(provider)
            upstreams:
              app: {url: "http://127.0.0.1:\(upstream.port)"}
            routes:
              - {path: /, upstream: app, auth: required}
            """)
            let token = try Self.mint(g, key: host.keyPath("k1"), kid: "k1")
            #expect(waitUntil(5) { E2E.curl(["-H", token, "\(g.url)/a"]).status == 200 }, "\(format) for \(kind): \(g.log.suffix(600))")
        }
    }

    @Test func aRotatedKeyIsFetchedOnceWhileRequestsWait() throws {
        let host = try KeyHost(kids: ["k1", "k2"])
        try host.publish(["k1"])
        let upstream = try EchoUpstream()
        let g = try GatewayProcess("""
        providers:
          - {name: corp, type: oidc, issuer: "https://id.example.test", audiences: ["api"], jwks_url: "http://127.0.0.1:\(host.port)/jwks"}
        keys: {min_refetch_interval: 1s}
        upstreams:
          app: {url: "http://127.0.0.1:\(upstream.port)"}
        routes:
          - {path: /, upstream: app, auth: required}
        """)
        let first = try Self.mint(g, key: host.keyPath("k1"), kid: "k1")
        #expect(waitUntil(5) { E2E.curl(["-H", first, "\(g.url)/a"]).status == 200 })
        let before = host.fetchCount()

        try host.publish(["k1", "k2"])
        let rotated = try Self.mint(g, key: host.keyPath("k2"), kid: "k2")
        // Ten concurrent requests with the new kid: all wait for one fetch and pass.
        let group = DispatchGroup()
        let statuses = Locked<[Int]>([])
        let url = g.url
        for _ in 0..<10 {
            group.enter()
            DispatchQueue.global().async {
                let status = E2E.curl(["-H", rotated, "\(url)/b"]).status
                statuses.update { $0.append(status) }
                group.leave()
            }
        }
        #expect(group.wait(timeout: .now() + 30) == .success)
        #expect(statuses.get() == Array(repeating: 200, count: 10))
        #expect(host.fetchCount() - before == 1)
        // An unknown kid that the host does not publish either: refused, not hung.
        let unknown = try Self.mint(g, key: host.keyPath("k2"), kid: "k9")
        #expect(E2E.curl(["-H", unknown, "\(g.url)/c"]).status == 401)
    }

    /// RSA keys past 4,096 bits verify: the signature buffer is sized by the key (it was 512
    /// bytes, so a 6,144-bit key loaded and never verified). Keys past 8,192 bits are refused
    /// at load (RSAVerifier); making one here would take minutes.
    @Test func rsaKeysPast4096BitsVerify() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("rsa-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        let key = "\(dir)/rsa6144.pem", pub = "\(dir)/rsa6144.pub.pem"
        #expect(E2E.run("/usr/bin/openssl", ["genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:6144", "-out", key],
                        timeout: 120).0 == 0)
        #expect(E2E.run("/usr/bin/openssl", ["pkey", "-in", key, "-pubout", "-out", pub]).0 == 0)
        let upstream = try EchoUpstream()
        let g = try GatewayProcess("""
        providers:
          - {name: corp, type: oidc, issuer: "https://id.example.test", audiences: ["api"], algorithms: [RS256], public_key: "\(pub)", key_id: "big"}
        upstreams:
          app: {url: "http://127.0.0.1:\(upstream.port)"}
        routes:
          - {path: /, upstream: app, auth: required}
        """)
        let token = try g.mint(["--provider", "corp", "--key", key, "--kid", "big", "--sub", "wide"])
        #expect(E2E.curl(["-H", token, "\(g.url)/x"]).status == 200)
    }

    @Test func adminRevocationIsEnforcedOnTheNextRequest() throws {
        let upstream = try EchoUpstream()
        let g = try GatewayProcess("""
        providers:
          - {name: app, type: hs256, secret: "\(AuthFixtures.appSecret)"}
        upstreams:
          app: {url: "http://127.0.0.1:\(upstream.port)"}
        routes:
          - {path: /, upstream: app, auth: required}
        """, adminToken: "admin-token-0123456789abcdef")
        let out = try g.mint(["--provider", "app", "--sub", "alice"], format: "json")
        let minted = try #require(try JSONSerialization.jsonObject(with: Data(out.utf8)) as? [String: String])
        let header = "Authorization: \(minted["value"]!.replacingOccurrences(of: "Authorization: ", with: ""))"
        #expect(E2E.curl(["-H", header, "\(g.url)/x"]).status == 200)

        let admin = "http://127.0.0.1:\(g.adminPort)/revocations"
        let auth = "Authorization: Bearer admin-token-0123456789abcdef"
        // Bad input: 400 with a reason, nothing revoked.
        for bad in ["{}", "{\"jti\":\"\"}", "{\"jti\":1}", "{\"jti\":\"a\",\"subject\":\"b\"}", "not json", "{\"jti\":\"a\",\"extra\":1}"] {
            let r = E2E.curl(["-X", "POST", "-H", auth, "-d", bad, admin])
            #expect(r.status == 400, "\(bad): \(r.body)")
            #expect(r.body.contains("\"error\""))
        }
        #expect(E2E.curl(["-X", "POST", "-d", "{\"jti\":\"\(minted["jti"]!)\"}", admin]).status == 401)
        #expect(E2E.curl(["-H", header, "\(g.url)/x"]).status == 200)

        #expect(E2E.curl(["-X", "POST", "-H", auth, "-d", "{\"jti\":\"\(minted["jti"]!)\"}", admin]).status == 201)
        let refused = E2E.curl(["-H", header, "\(g.url)/x"])
        #expect(refused.status == 401)
        #expect(refused.body.contains("revoked"))

        // Sign out everywhere: every token of the subject issued before now.
        let bob = try g.mint(["--provider", "app", "--sub", "bob"])
        #expect(E2E.curl(["-H", bob, "\(g.url)/x"]).status == 200)
        sleep(1)
        #expect(E2E.curl(["-X", "POST", "-H", auth, "-d", "{\"subject\":\"bob\"}", admin]).status == 201)
        #expect(E2E.curl(["-H", bob, "\(g.url)/x"]).status == 401)
        let listed = E2E.curl(["-H", auth, "\(admin)?subject=bob"])
        #expect(listed.status == 200)
        #expect(listed.body.contains("\"subject\":\"bob\""))

        // Also a credential issued within the same second as the sign-out (iat has whole
        // seconds); a sign-in a second later works again.
        let carol = try g.mint(["--provider", "app", "--sub", "carol"])
        #expect(E2E.curl(["-X", "POST", "-H", auth, "-d", "{\"subject\":\"carol\"}", admin]).status == 201)
        #expect(E2E.curl(["-H", carol, "\(g.url)/x"]).status == 401)
        usleep(1_100_000)
        let carolAgain = try g.mint(["--provider", "app", "--sub", "carol"])
        #expect(E2E.curl(["-H", carolAgain, "\(g.url)/x"]).status == 200)
    }

    /// The signing-key cache shared through Redis (one server, or a cluster): the document A
    /// fetched is in `portcullis:keys:corp`, and B, started after, verifies with it without
    /// asking the key host again.
    @Test(arguments: ["redis", "cluster"])
    func aFleetFetchesEachKeySourceOnceThroughRedis(_ kind: String) throws {
        let redis = try SharedRedis(kind)
        let host = try KeyHost(kids: ["k1"])
        try host.publish(["k1"])
        let upstream = try EchoUpstream()
        let config = """
        providers:
          - {name: corp, type: oidc, issuer: "https://id.example.test", audiences: ["api"], jwks_url: "http://127.0.0.1:\(host.port)/jwks"}
        \(redis.storeYAML)
        upstreams:
          app: {url: "http://127.0.0.1:\(upstream.port)"}
        routes:
          - {path: /, upstream: app, auth: required}
        """
        let a = try GatewayProcess(config)
        let token = try Self.mint(a, key: host.keyPath("k1"), kid: "k1")
        #expect(waitUntil(5) { E2E.curl(["-H", token, "\(a.url)/a"]).status == 200 })
        #expect(waitUntil(5) { redis.cli(["GET", "portcullis:keys:corp"]).contains("\"k1\"") }, "the document is shared")
        let fetched = host.fetchCount()
        let b = try GatewayProcess(config)
        #expect(waitUntil(5) { E2E.curl(["-H", token, "\(b.url)/b"]).status == 200 })
        #expect(host.fetchCount() == fetched, "B read the document A fetched, from Redis")
    }

    /// `store.cluster` mistakes fail at start naming the key.
    @Test(arguments: [
        ("store: {cluster: {password: x}}", "store.cluster.nodes"),
        ("store: {cluster: {nodes: []}}", "needs at least one node address"),
        ("store: {cluster: {nodes: [\"redis-1\"]}}", "store.cluster.nodes"),
        ("store: {cluster: {nodes: [\"127.0.0.1:7000\"], seeds: 1}}", "store.cluster.seeds"),
        ("store: {redis: \"redis://127.0.0.1:6379/0\", cluster: {nodes: [\"127.0.0.1:7000\"]}}", "cannot be combined"),
        ("store: {cluster: {nodes: [\"127.0.0.1:7000\"]}, state_dir: /tmp/x}", "store.state_dir"),
    ])
    func clusterSettingsAreCheckedAtStart(_ yaml: String, _ expected: String) {
        let errors = E2E.configErrors("upstreams: {app: {url: \"http://127.0.0.1:1\"}}\nroutes: [{path: /, upstream: app, auth: none}]\n\(yaml)")
        #expect(errors.contains(expected), "\(errors)")
    }

    /// On one Redis or a Redis Cluster: a logout on A is enforced on B; an instance started
    /// afterwards reads every revocation (on a cluster, from every master); an undo on one is
    /// announced to all.
    @Test(arguments: ["redis", "cluster"])
    func logoutOnOneInstanceIsEnforcedOnAnotherThroughRedis(_ kind: String) throws {
        let redis = try SharedRedis(kind)
        let upstream = try EchoUpstream()
        let config = """
        providers:
          - {name: app, type: hs256, secret: "\(AuthFixtures.appSecret)"}
        \(redis.storeYAML)
        upstreams:
          app: {url: "http://127.0.0.1:\(upstream.port)"}
        routes:
          - {path: /api/v1/auth/logout, upstream: app, auth: required, revoke_on_success: true}
          - {path: /, upstream: app, auth: required}
        """
        let admin = "admin-token-0123456789abcdef"
        let a = try GatewayProcess(config, adminToken: admin)
        let b = try GatewayProcess(config, adminToken: admin)
        let credential = try a.mint(["--provider", "app"])
        #expect(waitUntil(5) { E2E.curl(["-H", credential, "\(b.url)/visits"]).status == 200 })
        #expect(E2E.curl(["-H", credential, "\(a.url)/visits"]).status == 200)

        #expect(E2E.curl(["-X", "POST", "-H", credential, "\(a.url)/api/v1/auth/logout"]).status == 200)
        let start = Date()
        var status = 200
        while status == 200 && Date().timeIntervalSince(start) < 5 {
            status = E2E.curl(["-H", credential, "\(b.url)/visits"]).status
        }
        let delay = Date().timeIntervalSince(start)
        print("revocation on instance A enforced on instance B after \(Int(delay * 1000)) ms (includes curl start-up)")
        #expect(status == 401)
        #expect(E2E.curl(["-H", credential, "\(a.url)/visits"]).status == 401)

        // 24 users signed out everywhere through A's admin API: their keys spread over every
        // master of a cluster; an instance started now enforces all of them from its first read.
        let users = (0..<24).map { "user-\($0)" }
        let credentials = try users.map { try a.mint(["--provider", "app", "--sub", $0]) }
        sleep(1)
        let auth = "Authorization: Bearer \(admin)"
        for user in users {
            let r = E2E.curl(["-X", "POST", "-H", auth, "-d", "{\"subject\":\"\(user)\"}", "http://127.0.0.1:\(a.adminPort)/revocations"])
            #expect(r.status == 201, "\(r)")
        }
        let keys = redis.keys("portcullis:revoked:*")
        #expect(keys.count >= 25, "\(keys)")
        if let cluster = redis.cluster {
            let holders = cluster.nodes.filter { $0.pid > 0 && $0.cli(["ROLE"]).hasPrefix("master") }
                .filter { !$0.cli(["--scan", "--pattern", "portcullis:revoked:*"]).isEmpty }
            #expect(holders.count == 3, "the revocations live on every master")
        }
        let c = try GatewayProcess(config, adminToken: admin)
        for (user, credential) in zip(users, credentials) {
            #expect(waitUntil(5) { E2E.curl(["-H", credential, "\(c.url)/visits"]).status == 401 }, "\(user) on C")
            #expect(E2E.curl(["-H", credential, "\(b.url)/visits"]).status == 401, "\(user) on B")
        }
        // An undo on B reaches A and C (announced), and a fresh token of that user passes.
        let undo = E2E.curl(["-X", "DELETE", "-H", auth, "-d", #"{"subject":"user-0"}"#, "http://127.0.0.1:\(b.adminPort)/revocations"])
        #expect(undo.status == 200 && undo.body.contains("\"found\":true"), "\(undo)")
        #expect(waitUntil(5) { E2E.curl(["-H", credentials[0], "\(c.url)/visits"]).status == 200 })
        #expect(E2E.curl(["-H", credentials[0], "\(a.url)/visits"]).status == 200)
        #expect(E2E.curl(["-H", credentials[1], "\(a.url)/visits"]).status == 401)
    }
}

/// A revocation acknowledged (2xx) while Sentinel fails the master over is on the new
/// master afterwards and enforced by every instance: real redis-server master and
/// replica, three sentinels, `SENTINEL FAILOVER` while revocations are posted.
@Suite(.serialized) struct SentinelFailoverRevocationTests {
    static let token = "admin-token-0123456789abcdef"

    /// A master, its replica, three sentinels watching them, and two gateways A and B on them
    /// (ready): what both tests fail over. The processes live as long as the returned value.
    struct Fleet {
        let master: RedisProcess
        let replica: RedisProcess
        let sentinels: [RedisProcess]
        let upstream: EchoUpstream
        let a: GatewayProcess
        let b: GatewayProcess
    }

    static func fleet() throws -> Fleet {
        let master = try RedisProcess()
        let replica = try RedisProcess(extra: ["--replicaof", "127.0.0.1", "\(master.port)"])
        #expect(waitUntil(10) { replica.cli(["INFO", "replication"]).contains("master_link_status:up") })
        let sentinels = try (0..<3).map { _ in try RedisProcess(sentinelFor: "mymaster", masterPort: master.port) }
        #expect(waitUntil(20) { sentinels.allSatisfy { $0.cli(["SENTINEL", "replicas", "mymaster"]).contains("\(replica.port)") } })
        let upstream = try EchoUpstream()
        let addresses = sentinels.map { "\"127.0.0.1:\($0.port)\"" }.joined(separator: ", ")
        let config = """
        providers:
          - {name: app, type: hs256, secret: "\(AuthFixtures.appSecret)"}
        store: {sentinel: {master: mymaster, addresses: [\(addresses)]}}
        upstreams:
          app: {url: "http://127.0.0.1:\(upstream.port)"}
        routes:
          - {path: /, upstream: app, auth: required}
        """
        let a = try GatewayProcess(config, adminToken: token)
        let b = try GatewayProcess(config, adminToken: token)
        for g in [a, b] { #expect(waitUntil(10) { E2E.curl(["http://127.0.0.1:\(g.adminPort)/readyz"]).status == 200 }) }
        return Fleet(master: master, replica: replica, sentinels: sentinels, upstream: upstream, a: a, b: b)
    }

    @Test func everyAcknowledgedRevocationSurvivesAFailover() throws {
        let fleet = try Self.fleet()
        let (replica, sentinels, a, b, token) = (fleet.replica, fleet.sentinels, fleet.a, fleet.b, Self.token)
        // Credentials issued before the revocations (iat in the past).
        let count = 24
        let credentials = try a.mint(["--provider", "app", "--sub", "user", "--count", "\(count)", "--age", "60s"])
            .split(separator: "\n").map(String.init)
        #expect(credentials.count == count)

        // Post revocations one after another while a failover runs underneath.
        var acknowledged: [Int] = []
        let failover = DispatchQueue(label: "failover")
        failover.asyncAfter(deadline: .now() + 0.3) {
            _ = waitUntil(20) { sentinels[0].cli(["SENTINEL", "FAILOVER", "mymaster"]) == "OK" }
        }
        for i in 1...count {
            let (status, _) = E2E.curl(["-X", "POST", "-H", "Authorization: Bearer \(token)", "-H", "Content-Type: application/json",
                                        "--data", "{\"subject\": \"user\(i)\"}", "http://127.0.0.1:\(a.adminPort)/revocations"])
            if status / 100 == 2 { acknowledged.append(i) }
            usleep(100_000)
        }
        #expect(waitUntil(30) { replica.cli(["ROLE"]).hasPrefix("master") }, "the failover happened")
        #expect(!acknowledged.isEmpty)
        print("revocations acknowledged across the failover: \(acknowledged.count) of \(count)")
        // Every acknowledged revocation is on the new master...
        #expect(waitUntil(10) { acknowledged.allSatisfy { replica.cli(["EXISTS", "portcullis:revoked:subject:user\($0)"]) == "1" } },
                "acknowledged: \(acknowledged); on the new master: \(replica.cli(["--scan", "--pattern", "portcullis:revoked:*"]))")
        // ... and enforced by both instances.
        for i in acknowledged {
            for g in [a, b] {
                #expect(waitUntil(35) { E2E.curl(["-H", credentials[i - 1], "\(g.url)/x"]).status == 401 },
                        "user\(i) still allowed on \(g.port)")
            }
        }
    }

    /// #33.5: once Sentinel announces the new master, a revocation accepted by instance A
    /// there is enforced by instance B at once: both follow `+switch-master` (the data
    /// connection and the subscription), resubscribe and catch up, instead of waiting for
    /// the old master's connection to drop and rediscovery's backoff (about 8 s before).
    @Test func aRevocationAfterAFailoverIsEnforcedEverywhereAtOnce() throws {
        let fleet = try Self.fleet()
        let (replica, sentinels, a, b, token) = (fleet.replica, fleet.sentinels, fleet.a, fleet.b, Self.token)
        let credentials = try a.mint(["--provider", "app", "--sub", "after", "--count", "3", "--age", "60s"])
            .split(separator: "\n").map(String.init)
        #expect(sentinels[0].cli(["SENTINEL", "FAILOVER", "mymaster"]) == "OK")
        #expect(waitUntil(30) { sentinels.allSatisfy { $0.cli(["SENTINEL", "get-master-addr-by-name", "mymaster"]).contains("\(replica.port)") } })
        let announced = Date()
        var delays: [Double] = []
        var acknowledged: [Double] = []
        for i in 1...3 {
            // A is asked at once (retried until it acknowledges: its first tries may still be
            // moving to the new master, and the new master's replica may still be syncing);
            // B is watched meanwhile: it enforces what A wrote as soon as it is written.
            let start = Date()
            let done = Locked<Double?>(nil)
            let adminPort = a.adminPort
            DispatchQueue.global().async {
                _ = waitUntil(10) {
                    E2E.curl(["-X", "POST", "-H", "Authorization: Bearer \(token)", "--data", "{\"subject\": \"after\(i)\"}",
                              "http://127.0.0.1:\(adminPort)/revocations"]).status == 201
                }
                done.update { $0 = Date().timeIntervalSince(announced) }
            }
            #expect(waitUntil(10) { E2E.curl(["-H", credentials[i - 1], "\(b.url)/x"]).status == 401 })
            delays.append(Date().timeIntervalSince(i == 1 ? announced : start))
            #expect(waitUntil(10) { done.get() != nil })
            acknowledged.append(done.get() ?? -1)
            #expect(replica.cli(["EXISTS", "portcullis:revoked:subject:after\(i)"]) == "1", "written on the new master")
        }
        print("after the new master was announced: revocation 1 enforced on B after \(Int(delays[0] * 1000)) ms; "
              + "the next ones \(delays.dropFirst().map { Int($0 * 1000) }) ms after being posted on A; "
              + "A acknowledged them at \(acknowledged.map { Int($0 * 1000) }) ms")
        // Far inside the 8-10 s the old behaviour took (the goal, 1 s, is measured by the
        // faults suite and quoted in the closing note; the bound leaves room for a busy CI machine).
        #expect(delays[0] < 4, "\(delays)")
    }
}
