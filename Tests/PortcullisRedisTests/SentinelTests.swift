import Foundation
import Testing
import PortcullisTestSupport
import PortcullisIO
import PortcullisRedis

/// A master, a replica and a sentinel (real processes, loopback only).
@Suite(.serialized) struct SentinelTests {
    let loop = EventLoop(index: 91)

    @Test func theClientFindsTheMasterAndFollowsAFailover() throws {
        let master = try RedisProcess()
        let replica = try RedisProcess(extra: ["--replicaof", "127.0.0.1", "\(master.port)"])
        #expect(waitUntil(10) { replica.cli(["INFO", "replication"]).contains("master_link_status:up") })
        let sentinel = try RedisProcess(sentinelFor: "mymaster", masterPort: master.port)
        // The sentinel learns about the replica from the master's INFO.
        #expect(waitUntil(15) { sentinel.cli(["SENTINEL", "replicas", "mymaster"]).contains("\(replica.port)") })

        // A dead sentinel first in the list: discovery must skip it.
        let dead = try SocketAddress(parsing: "127.0.0.1:\(Loopback.freePort())")
        let configuration = RedisConfiguration(
            topology: .sentinel(masterName: "mymaster", sentinels: [dead, try SocketAddress(parsing: "127.0.0.1:\(sentinel.port)")]),
            commandTimeout: 1, connectTimeout: 0.5, backoff: ReconnectBackoff(initial: 0.05, maximum: 0.3))
        let log = StateLog()
        let client = RedisClient(configuration: configuration, loop: loop, onStateChange: log.handler)
        client.start()
        defer { client.shutdown() }
        #expect(client.call(["SET", "k", "before"]) == .success(.simpleString("OK")))
        #expect(client.currentAddress?.port == master.port)

        // Forced failover: the old master stays up and becomes a replica, so the client
        // must move on +switch-master (or on the -READONLY it would get otherwise).
        // (The sentinel refuses with NOGOODSLAVE until it has talked to the replica itself.)
        let start = Date()
        #expect(waitUntil(20) { sentinel.cli(["SENTINEL", "FAILOVER", "mymaster"]) == "OK" })
        #expect(waitUntil(20) { client.currentAddress?.port == replica.port })
        let followed = Date().timeIntervalSince(start)
        print("sentinel failover followed after \(String(format: "%.2f", followed)) s")
        #expect(waitUntil(5) { client.call(["SET", "k", "after"]) == .success(.simpleString("OK")) })
        #expect(replica.cli(["GET", "k"]) == "after")

        // Master killed: the client re-discovers after the sentinel promotes the other one.
        let newMasterPort = replica.port
        #expect(waitUntil(20) { master.cli(["INFO", "replication"]).contains("role:slave") })
        #expect(waitUntil(15) { sentinel.cli(["SENTINEL", "replicas", "mymaster"]).contains("\(master.port)") })
        replica.stop()
        #expect(waitUntil(25) { client.currentAddress?.port == master.port })
        #expect(waitUntil(5) { client.call(["SET", "k", "again"]) == .success(.simpleString("OK")) })
        #expect(newMasterPort != master.port)
    }
}

/// The sentinels a client knows grow from `SENTINEL sentinels`: configured with one
/// sentinel, the client still finds the new master after that sentinel and the old
/// master are gone.
@Suite(.serialized) struct SentinelDiscoveryRefreshTests {
    let loop = EventLoop(index: 92)

    @Test func aClientConfiguredWithOneSentinelFollowsAFailoverAfterThatSentinelDies() throws {
        let master = try RedisProcess()
        let replica = try RedisProcess(extra: ["--replicaof", "127.0.0.1", "\(master.port)"])
        #expect(waitUntil(10) { replica.cli(["INFO", "replication"]).contains("master_link_status:up") })
        let sentinels = try (0..<3).map { _ in try RedisProcess(sentinelFor: "mymaster", masterPort: master.port) }
        // The first sentinel must know the two others (they announce themselves over hello messages).
        #expect(waitUntil(20) { sentinels[0].cli(["SENTINEL", "sentinels", "mymaster"]).components(separatedBy: "\n").filter { $0 == "ip" }.count == 2 })
        #expect(waitUntil(20) { sentinels.allSatisfy { $0.cli(["SENTINEL", "replicas", "mymaster"]).contains("\(replica.port)") } })

        let configuration = RedisConfiguration(
            topology: .sentinel(masterName: "mymaster", sentinels: [try SocketAddress(parsing: "127.0.0.1:\(sentinels[0].port)")]),
            commandTimeout: 1, connectTimeout: 0.5, backoff: ReconnectBackoff(initial: 0.05, maximum: 0.3))
        let client = RedisClient(configuration: configuration, loop: loop)
        client.start()
        defer { client.shutdown() }
        #expect(client.call(["SET", "k", "before"]) == .success(.simpleString("OK")))
        #expect(client.currentAddress?.port == master.port)

        sentinels[0].stop()
        master.stop()
        // Sentinels 2 and 3 (a majority) promote the replica; the client can only learn of it
        // through the sentinels it discovered.
        #expect(waitUntil(40) { client.currentAddress?.port == replica.port }, "the client did not find the new master")
        #expect(waitUntil(5) { client.call(["SET", "k", "after"]) == .success(.simpleString("OK")) })
    }
}
