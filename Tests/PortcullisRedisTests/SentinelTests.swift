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
