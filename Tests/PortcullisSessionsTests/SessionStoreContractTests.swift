import Foundation
import Synchronization
import Testing
import PortcullisIO
import PortcullisRedis
import PortcullisTestSupport
@testable import PortcullisSessions

/// What every session store promises, run against the embedded store and the Redis store (a
/// real redis-server): the same answers for the same histories, one rule for refreshes
/// (`Rotation.decide`), racing refreshes of one token converging on one rotation.
@Suite(.serialized) struct SessionStoreContractTests {
    /// A store and what keeps it alive (the redis-server).
    final class Subject: @unchecked Sendable {
        let store: any SessionStore
        let keep: AnyObject?
        init(_ store: any SessionStore, keep: AnyObject? = nil) { self.store = store; self.keep = keep }
    }

    static func make(_ kind: String) throws -> Subject {
        if kind == "embedded" { return Subject(try EmbeddedSessionStore(directory: nil)) }
        let server = try RedisProcess()
        let configuration = RedisConfiguration(topology: .standalone(try SocketAddress(parsing: "127.0.0.1:\(server.port)")),
                                               commandTimeout: 2, connectTimeout: 1,
                                               backoff: ReconnectBackoff(initial: 0.02, maximum: 0.2))
        let client = RedisClient(configuration: configuration, loop: EventLoop(index: 0))
        client.start()
        return Subject(RedisSessionStore(client: client), keep: server)
    }

    static let now: Int64 = 1_800_000_000

    static func record(_ id: String, user: String = "google:1", at now: Int64 = now) -> SessionRecord {
        SessionRecord(id: id, user: user, provider: "google", device: "Phone", createdAt: now, lastUsedAt: now,
                      expiresAt: now + 90 * 86_400, counter: 1, rotatedAt: now, accessToken: "access-1",
                      accessExpiresAt: now + 900, claims: "", subject: "1", idToken: "google:\(id)")
    }

    /// Runs one asynchronous store call and waits for its answer (bounded).
    static func wait<T: Sendable>(_ call: (@escaping @Sendable (T) -> Void) -> Void) throws -> T {
        let box = Mutex<T?>(nil)
        let done = DispatchSemaphore(value: 0)
        call { value in box.withLock { $0 = value }; done.signal() }
        guard done.wait(timeout: .now() + 10) == .success, let value = box.withLock({ $0 }) else {
            throw TestFailure("the store did not answer within 10 s")
        }
        return value
    }

    /// Creates `record` (cap 5) and waits for the store's acknowledgement.
    static func create(_ store: any SessionStore, _ record: SessionRecord) throws {
        let ok: Bool = try wait { done in store.create(record, maxPerUser: 5) { ok, _ in done(ok) } }
        #expect(ok, "created \(record.id)")
    }

    static func next(_ now: Int64) -> @Sendable (SessionRecord) -> SessionRecord {
        { current in
            var next = current
            next.counter = current.counter + 1
            next.lastUsedAt = now
            next.rotatedAt = now
            next.accessToken = "access-\(next.counter)"
            next.accessExpiresAt = now + 900
            return next
        }
    }

    static func rotate(_ store: any SessionStore, _ id: String, counter: UInt64, at now: Int64,
                       grace: Int64 = 10, idle: Int64 = 30 * 86_400) throws -> RotateOutcome {
        try wait { done in
            store.rotate(id: id, counter: counter, now: now, grace: grace, idleTimeout: idle, known: nil, next: next(now), completion: done)
        }
    }

    @Test(arguments: ["embedded", "redis"])
    func createFindListAndEnd(_ kind: String) throws {
        let subject = try Self.make(kind)
        let store = subject.store
        let (ok, evicted): (Bool, [SessionRecord]) = try Self.wait { done in store.create(Self.record("s1"), maxPerUser: 5) { done(($0, $1)) } }
        #expect(ok && evicted.isEmpty)
        #expect(try Self.wait { store.record(id: "s1", completion: $0) } == .found(Self.record("s1")))
        #expect(try Self.wait { store.record(id: "nope", completion: $0) } == .missing)
        #expect(try Self.wait { store.list(user: "google:1", now: Self.now, completion: $0) }.map(\.id) == ["s1"])
        #expect(try Self.wait { store.end(id: "s1", user: "someone-else", completion: $0) } == .notFound, "another user's is unknown")
        #expect(try Self.wait { store.end(id: "s1", user: "google:1", completion: $0) } == .ended(Self.record("s1")))
        #expect(try Self.wait { store.record(id: "s1", completion: $0) } == .missing)
        #expect(try Self.wait { store.end(id: "s1", user: nil, completion: $0) } == .notFound)
    }

    @Test(arguments: ["embedded", "redis"])
    func rotationFollowsTheOneRule(_ kind: String) throws {
        let subject = try Self.make(kind)  // keeps the redis-server running
        let store = subject.store
        defer { withExtendedLifetime(subject) {} }
        try Self.create(store, Self.record("r1"))
        guard case .rotated(let second) = try Self.rotate(store, "r1", counter: 1, at: Self.now + 5) else {
            Issue.record("the current token rotates"); return
        }
        #expect(second.counter == 2 && second.accessToken == "access-2")
        // The previous token within the grace: the current pair, nothing changes.
        #expect(try Self.rotate(store, "r1", counter: 1, at: Self.now + 8) == .current(second))
        #expect(try Self.wait { store.record(id: "r1", completion: $0) } == .found(second))
        // Past the grace: a reuse, and the session is gone.
        guard case .reused = try Self.rotate(store, "r1", counter: 1, at: Self.now + 30) else { Issue.record("reuse"); return }
        #expect(try Self.wait { store.record(id: "r1", completion: $0) } == .missing)
        #expect(try Self.rotate(store, "r1", counter: 2, at: Self.now + 31) == .unknown)
        #expect(try Self.rotate(store, "never", counter: 1, at: Self.now) == .unknown)
        // Idle past the timeout, or past the lifetime: expired, and gone.
        try Self.create(store, Self.record("i1"))
        #expect(try Self.rotate(store, "i1", counter: 1, at: Self.now + 100, idle: 50) == .expired)
        #expect(try Self.wait { store.record(id: "i1", completion: $0) } == .missing)
        try Self.create(store, Self.record("l1"))
        #expect(try Self.rotate(store, "l1", counter: 1, at: Self.now + 90 * 86_400) == .expired)
    }

    @Test(arguments: ["embedded", "redis"])
    func racingRefreshesOfOneTokenConvergeOnOneRotation(_ kind: String) throws {
        let subject = try Self.make(kind)  // keeps the redis-server running
        let store = subject.store
        defer { withExtendedLifetime(subject) {} }
        try Self.create(store, Self.record("c1"))
        let outcomes = Mutex<[RotateOutcome]>([])
        let group = DispatchGroup()
        for _ in 0..<20 {
            group.enter()
            DispatchQueue.global().async {
                store.rotate(id: "c1", counter: 1, now: Self.now + 2, grace: 10, idleTimeout: 86_400, known: nil,
                             next: Self.next(Self.now + 2)) { outcome in
                    outcomes.withLock { $0.append(outcome) }
                    group.leave()
                }
            }
        }
        #expect(group.wait(timeout: .now() + 20) == .success)
        let all = outcomes.withLock { $0 }
        let rotated = all.compactMap { if case .rotated(let r) = $0 { return r }; return nil }
        #expect(rotated.count == 1, "exactly one rotation: \(all)")
        let current = all.compactMap { if case .current(let r) = $0 { return r }; return nil }
        #expect(current.count == 19 && current.allSatisfy { $0.accessToken == rotated.first?.accessToken && $0.counter == 2 },
                "every other one gets the winner's pair: \(all)")
    }

    @Test(arguments: ["embedded", "redis"])
    func pastMaxPerUserTheLeastRecentlyUsedEnds(_ kind: String) throws {
        let subject = try Self.make(kind)  // keeps the redis-server running
        let store = subject.store
        defer { withExtendedLifetime(subject) {} }
        for (i, id) in ["m1", "m2", "m3"].enumerated() {
            var record = Self.record(id, at: Self.now + Int64(i))
            record.lastUsedAt = Self.now + Int64(i)
            let (ok, evicted): (Bool, [SessionRecord]) = try Self.wait { done in store.create(record, maxPerUser: 2) { done(($0, $1)) } }
            #expect(ok)
            #expect(evicted.map(\.id) == (i == 2 ? ["m1"] : []), "\(id): \(evicted.map(\.id))")
        }
        #expect(try Self.wait { store.list(user: "google:1", now: Self.now, completion: $0) }.map(\.id).sorted() == ["m2", "m3"])
    }

    @Test func theRuleItself() {
        let r = Self.record("x")  // counter 1, rotated and used at `now`
        #expect(Rotation.decide(r, presented: 1, now: Self.now, grace: 10, idleTimeout: 100) == .rotate)
        #expect(Rotation.decide(r, presented: 7, now: Self.now, grace: 10, idleTimeout: 100) == .rotate, "ahead: a rotation lost in a crash")
        var two = r
        two.counter = 2
        #expect(Rotation.decide(two, presented: 1, now: Self.now + 10, grace: 10, idleTimeout: 100) == .current)
        #expect(Rotation.decide(two, presented: 1, now: Self.now + 11, grace: 10, idleTimeout: 100) == .reused)
        #expect(Rotation.decide(two, presented: 0, now: Self.now, grace: 10, idleTimeout: 100) == .reused)
        #expect(Rotation.decide(r, presented: 1, now: Self.now + 101, grace: 10, idleTimeout: 100) == .expired)
        #expect(Rotation.decide(r, presented: 1, now: r.expiresAt, grace: 10, idleTimeout: .max) == .expired)
    }
}
