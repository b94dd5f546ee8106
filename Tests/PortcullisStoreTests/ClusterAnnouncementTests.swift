import Dispatch
import Foundation
import PortcullisIO
import PortcullisRedis
import PortcullisTestSupport
import Testing
@testable import PortcullisStore

/// Revocation announcements on a real Redis Cluster (3 masters, 3 replicas) go through sharded
/// pub/sub: every instance subscribes (`SSUBSCRIBE`) on the master of the channel's slot and
/// announces there (`SPUBLISH`), so a message does not cross the cluster bus to every node.
/// The instances here catch up from the log only once an hour: what reaches B in seconds came
/// through an announcement.
@Suite(.serialized) struct ClusterAnnouncementTests {
    static func configuration(_ cluster: RedisCluster) throws -> RedisConfiguration {
        RedisConfiguration(topology: .cluster(seeds: try cluster.nodes.map { try SocketAddress(parsing: "127.0.0.1:\($0.port)") }),
                           commandTimeout: 2, connectTimeout: 1,
                           backoff: ReconnectBackoff(initial: 0.02, maximum: 0.2))
    }

    /// Gateways subscribed to the sharded channel on `node` (`PUBSUB SHARDNUMSUB`).
    static func shardSubscribers(_ node: RedisProcess) -> Int {
        let lines = node.cli(["PUBSUB", "SHARDNUMSUB", RedisRevocationSchema.channel]).split(separator: "\n")
        return lines.count == 2 ? Int(lines[1]) ?? -1 : -1
    }

    static func acknowledged(_ result: Result<Void, StoreError>?) -> Bool {
        if case .success = result { return true } else { return false }
    }

    @Test func announcementsTakeTheChannelsShardAndFollowItsSlotWhenItMoves() throws {
        let cluster = try RedisCluster()
        let channel = RedisRevocationSchema.channel
        let loopsA = [EventLoop(index: 0)], loopsB = [EventLoop(index: 0), EventLoop(index: 1)]
        let a = RedisRevocationStore(configuration: try Self.configuration(cluster), loops: loopsA, catchUpInterval: 3600)
        let b = RedisRevocationStore(configuration: try Self.configuration(cluster), loops: loopsB, catchUpInterval: 3600)
        a.start(); b.start()
        defer { a.shutdown(); b.shutdown() }
        #expect(waitUntil(15) { a.health == .ok && b.health == .ok })
        let owner = try #require(cluster.master(ofKey: channel))
        #expect(waitUntil(10) { Self.shardSubscribers(owner) == 2 }, "both subscribe on the channel's master")
        #expect(cluster.nodes.filter { $0.port != owner.port }.allSatisfy { Self.shardSubscribers($0) == 0 })

        // A revocation on A reaches B's every loop through the announcement; an undo too.
        let until = nowSeconds() + 120
        #expect(Self.acknowledged(revokeAndWait(a, .token(id: "sharded-1", until: until))))
        #expect(waitUntil(5) { loopsB.allSatisfy { verdict(b, $0, token: "sharded-1") == .revoked } })
        let undone = DispatchSemaphore(value: 0)
        a.undo(.token("sharded-1")) { _ in undone.signal() }
        #expect(undone.wait(timeout: .now() + 5) == .success)
        #expect(waitUntil(5) { loopsB.allSatisfy { verdict(b, $0, token: "sharded-1") == .allowed } })

        // An app's classic PUBLISH, on a node that does not serve the channel's slot, still
        // reaches every instance (the schema stays what apps already use).
        let other = try #require(cluster.nodes.first { $0.port != owner.port && $0.cli(["ROLE"]).hasPrefix("master") })
        _ = other.cli(["PUBLISH", channel, "jti \(until) from-an-app"])
        #expect(waitUntil(5) { verdict(b, loopsB[1], token: "from-an-app") == .revoked && verdict(a, loopsA[0], token: "from-an-app") == .revoked })

        // The channel's slot moves to another master: the old one ends the sharded
        // subscriptions (`sunsubscribe`), the instances subscribe on the new one, and the
        // next revocation is announced and received there.
        let slot = HashSlot.of(channel)
        #expect(cluster.moveSlot(slot, to: other))
        #expect(waitUntil(10) { cluster.master(ofKey: channel)?.port == other.port })
        #expect(waitUntil(15) { Self.shardSubscribers(other) == 2 }, "both follow the slot to its new master")
        #expect(Self.shardSubscribers(owner) == 0)
        #expect(waitUntil(15) { a.health == .ok && b.health == .ok })
        #expect(Self.acknowledged(revokeAndWait(a, .token(id: "sharded-2", until: until))))
        #expect(waitUntil(5) { loopsB.allSatisfy { verdict(b, $0, token: "sharded-2") == .revoked } })
    }
}
