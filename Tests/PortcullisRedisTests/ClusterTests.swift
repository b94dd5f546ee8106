import Dispatch
import PortcullisIO
import PortcullisTestSupport
import Testing
@testable import PortcullisRedis

/// Redis Cluster's pieces (#36 step 1): slots, redirects and the topology, checked against
/// the specification's examples and against a real local cluster (3 masters, 3 replicas).
@Suite struct HashSlotTests {
    @Test func crc16AndSlotsMatchTheSpecification() {
        #expect(HashSlot.crc16(Array("123456789".utf8)[...]) == 0x31C3)
        #expect(HashSlot.of("foo") == 12182)
        #expect(HashSlot.of("bar") == 5061)
        #expect(HashSlot.of("") == 0)
    }

    @Test func hashTagsFollowTheSpecification() {
        #expect(HashSlot.of("{user1000}.following") == HashSlot.of("{user1000}.followers"))
        #expect(HashSlot.of("{user1000}.following") == HashSlot.of("user1000"))
        // Only the first tag counts; an empty one means the whole key; nesting takes up to the first '}'.
        #expect(HashSlot.of("foo{bar}{zap}") == HashSlot.of("bar"))
        #expect(HashSlot.of("foo{}{bar}") == Int(HashSlot.crc16(Array("foo{}{bar}".utf8)[...]) % 16384))
        #expect(HashSlot.of("foo{{bar}}zap") == HashSlot.of("{bar"))
        #expect(HashSlot.of("foo{bar") == Int(HashSlot.crc16(Array("foo{bar".utf8)[...]) % 16384))
    }

    @Test func commandsAreRoutedByTheirFirstKeyAndKeylessOnesFollowTheKeyedOneBefore() {
        #expect(RedisCommandKey.key(of: ["GET", "a"]) == "a")
        #expect(RedisCommandKey.key(of: ["set", "b", "1", "EX", "9"]) == "b")
        #expect(RedisCommandKey.key(of: ["EVAL", "return 1", "1", "k", "arg"]) == "k")
        #expect(RedisCommandKey.key(of: ["EVALSHA", "abc", "0", "arg"]) == nil)
        #expect(RedisCommandKey.key(of: ["EVAL", "return 1", "x"]) == nil, "numkeys that is not a number")
        #expect(RedisCommandKey.key(of: ["XINFO", "STREAM", "log:{3}"]) == "log:{3}")
        #expect(RedisCommandKey.key(of: ["XRANGE", "log:{3}", "(0-0", "+"]) == "log:{3}")
        for keyless in [["WAIT", "1", "1000"], ["ROLE"], ["PUBLISH", "channel", "m"], ["PING"], ["SCAN", "0"], []] {
            #expect(RedisCommandKey.key(of: keyless) == nil, "\(keyless)")
        }
        let routed = RedisCommandKey.routed([["PING"], ["SET", "s", "1"], ["WAIT", "1", "10"], ["ROLE"], ["SADD", "u", "x"],
                                             ["PUBLISH", "c", "m"]])
        #expect(routed.map(\.key) == ["s", "s", "s", "s", "u", "u"])
        #expect(RedisCommandKey.routed([["PING"], ["ROLE"]]).map(\.key) == ["", ""])
    }

    @Test func redirectsParseAndOthersDoNot() {
        #expect(ClusterRedirect(error: "MOVED 3999 127.0.0.1:6381") == ClusterRedirect(kind: .moved, slot: 3999, host: "127.0.0.1", port: 6381))
        #expect(ClusterRedirect(error: "ASK 12182 [::1]:7002") == ClusterRedirect(kind: .ask, slot: 12182, host: "::1", port: 7002))
        #expect(ClusterRedirect(error: "MOVED 1 ::1:7002") == ClusterRedirect(kind: .moved, slot: 1, host: "::1", port: 7002))
        #expect(ClusterRedirect(error: "MOVED 7 :7002") == ClusterRedirect(kind: .moved, slot: 7, host: nil, port: 7002))
        #expect(ClusterRedirect(error: "MOVED 7 ?:7002")?.host == nil)
        for other in ["ERR unknown command", "MOVED 16384 127.0.0.1:1", "MOVED x 127.0.0.1:1", "ASK 1 127.0.0.1",
                      "MOVED 1 127.0.0.1:0", "TRYAGAIN Multiple keys request during rehashing of slot", "CLUSTERDOWN The cluster is down"] {
            #expect(ClusterRedirect(error: other) == nil, "\(other)")
        }
    }

    @Test func aTopologyMapsEverySlotToItsMaster() throws {
        func node(_ port: Int64, _ id: String) -> RedisReply { .array([.bulk(Array("127.0.0.1".utf8)), .integer(port), .bulk(Array(id.utf8))]) }
        let reply = RedisReply.array([
            .array([.integer(0), .integer(5460), node(7000, "a"), node(7003, "d")]),
            .array([.integer(5461), .integer(10922), node(7001, "b"), node(7004, "e")]),
            .array([.integer(10923), .integer(16383), node(7002, "c"), node(7005, "f")]),
        ])
        let topology = try #require(ClusterTopology(clusterSlots: reply))
        #expect(topology.coversEverySlot)
        #expect(topology.masters.map(\.port) == [7000, 7001, 7002])
        #expect(topology.master(forSlot: 0)?.port == 7000 && topology.master(forSlot: 5461)?.port == 7001
                && topology.master(forSlot: 16383)?.port == 7002)
        #expect(topology.shards[1].replicas.map(\.port) == [7004])
        let partial = try #require(ClusterTopology(clusterSlots: .array([.array([.integer(0), .integer(10), node(7000, "a")])])))
        #expect(!partial.coversEverySlot && partial.master(forSlot: 11) == nil)
        #expect(ClusterTopology(clusterSlots: .array([.array([.integer(10), .integer(5), node(7000, "a")])])) == nil)
        #expect(ClusterTopology(clusterSlots: .integer(1)) == nil)
    }
}

@Suite(.serialized) struct RedisClusterTests {
    static func reply(_ client: RedisClient, _ command: [String]) throws -> Result<RedisReply, RedisError> {
        let answer = Locked<Result<RedisReply, RedisError>?>(nil)
        let done = DispatchSemaphore(value: 0)
        client.send(command) { result in
            answer.update { $0 = result }
            done.signal()
        }
        guard done.wait(timeout: .now() + 10) == .success, let result = answer.get() else { throw RedisTestFailure("no reply") }
        return result
    }

    /// Against a real cluster: our slots are the server's (`CLUSTER KEYSLOT`), the topology
    /// read from `CLUSTER SLOTS` covers every slot with 3 masters and a replica each, and a
    /// node asked for a key it does not serve answers a MOVED that names the topology's master.
    @Test func slotsTopologyAndRedirectsAgreeWithARealCluster() throws {
        let cluster = try RedisCluster()
        for key in ["foo", "bar", "{user:42}", "portcullis:ratelimit:per-user:u:alice", "session:{u7}:abc", "ü{é}x", "a{}b"] {
            #expect(cluster.keySlot(key) == HashSlot.of(key), "\(key)")
        }
        for i in 0..<200 {
            let key = "key-\(i)-\(i * 7919)"
            #expect(cluster.keySlot(key) == HashSlot.of(key), "\(key)")
        }
        let first = cluster.nodes[0]
        let client = RedisClient(configuration: RedisConfiguration(topology: .standalone(try SocketAddress(parsing: "127.0.0.1:\(first.port)"))),
                                 loop: EventLoop(index: 0))
        client.start()
        defer { client.shutdown() }
        let topology = try #require(ClusterTopology(clusterSlots: try Self.reply(client, ["CLUSTER", "SLOTS"]).get()))
        #expect(topology.coversEverySlot)
        #expect(topology.masters.count == 3 && topology.shards.allSatisfy { $0.replicas.count == 1 }, "\(topology.shards)")
        #expect(Set(topology.masters.map(\.port)) == Set(cluster.masterPorts))
        // A key this node does not serve: MOVED, to the master the topology names.
        let foreign = try #require((0..<500).map { "k\($0)" }.first { topology.master(forSlot: HashSlot.of($0))?.port != first.port })
        guard case .failure(.server(let text)) = try Self.reply(client, ["GET", foreign]) else {
            Issue.record("expected MOVED for \(foreign)")
            return
        }
        let redirect = try #require(ClusterRedirect(error: text), "\(text)")
        #expect(redirect.kind == .moved && redirect.slot == HashSlot.of(foreign))
        #expect(redirect.port == topology.master(forSlot: redirect.slot)?.port)
    }
}

/// `RedisClusterClient` against a real 6-node cluster: routing by slot, `ASK` during a slot
/// migration and `MOVED` after it, and a master's failover.
@Suite(.serialized) struct RedisClusterClientTests {
    static func client(_ cluster: RedisCluster, loop: EventLoop = EventLoop(index: 0)) throws -> RedisClusterClient {
        let base = RedisConfiguration(topology: .standalone(try SocketAddress(parsing: "127.0.0.1:1")),
                                      commandTimeout: 2, connectTimeout: 1,
                                      backoff: ReconnectBackoff(initial: 0.02, maximum: 0.2))
        let client = RedisClusterClient(seeds: [try SocketAddress(parsing: "127.0.0.1:\(cluster.nodes[0].port)")],
                                        base: base, loop: loop)
        client.start()
        return client
    }

    static func send(_ client: RedisClusterClient, _ command: [String], key: String) throws -> Result<RedisReply, RedisError> {
        let answer = Locked<Result<RedisReply, RedisError>?>(nil)
        let done = DispatchSemaphore(value: 0)
        client.send(command, key: key) { result in
            answer.update { $0 = result }
            done.signal()
        }
        guard done.wait(timeout: .now() + 15) == .success, let result = answer.get() else { throw RedisTestFailure("no reply") }
        return result
    }

    static func node(_ cluster: RedisCluster, port: UInt16) -> RedisProcess { cluster.nodes.first { $0.port == port }! }

    /// The master port serving `slot`, as the cluster itself says (`CLUSTER SLOTS` via cli).
    static func owner(_ cluster: RedisCluster, slot: Int) throws -> UInt16 {
        let client = try Self.client(cluster)
        defer { client.shutdown() }
        _ = try Self.send(client, ["PING"], key: "x")
        let map = client.loop.queue.sync { client.currentTopology }
        return try #require(map?.master(forSlot: slot)?.port)
    }

    @Test func everyCommandReachesTheMasterOfItsSlot() throws {
        let cluster = try RedisCluster()
        let client = try Self.client(cluster)
        defer { client.shutdown() }
        let keys = (0..<150).map { "user:\($0)" }
        let answers = Locked<[Result<RedisReply, RedisError>]?>(nil)
        let done = DispatchSemaphore(value: 0)
        client.pipeline(keys.map { (key: $0, arguments: ["SET", $0, "v-\($0)"]) }) { results in
            answers.update { $0 = results }
            done.signal()
        }
        #expect(done.wait(timeout: .now() + 15) == .success)
        #expect(answers.get()?.allSatisfy { if case .success(.simpleString("OK")) = $0 { return true } else { return false } } == true)
        let map = try #require(client.loop.queue.sync { client.currentTopology })
        for key in keys.prefix(40) {
            let port = try #require(map.master(forSlot: HashSlot.of(key))?.port)
            #expect(Self.node(cluster, port: port).cli(["GET", key]) == "v-\(key)", "\(key) on \(port)")
            #expect(try Self.send(client, ["GET", key], key: key).get().string == "v-\(key)")
        }
    }

    @Test func askDuringAMigrationAndMovedAfterIt() throws {
        let cluster = try RedisCluster()
        let client = try Self.client(cluster)
        defer { client.shutdown() }
        let key = "migrating-key"
        let slot = HashSlot.of(key)
        let from = Self.node(cluster, port: try Self.owner(cluster, slot: slot))
        let to = try #require(cluster.nodes.first { $0.port != from.port && $0.cli(["ROLE"]).hasPrefix("master") })
        _ = try Self.send(client, ["PING"], key: key)  // the map is read
        let fromID = from.cli(["CLUSTER", "MYID"]), toID = to.cli(["CLUSTER", "MYID"])
        #expect(to.cli(["CLUSTER", "SETSLOT", "\(slot)", "IMPORTING", fromID]) == "OK")
        #expect(from.cli(["CLUSTER", "SETSLOT", "\(slot)", "MIGRATING", toID]) == "OK")
        // The key is not on the old owner: it answers ASK, and the client asks the new one.
        #expect(try Self.send(client, ["SET", key, "moved-value"], key: key).get() == .simpleString("OK"))
        #expect(to.cli(["CLUSTER", "COUNTKEYSINSLOT", "\(slot)"]) == "1")
        #expect(from.cli(["CLUSTER", "COUNTKEYSINSLOT", "\(slot)"]) == "0")
        // The migration ends: every master learns the new owner; the client, still holding
        // the old map, gets MOVED, follows it and reads the map again.
        #expect(cluster.moveSlot(slot, to: to))
        #expect(try Self.send(client, ["GET", key], key: key).get().string == "moved-value")
        #expect(waitUntil(10) { client.loop.queue.sync { client.currentTopology?.master(forSlot: slot)?.port } == to.port })
    }

    /// One `MOVED` updates every loop: the map a client reads after it is taken by the
    /// process's other clients of the same cluster before their next command
    /// (`ClusterMapBoard`), so they do not each meet the redirect (counted by the old owner's
    /// `INFO errorstats`).
    @Test func aMovedSeenOnOneLoopUpdatesTheOtherLoopsMap() throws {
        let cluster = try RedisCluster()
        let key = "board-key"
        let slot = HashSlot.of(key)
        let from = Self.node(cluster, port: try Self.owner(cluster, slot: slot))
        let to = try #require(cluster.nodes.first { $0.port != from.port && $0.cli(["ROLE"]).hasPrefix("master") })
        let a = try Self.client(cluster, loop: EventLoop(index: 0))
        let b = try Self.client(cluster, loop: EventLoop(index: 1))
        defer { a.shutdown(); b.shutdown() }
        #expect(try Self.send(a, ["GET", key], key: key).get() == .null)
        #expect(try Self.send(b, ["GET", key], key: key).get() == .null)
        func movedAnswers() -> Int {
            let line = from.cli(["INFO", "errorstats"]).split(whereSeparator: \.isNewline).first { $0.hasPrefix("errorstat_MOVED:") }
            return line.flatMap { Int($0.split(separator: "=").last ?? "") } ?? 0
        }
        let before = movedAnswers()
        // The slot (empty) moves; neither client knows.
        #expect(cluster.moveSlot(slot, to: to))
        // a meets MOVED, follows it and reads the map again.
        #expect(try Self.send(a, ["GET", key], key: key).get() == .null)
        #expect(movedAnswers() == before + 1)
        #expect(waitUntil(10) { a.loop.queue.sync { a.currentTopology?.master(forSlot: slot)?.port } == to.port })
        // b takes that map before its next command: it goes to the new owner at once.
        #expect(try Self.send(b, ["GET", key], key: key).get() == .null)
        #expect(movedAnswers() == before + 1, "b met the MOVED too")
        #expect(b.loop.queue.sync { b.currentTopology?.master(forSlot: slot)?.port } == to.port)
    }

    /// `RedisClient` with a `.cluster` topology, as every store uses it: a pipeline's commands
    /// reach their slots' masters and a keyless one (`CLUSTER MYID`, `WAIT`) the node of the
    /// keyed command before it; binary values; a scan offers every key of every master.
    @Test func aClientWithAClusterTopologyRoutesPipelinesAndScansEveryMaster() throws {
        let cluster = try RedisCluster()
        let seeds = try cluster.nodes.prefix(2).map { try SocketAddress(parsing: "127.0.0.1:\($0.port)") }
        let client = RedisClient(configuration: RedisConfiguration(topology: .cluster(seeds: seeds)), loop: EventLoop(index: 0))
        client.start()
        defer { client.shutdown() }
        // Three keys on three masters, each followed by a keyless command.
        var keys: [String] = []
        var owners = Set<UInt16>()
        for i in 0..<200 where owners.count < 3 {
            let key = "route:\(i)"
            let owner = try Self.owner(cluster, slot: HashSlot.of(key))
            if owners.insert(owner).inserted { keys.append(key) }
        }
        #expect(keys.count == 3)
        let commands = keys.flatMap { [["SET", $0, "v"], ["CLUSTER", "MYID"], ["WAIT", "1", "1000"]] }
        let answers = Locked<[Result<RedisReply, RedisError>]?>(nil)
        let done = DispatchSemaphore(value: 0)
        client.pipeline(commands) { results in
            answers.update { $0 = results }
            done.signal()
        }
        #expect(done.wait(timeout: .now() + 15) == .success)
        let results = try #require(answers.get())
        for (i, key) in keys.enumerated() {
            let owner = Self.node(cluster, port: try Self.owner(cluster, slot: HashSlot.of(key)))
            #expect(try results[3 * i].get() == .simpleString("OK"))
            #expect(try results[3 * i + 1].get().string == owner.cli(["CLUSTER", "MYID"]), "MYID from \(key)'s master")
            #expect(try results[3 * i + 2].get().integer == 1, "WAIT counted \(key)'s replica")
        }
        // Binary-safe values, routed by key.
        let value: [UInt8] = [0, 255, 10, 13, 42]
        let stored = Locked<Result<RedisReply, RedisError>?>(nil)
        let sent = DispatchSemaphore(value: 0)
        client.send(bytes: [Array("SET".utf8), Array("binary-key".utf8), value]) { result in
            stored.update { $0 = result }
            sent.signal()
        }
        #expect(sent.wait(timeout: .now() + 10) == .success)
        #expect(try stored.get()?.get() == .simpleString("OK"))
        #expect(try client.call(["GET", "binary-key"]).get() == .bulk(value))
        // Every key of every master, once the scan is done.
        let written = (0..<90).map { "scan-me:\($0)" }
        for key in written { _ = client.call(["SET", key, "1"]) }
        var seen = Set<String>()
        var cursor: RedisScanCursor? = .start
        var steps = 0
        while let current = cursor, steps < 1000 {
            steps += 1
            let step = Locked<Result<(next: RedisScanCursor?, keys: [String]), RedisError>?>(nil)
            let stepped = DispatchSemaphore(value: 0)
            client.scan(from: current, match: "scan-me:*", count: 10) { result in
                step.update { $0 = result }
                stepped.signal()
            }
            #expect(stepped.wait(timeout: .now() + 10) == .success)
            let (next, found) = try #require(step.get()).get()
            seen.formUnion(found)
            cursor = next
        }
        #expect(cursor == nil && seen == Set(written), "\(seen.count) of \(written.count)")
    }

    @Test func aKilledMasterIsReplacedAndAnAcknowledgedWriteSurvives() throws {
        let cluster = try RedisCluster()
        let client = try Self.client(cluster)
        defer { client.shutdown() }
        let key = "failover-key"
        #expect(try Self.send(client, ["SET", key, "kept"], key: key).get() == .simpleString("OK"))
        // Acknowledged as the stores acknowledge: a replica has it.
        #expect(try Self.send(client, ["WAIT", "1", "2000"], key: key).get().integer == 1)
        let master = Self.node(cluster, port: try Self.owner(cluster, slot: HashSlot.of(key)))
        master.stop()
        // Within the node timeout (2 s) and an election, the replica serves the slot; the
        // client's commands fail meanwhile and then follow.
        var value: String?
        #expect(waitUntil(30) {
            value = (try? Self.send(client, ["GET", key], key: key).get())?.string
            return value != nil
        }, "the slot was not served again")
        #expect(value == "kept")
        let newOwner = client.loop.queue.sync { client.currentTopology?.master(forSlot: HashSlot.of(key))?.port }
        #expect(newOwner != nil && newOwner != master.port)
    }
}
