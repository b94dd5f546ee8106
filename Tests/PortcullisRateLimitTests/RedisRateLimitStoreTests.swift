import Dispatch
import Foundation
import Logging
import PortcullisIO
import PortcullisRedis
import PortcullisTestSupport
import Testing
@testable import PortcullisRateLimit

/// The shared store against a real redis-server: two clients (two instances) share one
/// budget exactly, the script's answers match the in-process GCRA, idle keys expire, and a
/// dead server answers nil (so `on_unavailable` applies) at once.
@Suite(.serialized) struct RedisRateLimitStoreTests {
    static func client(_ port: UInt16) throws -> RedisClient {
        let configuration = RedisConfiguration(topology: .standalone(try SocketAddress(parsing: "127.0.0.1:\(port)")),
                                               commandTimeout: 2, connectTimeout: 1,
                                               backoff: ReconnectBackoff(initial: 0.02, maximum: 0.2))
        let client = RedisClient(configuration: configuration, loop: EventLoop(index: 0))
        client.start()
        return client
    }

    /// One `decide` call, waited for (bounded).
    static func decide(_ store: RedisRateLimitStore, _ checks: [(rule: RateLimitRule, key: RateLimitKey)]) throws -> [GCRA.Decision]? {
        let answer = Locked<[GCRA.Decision]??>(nil)
        let done = DispatchSemaphore(value: 0)
        store.decide(checks) { decisions in
            answer.update { $0 = .some(decisions) }
            done.signal()
        }
        guard done.wait(timeout: .now() + 10) == .success, let result = answer.get() else { throw TestFailure("no answer") }
        return result
    }

    @Test func twoInstancesShareOneBudgetAndTheAnswersAreTheGCRAs() throws {
        let server = try RedisProcess()
        let a = RedisRateLimitStore(clients: [try Self.client(server.port)], logger: Logger(label: "a"))
        let b = RedisRateLimitStore(clients: [try Self.client(server.port)], logger: Logger(label: "b"))
        let rule = RateLimitRule(name: "per-user", routes: nil, key: .user, count: 10, periodSeconds: 60, burst: 4)
        let alice = RateLimitKey(identity: "alice")
        var allowed: [Bool] = []
        var remaining: [Int64] = []
        for i in 0..<6 {
            let decision = try #require(try Self.decide(i % 2 == 0 ? a : b, [(rule, alice)])?.first)
            allowed.append(decision.allowed)
            remaining.append(decision.remaining)
        }
        #expect(allowed == [true, true, true, true, false, false])
        #expect(remaining == [3, 2, 1, 0, 0, 0])
        let refused = try #require(try Self.decide(a, [(rule, alice)])?.first)
        // One interval (6 s) past the burst, less the few milliseconds the calls took.
        #expect(refused.retryAfterMicroseconds > 5_000_000 && refused.retryAfterMicroseconds <= 6_000_000, "\(refused)")
        #expect(refused.resetMicroseconds > 23_000_000 && refused.resetMicroseconds <= 24_000_000, "\(refused)")
        // Two rules in one pipeline; an address never shares an identity's budget.
        let other = RateLimitRule(name: "other", routes: nil, key: .clientAddress, count: 1, periodSeconds: 60, burst: 1)
        let both = try #require(try Self.decide(b, [(rule, RateLimitKey(address: "alice")), (other, RateLimitKey(address: "alice"))]))
        #expect(both.map(\.allowed) == [true, true])
        // The key expires when its budget is whole again (the TAT), so Redis holds no idle key.
        let ttl = Int(server.cli(["PTTL", RedisRateLimitStore.key(rule: "per-user", alice)]).trimmingCharacters(in: .whitespacesAndNewlines)) ?? -9
        #expect(ttl > 20_000 && ttl <= 24_000, "\(ttl)")
        // A server that lost its scripts (restart, failover, SCRIPT FLUSH) answers NOSCRIPT to
        // EVALSHA; the store sends EVAL once, and nothing is counted twice.
        _ = server.cli(["SCRIPT", "FLUSH"])
        let bob = RateLimitKey(identity: "bob")
        #expect(try Self.decide(a, [(rule, bob)])?.first?.remaining == 3)
        #expect(try Self.decide(a, [(rule, bob)])?.first?.remaining == 2)
        #expect(a.counts()["per-user"]?.allowed == 4 && a.counts()["per-user"]?.limited == 2)
        #expect(b.counts()["per-user"]?.allowed == 3 && b.counts()["per-user"]?.limited == 1)
    }

    @Test func aRefusalStandsLocallyUntilItsRetryAfterAndNoLonger() throws {
        let server = try RedisProcess()
        let store = RedisRateLimitStore(clients: [try Self.client(server.port)], logger: Logger(label: "cache"))
        // 1 per 2 s, burst 1: the second request is refused for about 2 s.
        let rule = RateLimitRule(name: "slow", routes: nil, key: .user, count: 1, periodSeconds: 2, burst: 1)
        let key = RateLimitKey(identity: "hammer")
        #expect(try Self.decide(store, [(rule, key)])?.first?.allowed == true)
        #expect(store.standingRefusal([(rule, key)]) == nil)
        let refused = try #require(try Self.decide(store, [(rule, key)])?.first)
        #expect(!refused.allowed)
        // Now answered here: Redis is not asked (its key is not touched even if it vanished).
        _ = server.cli(["FLUSHALL"])
        let standing = try #require(store.standingRefusal([(rule, key)]))
        #expect(standing.index == 0 && !standing.decision.allowed)
        #expect(standing.decision.retryAfterMicroseconds > 0 && standing.decision.retryAfterMicroseconds <= refused.retryAfterMicroseconds)
        // Past its Retry-After the refusal is gone and Redis decides again.
        #expect(store.standingRefusal([(rule, key)], now: EmbeddedRateLimitStore.now() + refused.retryAfterMicroseconds + 1) == nil)
        #expect(store.counts()["slow"]?.limited == 2)
    }

    /// On a real 6-node Redis Cluster through `RedisClusterClient`: keys of many users land
    /// on all three masters (each master loads the script on its first NOSCRIPT), and two
    /// clients (two instances) share each user's budget exactly.
    @Test func onAClusterTwoInstancesShareEveryUsersBudget() throws {
        let cluster = try RedisCluster()
        let base = RedisConfiguration(topology: .standalone(try SocketAddress(parsing: "127.0.0.1:1")),
                                      commandTimeout: 2, connectTimeout: 1,
                                      backoff: ReconnectBackoff(initial: 0.02, maximum: 0.2))
        func clusterClient(_ seed: RedisProcess) throws -> RedisClusterClient {
            let client = RedisClusterClient(seeds: [try SocketAddress(parsing: "127.0.0.1:\(seed.port)")], base: base,
                                            loop: EventLoop(index: 0))
            client.start()
            return client
        }
        let one = try clusterClient(cluster.nodes[0]), two = try clusterClient(cluster.nodes[1])
        defer { one.shutdown(); two.shutdown() }
        let a = RedisRateLimitStore(clients: [one], logger: Logger(label: "a"), timeout: 2)
        let b = RedisRateLimitStore(clients: [two], logger: Logger(label: "b"), timeout: 2)
        let rule = RateLimitRule(name: "per-user", routes: nil, key: .user, count: 1, periodSeconds: 60, burst: 3)
        let users = (0..<24).map { RateLimitKey(identity: "user-\($0)") }
        // Their keys span every master.
        let slots = Set(users.map { HashSlot.of(RedisRateLimitStore.key(rule: "per-user", $0)) / 5461 })
        #expect(slots.count == 3)
        for user in users {
            var allowed: [Bool] = []
            for i in 0..<5 {
                allowed.append(try #require(try Self.decide(i % 2 == 0 ? a : b, [(rule, user)])?.first).allowed)
            }
            #expect(allowed == [true, true, true, false, false], "\(user.value)")
        }
        // Every master holds some of the keys.
        for port in cluster.masterPorts {
            let count = Int(cluster.nodes.first { $0.port == port }!.cli(["DBSIZE"])) ?? 0
            #expect(count > 0, "master \(port) holds no key")
        }
    }

    @Test func aDeadServerAnswersNilAndItIsCounted() throws {
        let server = try RedisProcess()
        let store = RedisRateLimitStore(clients: [try Self.client(server.port)], logger: Logger(label: "dead"), timeout: 0.5)
        let rule = RateLimitRule(name: "r", routes: nil, key: .user, count: 1, periodSeconds: 1, burst: 1)
        #expect(try Self.decide(store, [(rule, RateLimitKey(identity: "u"))])?.first?.allowed == true)
        server.stop()
        #expect(waitUntil(10) { (try? Self.decide(store, [(rule, RateLimitKey(identity: "u"))])) == .some(nil) })
        #expect((store.counts()["r"]?.unavailable ?? 0) >= 1)
    }
}
