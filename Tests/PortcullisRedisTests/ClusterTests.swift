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
