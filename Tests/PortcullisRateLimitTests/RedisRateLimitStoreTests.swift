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
        #expect(store.admit([(rule, key)], mayGoAhead: false) == .ask)
        let refused = try #require(try Self.decide(store, [(rule, key)])?.first)
        #expect(!refused.allowed)
        // Now answered here: Redis is not asked (its key is not touched even if it vanished).
        _ = server.cli(["FLUSHALL"])
        guard case .refused(let index, let standing) = store.admit([(rule, key)]) else {
            Issue.record("no standing refusal")
            return
        }
        #expect(index == 0 && !standing.allowed)
        #expect(standing.retryAfterMicroseconds > 0 && standing.retryAfterMicroseconds <= refused.retryAfterMicroseconds)
        // Past its Retry-After the refusal is gone and Redis decides again.
        #expect(store.admit([(rule, key)], mayGoAhead: false,
                            now: EmbeddedRateLimitStore.now() + refused.retryAfterMicroseconds + 1) == .ask)
        #expect(store.counts()["slow"]?.limited == 2)
    }

    /// `charges` sent as one batch (as a loop's pass sends them), each charge's decisions
    /// waited for (bounded), in the order of the charges.
    /// `on`: sent from that loop's queue (a cluster client's, as a pass's end sends them:
    /// there the client's slot map groups keys by master); nil: from the caller's thread.
    static func batch(_ store: RedisRateLimitStore, _ charges: [[(rule: RateLimitRule, key: RateLimitKey)]],
                      on loop: EventLoop? = nil) throws -> [[GCRA.Decision]?] {
        let answers = Locked<[Int: [GCRA.Decision]?]>([:])
        let done = DispatchSemaphore(value: 0)
        let sent = charges.enumerated().map { index, checks in
            RedisRateLimitStore.Charge(checks: checks, ahead: false) { decisions in
                answers.update { $0[index] = .some(decisions) }
                done.signal()
            }
        }
        if let loop { loop.execute { store.send(sent, clientIndex: 0) } } else { store.send(sent, clientIndex: 0) }
        for _ in charges {
            guard done.wait(timeout: .now() + 10) == .success else { throw TestFailure("no answer") }
        }
        let all = answers.get()
        return try charges.indices.map { index in
            guard let answer = all[index] else { throw TestFailure("charge \(index) answered twice or never") }
            return answer
        }
    }

    /// The charges of several requests leave as one script call (what a loop's pass sends),
    /// and each request gets the decisions of its own keys: a key charged twice in the batch
    /// is charged in order (the second sees the first), two rules of one request each count.
    @Test func oneScriptCallChargesABatchAndEachRequestGetsItsOwnAnswers() throws {
        let server = try RedisProcess()
        let store = RedisRateLimitStore(clients: [try Self.client(server.port)], logger: Logger(label: "batch"))
        let rule = RateLimitRule(name: "per-user", routes: nil, key: .user, count: 10, periodSeconds: 60, burst: 4)
        let other = RateLimitRule(name: "other", routes: nil, key: .clientAddress, count: 1, periodSeconds: 60, burst: 1)
        let alice = RateLimitKey(identity: "alice"), carol = RateLimitKey(identity: "carol")
        let host = RateLimitKey(address: "192.0.2.1")
        #expect(try Self.decide(store, [(rule, carol)])?.first?.remaining == 3)  // the script is loaded
        _ = server.cli(["CONFIG", "RESETSTAT"])
        let answers = try Self.batch(store, [[(rule, alice)], [(rule, alice), (other, host)], [(other, host)], [(rule, alice)],
                                             [(rule, carol)]])
        #expect(answers[0]?.map(\.remaining) == [3])
        #expect(answers[1]?.map(\.allowed) == [true, true] && answers[1]?.first?.remaining == 2)
        #expect(answers[2]?.map(\.allowed) == [false], "the address's one request was spent by the request before")
        #expect(answers[3]?.map(\.remaining) == [1])
        #expect(answers[4]?.map(\.remaining) == [2])
        let stats = server.cli(["INFO", "commandstats"])
        #expect(stats.contains("cmdstat_evalsha:calls=1,"), "\(stats)")
        #expect(store.counts()["per-user"]?.allowed == 5 && store.counts()["other"]?.allowed == 1
                && store.counts()["other"]?.limited == 1)
        // A server that lost the script: the whole batch is loaded and charged once.
        _ = server.cli(["SCRIPT", "FLUSH"])
        let again = try Self.batch(store, [[(rule, carol)], [(rule, carol)]])
        #expect(again.map { $0?.first?.remaining } == [1, 0])
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
        // A batch on a cluster: one call per slot (keys of one hash tag together, the others
        // alone), every master's keys in it, each request its own answers.
        let tagged = (0..<3).map { RateLimitKey(identity: "{team}member-\($0)") }
        let fresh = (0..<6).map { RateLimitKey(identity: "batch-\($0)") }
        #expect(Set(fresh.map { HashSlot.of(RedisRateLimitStore.key(rule: "per-user", $0)) / 5461 }).count == 3)
        let charges = (tagged + fresh + tagged).map { [(rule: rule, key: $0)] }
        let answers = try Self.batch(a, charges)
        #expect(answers.map { $0?.first?.remaining } == Array(repeating: 2, count: 9) + Array(repeating: 1, count: 3))
        // One master lost the script: its calls are sent again with EVAL, the others' are not
        // (each key is charged once: one less each, not two).
        _ = cluster.nodes.first { $0.port == cluster.masterPorts[0] }!.cli(["SCRIPT", "FLUSH"])
        let again = try Self.batch(a, fresh.map { [(rule: rule, key: $0)] })
        #expect(again.map { $0?.first?.remaining } == Array(repeating: 1, count: 6))
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

extension RedisRateLimitStoreTests {
    /// On a real 6-node cluster, a batch sent from the client's loop is one script call per
    /// master (its keys in several slots), each key charged once; a key whose slot moved to
    /// another master since the client read the slot map makes its call fail before it wrote
    /// anything, and the call's keys go again one call per slot: every key is still charged
    /// exactly once, the moved one on its new master.
    @Test func onAClusterABatchIsOneCallPerMasterAndAKeyThatMovedIsChargedOnce() throws {
        let cluster = try RedisCluster()
        let base = RedisConfiguration(topology: .standalone(try SocketAddress(parsing: "127.0.0.1:1")),
                                      commandTimeout: 2, connectTimeout: 1,
                                      backoff: ReconnectBackoff(initial: 0.02, maximum: 0.2))
        let loop = EventLoop(index: 0)
        let client = RedisClusterClient(seeds: [try SocketAddress(parsing: "127.0.0.1:\(cluster.nodes[0].port)")], base: base, loop: loop)
        client.start()
        defer { client.shutdown() }
        let store = RedisRateLimitStore(clients: [client], logger: Logger(label: "per-master"), timeout: 2)
        let rule = RateLimitRule(name: "per-user", routes: nil, key: .user, count: 1, periodSeconds: 60, burst: 3)
        func key(_ user: RateLimitKey) -> String { RedisRateLimitStore.key(rule: "per-user", user) }
        func scriptCalls() -> Int {
            cluster.masterPorts.reduce(0) { sum, port in sum + cluster.nodes.first { $0.port == port }!.calls(of: "evalsha") }
        }
        // The slot map is known (the first call waits for it).
        #expect(try Self.decide(store, [(rule, RateLimitKey(identity: "warm-up"))])?.first?.allowed == true)
        let users = (0..<12).map { RateLimitKey(identity: "spread-\($0)") }
        // A fresh cluster's masters serve a third of the slots each, in order.
        func third(_ user: RateLimitKey) -> Int { HashSlot.of(key(user)) / 5461 }
        #expect(Set(users.map(third)).count == 3, "the keys span every master")
        let charges = users.map { [(rule: rule, key: $0)] }
        #expect(try Self.batch(store, charges, on: loop).map { $0?.first?.remaining } == Array(repeating: 2, count: 12))
        let before = scriptCalls()
        #expect(try Self.batch(store, charges, on: loop).map { $0?.first?.remaining } == Array(repeating: 1, count: 12))
        #expect(scriptCalls() - before == 3, "one call per master, not one per slot")

        // A fresh key's slot moves to another master behind the client's back.
        let from = try #require(cluster.master(ofKey: key(users[0])))
        let to = try #require(users.first { third($0) != third(users[0]) }.flatMap { cluster.master(ofKey: key($0)) })
        let candidates = (0..<200).map { RateLimitKey(identity: "fresh-\($0)") }.filter { third($0) == third(users[0]) }
        let moving = candidates[0], stay = Array(candidates[1...3])
        let slot = HashSlot.of(key(moving))
        #expect(stay.allSatisfy { HashSlot.of(key($0)) != slot })
        #expect(from.cli(["CLUSTER", "COUNTKEYSINSLOT", "\(slot)"]) == "0")
        #expect(cluster.moveSlot(slot, to: to))
        #expect(waitUntil(10) { cluster.master(ofKey: key(moving))?.port == to.port })
        let mixed = ([moving] + stay).map { [(rule: rule, key: $0)] }
        #expect(try Self.batch(store, mixed, on: loop).map { $0?.first?.remaining } == [2, 2, 2, 2])
        #expect(try Self.batch(store, mixed, on: loop).map { $0?.first?.remaining } == [1, 1, 1, 1], "each charged once a batch")
        #expect(to.cli(["EXISTS", key(moving)]) == "1" && from.cli(["CLUSTER", "COUNTKEYSINSLOT", "\(slot)"]) == "0")
    }
}

/// Keys far from their limit are admitted at once and charged in the background
/// (`KeyPicture`); near the limit, or with a small burst, requests wait for Redis.
@Suite(.serialized) struct HeadroomTests {
    static let rule = RateLimitRule(name: "wide", routes: nil, key: .user, count: 100, periodSeconds: 1, burst: 80)

    @Test func theCacheAdmitsAheadOnlyWithHalfTheBurstLeftAndFewUnanswered() {
        let cache = KeyPicture()
        let key = RateLimitKey(identity: "k")
        let interval = Self.rule.gcra.interval
        let now: Int64 = 1_000_000_000
        #expect(!cache.admit([(Self.rule, key)], mayGoAhead: true, now: now).isAhead, "never answered: wait for Redis")
        // Redis answered: one request spent.
        cache.learn(Self.rule, key: key, GCRA.Decision(allowed: true, tat: 0, remaining: 79, resetMicroseconds: interval,
                                                     retryAfterMicroseconds: 0), reserved: false, now: now)
        // Ahead, up to an eighth of the burst (10) unanswered.
        var admitted = 0
        while cache.admit([(Self.rule, key)], mayGoAhead: true, now: now).isAhead { admitted += 1 }
        #expect(admitted == Int(KeyPicture.maxAhead(Self.rule)))
        // Each answer settles one and replaces the picture: 38 spent leaves less than half.
        cache.learn(Self.rule, key: key, GCRA.Decision(allowed: true, tat: 0, remaining: 42, resetMicroseconds: 38 * interval,
                                                     retryAfterMicroseconds: 0), reserved: true, now: now)
        #expect(!cache.admit([(Self.rule, key)], mayGoAhead: true, now: now).isAhead, "38 spent, 9 unanswered, 1 more: 48 of 80")
        cache.learn(Self.rule, key: key, GCRA.Decision(allowed: true, tat: 0, remaining: 60, resetMicroseconds: 20 * interval,
                                                     retryAfterMicroseconds: 0), reserved: true, now: now)
        #expect(cache.admit([(Self.rule, key)], mayGoAhead: true, now: now).isAhead, "20 spent, 8 unanswered, 1 more: 29 of 80")
        // A small burst never goes ahead.
        let tight = RateLimitRule(name: "tight", routes: nil, key: .user, count: 5, periodSeconds: 60, burst: 5)
        cache.learn(tight, key: key, GCRA.Decision(allowed: true, tat: 0, remaining: 4, resetMicroseconds: tight.gcra.interval,
                                                 retryAfterMicroseconds: 0), reserved: false, now: now)
        #expect(!cache.admit([(tight, key)], mayGoAhead: true, now: now).isAhead)
        // No answer (Redis down): no headroom until Redis answers again.
        let other = RateLimitKey(identity: "other")
        cache.learn(Self.rule, key: other, GCRA.Decision(allowed: true, tat: 0, remaining: 79, resetMicroseconds: interval,
                                                       retryAfterMicroseconds: 0), reserved: false, now: now)
        cache.learn(Self.rule, key: other, nil, reserved: false, now: now)
        #expect(!cache.admit([(Self.rule, other)], mayGoAhead: true, now: now).isAhead)
    }

    /// Standing refusals and headroom share one entry per key: a request with several rules
    /// is refused by the first refusal that stands, and gives back what it reserved on the
    /// way (so the keys it did not use keep their whole allowance ahead).
    @Test func aStandingRefusalAnswersAndGivesBackTheReservationsOfTheRequest() {
        let picture = KeyPicture()
        let key = RateLimitKey(identity: "k")
        let now: Int64 = 1_000_000_000
        let wide = Self.rule, other = RateLimitRule(name: "other", routes: nil, key: .user, count: 100, periodSeconds: 1, burst: 80)
        let whole = GCRA.Decision(allowed: true, tat: 0, remaining: 79, resetMicroseconds: wide.gcra.interval, retryAfterMicroseconds: 0)
        picture.learn(wide, key: key, whole, reserved: false, now: now)
        picture.learn(other, key: key, GCRA.Decision(allowed: false, tat: 0, remaining: 0, resetMicroseconds: 3_000_000,
                                                     retryAfterMicroseconds: 2_000_000), reserved: false, now: now)
        guard case .refused(let index, let decision) = picture.admit([(wide, key), (other, key)], mayGoAhead: true, now: now + 10) else {
            Issue.record("the refusal of the second rule does not stand")
            return
        }
        #expect(index == 1 && !decision.allowed && decision.retryAfterMicroseconds == 1_999_990 && decision.resetMicroseconds == 2_999_990)
        #expect(picture.tallies()["wide"]?.allowed ?? 0 == 0, "the first rule's reservation was given back")
        var admitted = 0
        while picture.admit([(wide, key)], mayGoAhead: true, now: now).isAhead { admitted += 1 }
        #expect(admitted == Int(KeyPicture.maxAhead(wide)))
        // With `mayGoAhead` false nothing is reserved, and a refusal still answers.
        #expect(picture.admit([(other, key)], mayGoAhead: false, now: now + 1) != .ask)
        // Past its Retry-After the refusal lapses: the second rule's key is asked again.
        #expect(picture.admit([(other, key)], mayGoAhead: true, now: now + 2_000_001) == .ask)
    }
}

/// Leases (`KeyPicture`): a key that keeps coming is charged several requests at once and
/// the next ones use what was paid; the size follows the demand and the headroom.
@Suite struct LeaseTests {
    // 1,000/s with a burst of 512: interval 1 ms, leases up to 32 units, fresh for 64 ms.
    static let rule = RateLimitRule(name: "busy", routes: nil, key: .user, count: 1000, periodSeconds: 1, burst: 512)
    static let key = RateLimitKey(identity: "k")
    static let start: Int64 = 1_000_000_000

    /// The units `admit` charges for one request of `key` (0: paid for), nil when it does not go ahead.
    static func units(_ picture: KeyPicture, _ rule: RateLimitRule = rule, at now: Int64) -> Int64? {
        guard case .ahead(let units) = picture.admit([(rule, key)], mayGoAhead: true, now: now) else { return nil }
        return units[0]
    }

    /// Redis's answer to a charge of `units` admitted at `admitted`, with `spent` intervals spent after it.
    static func answer(_ picture: KeyPicture, _ rule: RateLimitRule = rule, units: Int64, admitted: Int64, spent: Int64,
                       allowed: Bool = true, at now: Int64) {
        let interval = rule.gcra.interval
        let decision = allowed
            ? GCRA.Decision(allowed: true, tat: 0, remaining: 0, resetMicroseconds: spent * interval, retryAfterMicroseconds: 0)
            : GCRA.Decision(allowed: false, tat: 0, remaining: 0, resetMicroseconds: spent * interval, retryAfterMicroseconds: interval)
        picture.learn(rule, key: key, decision, reserved: true, units: units, admitted: admitted, now: now)
    }

    @Test func aLeaseDoublesWhileItsUnitsAreUsedAndThoseSendNothing() {
        let picture = KeyPicture()
        let now = Self.start
        #expect(KeyPicture.maxLease(Self.rule) == 32 && KeyPicture.leaseLifetime(Self.rule) == 64_000)
        picture.learn(Self.rule, key: Self.key, GCRA.Decision(allowed: true, tat: 0, remaining: 511, resetMicroseconds: 1000,
                                                              retryAfterMicroseconds: 0), reserved: false, now: now)
        #expect(Self.units(picture, at: now) == 1, "no lease answered yet: one unit")
        Self.answer(picture, units: 1, admitted: now, spent: 2, at: now + 100)
        // Used up while fresh: the next lease is twice as big; while it is in flight, single units.
        #expect(Self.units(picture, at: now + 200) == 2)
        #expect(Self.units(picture, at: now + 210) == 1, "one lease in flight at a time")
        Self.answer(picture, units: 2, admitted: now + 200, spent: 4, at: now + 300)
        Self.answer(picture, units: 1, admitted: now + 210, spent: 5, at: now + 310)
        #expect(Self.units(picture, at: now + 400) == 0, "the lease's second unit is paid for")
        #expect(Self.units(picture, at: now + 500) == 4)
        Self.answer(picture, units: 4, admitted: now + 500, spent: 9, at: now + 600)
        #expect((0..<3).map { Self.units(picture, at: now + 700 + $0) } == [0, 0, 0])
        #expect(Self.units(picture, at: now + 800) == 8)
        // Every request was tallied as allowed here (requests, not units): 5 charged, 4 paid for.
        #expect(picture.tallies()["busy"]?.allowed == 9)
    }

    @Test func unitsLapseAfterTheLifetimeAndTheNextLeaseFollowsDemand() {
        let picture = KeyPicture()
        let now = Self.start
        picture.learn(Self.rule, key: Self.key, GCRA.Decision(allowed: true, tat: 0, remaining: 511, resetMicroseconds: 1000,
                                                              retryAfterMicroseconds: 0), reserved: false, now: now)
        var size: Int64 = 1, t = now
        // Grow to 8 units, each lease used up at once.
        while size < 8 {
            #expect(Self.units(picture, at: t) == size)
            Self.answer(picture, units: size, admitted: t, spent: 2 * size, at: t + 10)
            for _ in 1..<size { #expect(Self.units(picture, at: t + 20) == 0) }
            size *= 2
            t += 100
        }
        #expect(Self.units(picture, at: t) == 8)
        Self.answer(picture, units: 8, admitted: t, spent: 16, at: t + 10)
        #expect(Self.units(picture, at: t + 20) == 0)
        // Six units left when the lifetime ends: they are not used, and the next lease is what
        // the key used in that window (1 + 2 + 4 + 2 requests) and a quarter more.
        let late = t + KeyPicture.leaseLifetime(Self.rule)
        #expect(Self.units(picture, at: late) == 11, "lapsed: sized to the last window's 9 requests, no paid unit used")
        Self.answer(picture, units: 11, admitted: late, spent: 11, allowed: false, at: late + 10)
        #expect(Self.units(picture, at: late + 20) == nil, "a refused lease leaves a standing refusal")
        #expect(Self.units(picture, at: late + 20 + Self.rule.gcra.interval) == 1, "and the lease starts over at 1")
    }

    /// `count` requests of `key` 10 µs apart from `start`, each charge answered at once; the
    /// units of each charge sent (a request paid for by a lease sends none).
    static func burst(_ picture: KeyPicture, _ count: Int, at start: Int64) -> [Int64] {
        var charges: [Int64] = []
        for i in 0..<count {
            let t = start + Int64(i) * 10
            guard let units = Self.units(picture, at: t) else {
                Issue.record("request \(i) did not go ahead")
                continue
            }
            guard units > 0 else { continue }
            charges.append(units)
            Self.answer(picture, units: units, admitted: t, spent: 2 * units, at: t + 5)
        }
        return charges
    }

    @Test func aKeyThatComesInBurstsPaysOneChargePerBurst() {
        let picture = KeyPicture()
        let now = Self.start
        let pause = 3 * KeyPicture.leaseLifetime(Self.rule)
        picture.learn(Self.rule, key: Self.key, GCRA.Decision(allowed: true, tat: 0, remaining: 511, resetMicroseconds: 1000,
                                                              retryAfterMicroseconds: 0), reserved: false, now: now)
        // The first burst ramps (each lease used up while fresh doubles the next).
        #expect(Self.burst(picture, 10, at: now) == [1, 2, 4, 8])
        // Back after pauses longer than the lifetime: one lease sized to the last burst (10
        // requests, a quarter more), not a new ramp from a halved lease.
        #expect(Self.burst(picture, 10, at: now + pause) == [12])
        #expect(Self.burst(picture, 10, at: now + 2 * pause) == [12])
        // A burst a little larger still fits; one much larger doubles once more.
        #expect(Self.burst(picture, 12, at: now + 3 * pause) == [12])
        #expect(Self.burst(picture, 20, at: now + 4 * pause) == [15, 30])
        // Demand falls: the next lease is what the key used in its last window.
        #expect(Self.burst(picture, 2, at: now + 5 * pause) == [25])
        #expect(Self.burst(picture, 2, at: now + 6 * pause) == [2])
        #expect(Self.burst(picture, 2, at: now + 7 * pause) == [2])
    }

    @Test func headroomSmallBurstsAndOtherChecksLimitLeases() {
        // A lease never takes the key past half its burst: 250 of 512 spent leaves room for 6.
        let picture = KeyPicture()
        let now = Self.start
        picture.learn(Self.rule, key: Self.key, GCRA.Decision(allowed: true, tat: 0, remaining: 0, resetMicroseconds: 1000,
                                                              retryAfterMicroseconds: 0), reserved: false, now: now)
        var t = now
        for size: Int64 in [1, 2, 4, 8] {
            #expect(Self.units(picture, at: t) == size)
            Self.answer(picture, units: size, admitted: t, spent: size == 8 ? 250 : 2 * size, at: t + 10)
            for _ in 1..<size { #expect(Self.units(picture, at: t + 20) == 0) }
            t += 100
        }
        #expect(Self.units(picture, at: t) == 1, "16 units would pass half the burst: one")
        // A burst under 32 never leases.
        let small = RateLimitRule(name: "small", routes: nil, key: .user, count: 1000, periodSeconds: 1, burst: 31)
        #expect(KeyPicture.maxLease(small) == 1)
        picture.learn(small, key: Self.key, GCRA.Decision(allowed: true, tat: 0, remaining: 30, resetMicroseconds: 1000,
                                                          retryAfterMicroseconds: 0), reserved: false, now: now)
        for step in 0..<3 {
            let at = now + Int64(step) * 100
            #expect(Self.units(picture, small, at: at) == 1)
            Self.answer(picture, small, units: 1, admitted: at, spent: 1, at: at + 10)
        }
        // A paid unit a request did not use (its other check has to wait) is given back.
        let unknown = RateLimitRule(name: "unknown", routes: nil, key: .user, count: 1000, periodSeconds: 1, burst: 512)
        let fresh = KeyPicture()
        fresh.learn(Self.rule, key: Self.key, GCRA.Decision(allowed: true, tat: 0, remaining: 511, resetMicroseconds: 1000,
                                                            retryAfterMicroseconds: 0), reserved: false, now: now)
        #expect(Self.units(fresh, at: now) == 1)
        Self.answer(fresh, units: 1, admitted: now, spent: 2, at: now + 10)
        #expect(Self.units(fresh, at: now + 20) == 2)
        Self.answer(fresh, units: 2, admitted: now + 20, spent: 4, at: now + 30)
        #expect(fresh.admit([(Self.rule, Self.key), (unknown, Self.key)], mayGoAhead: true, now: now + 40) == .ask)
        #expect(Self.units(fresh, at: now + 50) == 0, "the paid unit is still there")
        #expect(fresh.tallies()["busy"]?.allowed == 3, "three requests; the one given back is not counted")
    }
}

/// Leases against a real redis-server: Redis is charged before a paid unit is used (its
/// count never falls below what was admitted), with far fewer script calls than requests.
@Suite(.serialized) struct LeaseRedisTests {
    @Test func everyAdmittedRequestIsInRedisAndMostSendNothing() throws {
        let server = try RedisProcess()
        let client = try RedisRateLimitStoreTests.client(server.port)
        let store = RedisRateLimitStore(clients: [client], logger: Logger(label: "lease"))
        // One round trip on the store's connection: the answers to the charges sent before it
        // have been read (and the picture told) when it returns.
        func settle() {
            let done = DispatchSemaphore(value: 0)
            client.pipeline(keyed: [(key: "settle", arguments: ["PING"])], timeout: 5) { _ in done.signal() }
            _ = done.wait(timeout: .now() + 10)
        }
        // One request per 36 s, a burst of 1,024: leases up to 64, fresh for 10 s.
        let rule = RateLimitRule(name: "lease", routes: nil, key: .user, count: 100, periodSeconds: 3600, burst: 1024)
        let alice = RateLimitKey(identity: "alice")
        var admitted = 0
        for _ in 0..<300 {
            switch store.admit([(rule, alice)]) {
            case .ahead: admitted += 1; settle()
            case .refused: Issue.record("refused far from the limit")
            case .ask:
                // Waits: the charges sent before it (same connection) have their answers too.
                if try RedisRateLimitStoreTests.decide(store, [(rule, alice)])?.first?.allowed == true { admitted += 1 }
            }
        }
        _ = try RedisRateLimitStoreTests.decide(store, [(rule, RateLimitKey(identity: "flush"))])
        #expect(admitted == 300)
        // Redis's TAT for alice: how many intervals it was charged.
        let key = RedisRateLimitStore.key(rule: "lease", alice)
        let tat = try #require(Int64(server.cli(["GET", key]).trimmingCharacters(in: .whitespacesAndNewlines)))
        let time = server.cli(["TIME"]).split(whereSeparator: \.isNewline).compactMap { Int64($0) }
        let now = time[0] * 1_000_000 + time[1]
        let charged = (tat - now + rule.gcra.interval - 1) / rule.gcra.interval
        let calls = server.calls(of: "evalsha")
        print("300 requests of one key: \(charged) units charged in \(calls) script calls")
        #expect(charged >= 300, "Redis was told less than what was admitted: \(charged)")
        #expect(charged <= 300 + KeyPicture.maxLease(rule), "at most one lease unused: \(charged)")
        // Leases of 1, 2, 4, …, 64 units, then 64 each: about a dozen calls (and the first one's NOSCRIPT).
        #expect(calls <= 20, "\(calls) script calls for 300 requests")
    }
}

extension HeadroomTests {
    /// Against a real redis-server: a request admitted ahead is still charged (Redis's TAT
    /// moves for it), and two instances hammering one key from two threads each stay within
    /// one burst of the limit (the bound is two eighths of it for two instances).
    @Test func chargesSentAheadReachRedisAndTwoInstancesStayWithinTheBurst() throws {
        let server = try RedisProcess()
        let a = RedisRateLimitStore(clients: [try RedisRateLimitStoreTests.client(server.port)], logger: Logger(label: "a"))
        let b = RedisRateLimitStore(clients: [try RedisRateLimitStoreTests.client(server.port)], logger: Logger(label: "b"))
        let rule = RateLimitRule(name: "slow", routes: nil, key: .user, count: 16, periodSeconds: 3600, burst: 16)
        let alice = RateLimitKey(identity: "alice")
        // The first request waits (nothing known yet); the next goes ahead.
        #expect(try RedisRateLimitStoreTests.decide(a, [(rule, alice)])?.first?.allowed == true)
        #expect(a.admit([(rule, alice)]) == .ahead)
        #expect(a.admit([(rule, RateLimitKey(identity: "nobody"))]) == .ask, "a key never answered waits")
        // The charge sent ahead reached Redis (on the same connection, before this one): the
        // third request leaves 13 of 16.
        let third = try #require(try RedisRateLimitStoreTests.decide(a, [(rule, alice)])?.first)
        #expect(third.allowed && third.remaining == 13, "\(third)")
        // Two instances, 200 requests each at once from two threads: at most the burst plus
        // two eighths of it in all (no refill within the test: one request per 225 s).
        let total = Self.hammer(a, b, rule, RateLimitKey(identity: "bob"))
        print("two instances, one key, burst 16: \(total) admitted")
        #expect(total >= 16 && total <= 16 + 2 * Int(KeyPicture.maxAhead(rule)), "\(total)")
        // With leases (a burst of 128: up to 8 units at once): paid units are counted before
        // they are used, so the bound is the same; a lease Redis refused near the limit may
        // leave fewer than its units unspent.
        let wide = RateLimitRule(name: "wide", routes: nil, key: .user, count: 128, periodSeconds: 3600, burst: 128)
        #expect(try RedisRateLimitStoreTests.decide(a, [(wide, alice)])?.first?.allowed == true)
        #expect(try RedisRateLimitStoreTests.decide(b, [(wide, alice)])?.first?.allowed == true)
        let leased = Self.hammer(a, b, wide, alice)
        print("two instances, one key, burst 128: \(leased + 2) admitted")
        let maxLease = Int(KeyPicture.maxLease(wide)), maxAhead = Int(KeyPicture.maxAhead(wide))
        #expect(leased + 2 >= 128 - maxLease && leased + 2 <= 128 + 2 * maxAhead, "\(leased + 2)")
    }

    /// 200 requests of `key` from each of two instances at once (two threads, one waiting
    /// request at a time per thread, as a connection would): how many were admitted.
    static func hammer(_ a: RedisRateLimitStore, _ b: RedisRateLimitStore, _ rule: RateLimitRule, _ key: RateLimitKey) -> Int {
        let passed = Locked<Int>(0)
        let group = DispatchGroup()
        for store in [a, b] {
            group.enter()
            DispatchQueue.global().async {
                let done = DispatchSemaphore(value: 0)
                for _ in 0..<200 {
                    switch store.admit([(rule, key)]) {
                    case .refused: continue
                    case .ahead: passed.update { $0 += 1 }; continue
                    case .ask: break
                    }
                    store.decide([(rule, key)]) { decisions in
                        if decisions?.first?.allowed == true { passed.update { $0 += 1 } }
                        done.signal()
                    }
                    _ = done.wait(timeout: .now() + 5)
                }
                group.leave()
            }
        }
        #expect(group.wait(timeout: .now() + 60) == .success)
        return passed.get()
    }
}
