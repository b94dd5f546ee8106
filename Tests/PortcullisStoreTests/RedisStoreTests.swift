import Foundation
import Testing
import PortcullisTestSupport
import PortcullisIO
import PortcullisRedis
@testable import PortcullisStore

/// The Redis store against a real redis-server on loopback.
@Suite(.serialized) struct RedisStoreTests {
    @Test func aRevocationOnInstanceAIsEnforcedOnInstanceB() throws {
        let server = try RedisProcess()
        let loopsA = [EventLoop(index: 0), EventLoop(index: 1)]
        let loopsB = [EventLoop(index: 0), EventLoop(index: 1)]
        let a = RedisRevocationStore(configuration: redisConfiguration(server), loops: loopsA)
        let b = RedisRevocationStore(configuration: redisConfiguration(server), loops: loopsB)
        a.start(); b.start()
        defer { a.shutdown(); b.shutdown() }
        #expect(waitUntil(5) { a.health == .ok && b.health == .ok })

        var delays: [Double] = []
        for i in 0..<5 {
            let id = "jti-\(i)"
            let start = Date()
            a.revoke(.token(id: id, until: nowSeconds() + 60)) { _ in }
            // Polls B's views on their own queues every 1 ms.
            let end = start.addingTimeInterval(2)
            while Date() < end && !loopsB.allSatisfy({ verdict(b, $0, token: id) == .revoked }) { usleep(1000) }
            delays.append(Date().timeIntervalSince(start) * 1000)
        }
        print("revocation A → B enforced after (ms): \(delays.map { String(format: "%.2f", $0) }.joined(separator: ", "))")
        #expect(delays.allSatisfy { $0 < 100 }, "delays \(delays)")
        #expect(loopsB.allSatisfy { verdict(b, $0, token: "jti-0") == .revoked })
        #expect(verdict(b, loopsB[0], token: "other") == .allowed)

        // Sign out everywhere, then a session, also across instances.
        let now = nowSeconds()
        revokeAndWait(a, .subject("google:7", before: now, until: now + 60))
        revokeAndWait(a, .session(id: "dev-1", until: now + 60))
        #expect(waitUntil(1) { verdict(b, loopsB[1], subject: "google:7", issuedAt: now - 1) == .revoked })
        #expect(verdict(b, loopsB[1], subject: "google:7", issuedAt: now + 1) == .allowed)
        #expect(waitUntil(1) { verdict(b, loopsB[1], session: "dev-1") == .revoked })
        #expect(server.cli(["GET", "portcullis:revoked:subject:google:7"]) == "\(now)")
    }

    @Test func aStartingInstanceLoadsExistingRevocations() throws {
        let server = try RedisProcess()
        let until = nowSeconds() + 60
        let script = "for i=1,2500 do redis.call('SET', 'portcullis:revoked:jti:pre-'..i, '1', 'EXAT', ARGV[1]) end"
        server.cli(["EVAL", script, "0", "\(until)"])
        let loops = [EventLoop(index: 0)]
        let store = RedisRevocationStore(configuration: redisConfiguration(server), loops: loops)
        store.start()
        defer { store.shutdown() }
        #expect(waitUntil(5) { store.health == .ok })
        #expect(waitUntil(2) { entryCount(store, loops[0]) == 2500 })
        #expect(verdict(store, loops[0], token: "pre-1234") == .revoked)
    }

    @Test func anAppCanRevokeWithRedisCli() throws {
        let server = try RedisProcess()
        let loops = [EventLoop(index: 0)]
        let store = RedisRevocationStore(configuration: redisConfiguration(server), loops: loops)
        store.start()
        defer { store.shutdown() }
        #expect(waitUntil(5) { store.health == .ok })
        let until = nowSeconds() + 60
        // The documented convention: SET the key, PUBLISH the message.
        server.cli(["SET", "portcullis:revoked:session:app-dev", "1", "EXAT", "\(until)"])
        server.cli(["PUBLISH", "portcullis:revocations", "session \(until) app-dev"])
        #expect(waitUntil(1) { verdict(store, loops[0], session: "app-dev") == .revoked })
        // With keyspace notifications on, a plain SET is enough.
        server.cli(["CONFIG", "SET", "notify-keyspace-events", "K$"])
        server.cli(["SET", "portcullis:revoked:jti:plain-set", "1", "EXAT", "\(until)"])
        #expect(waitUntil(1) { verdict(store, loops[0], token: "plain-set") == .revoked })
    }

    @Test func aRevokedJtiStaysUntilItsExpiryThenLeavesRedis() throws {
        let server = try RedisProcess()
        let loops = [EventLoop(index: 0)]
        let store = RedisRevocationStore(configuration: redisConfiguration(server), loops: loops, pruneInterval: 0.5)
        store.start()
        defer { store.shutdown() }
        #expect(waitUntil(5) { store.health == .ok })
        let until = nowSeconds() + 2
        #expect(revokeAndWait(store, .token(id: "short-lived", until: until)).map { (try? $0.get()) != nil } == true)
        #expect(server.cli(["EXISTS", "portcullis:revoked:jti:short-lived"]) == "1")
        #expect(server.cli(["EXPIRETIME", "portcullis:revoked:jti:short-lived"]) == "\(until)")
        #expect(verdict(store, loops[0], token: "short-lived") == .revoked)
        #expect(waitUntil(4) { server.cli(["EXISTS", "portcullis:revoked:jti:short-lived"]) == "0" })
        #expect(nowSeconds() >= until)
        #expect(verdict(store, loops[0], token: "short-lived") == .allowed)
        #expect(waitUntil(2) { entryCount(store, loops[0]) == 0 })
    }

    @Test func whenRedisDiesViewsServeForMaxStalenessThenFollowThePolicyAndRecover() throws {
        let server = try RedisProcess()
        let loops = [EventLoop(index: 0), EventLoop(index: 1)]
        let events = Locked<[StoreEvent]>([StoreEvent]())
        let deny = RedisRevocationStore(configuration: redisConfiguration(server), loops: loops,
                                        policy: RevocationPolicy(maxStaleness: 1.5, denyWhenUnavailable: true),
                                        onEvent: { e in events.update { $0.append(e) } })
        let allowLoops = [EventLoop(index: 0)]
        let allow = RedisRevocationStore(configuration: redisConfiguration(server), loops: allowLoops,
                                         policy: RevocationPolicy(maxStaleness: 1.5, denyWhenUnavailable: false))
        deny.start(); allow.start()
        defer { deny.shutdown(); allow.shutdown() }
        #expect(waitUntil(5) { deny.health == .ok && allow.health == .ok })
        revokeAndWait(deny, .token(id: "known", until: nowSeconds() + 120))
        #expect(waitUntil(1) { verdict(allow, allowLoops[0], token: "known") == .revoked })

        server.stop()
        let killed = Date()
        #expect(waitUntil(2) { if case .degraded = deny.health { return true } else { return false } })
        // Within maxStaleness: the last view answers.
        #expect(verdict(deny, loops[1], token: "known") == .revoked)
        #expect(verdict(deny, loops[1], token: "unknown") == .allowed)
        // A revocation during the outage is enforced here at once and reported as not shared yet.
        guard case .failure(.unavailable)? = revokeAndWait(deny, .token(id: "during-outage", until: nowSeconds() + 120)) else {
            Issue.record("revoke during an outage must report .unavailable"); return
        }
        #expect(waitUntil(1) { verdict(deny, loops[0], token: "during-outage") == .revoked })

        // Past maxStaleness: deny → unavailable, allow → allowed; known revocations still hold.
        #expect(waitUntil(4) { verdict(deny, loops[0], token: "unknown") == .unavailable })
        #expect(Date().timeIntervalSince(killed) >= 1.0)
        #expect(verdict(deny, loops[0], token: "known") == .revoked)
        #expect(verdict(allow, allowLoops[0], token: "unknown") == .allowed)
        #expect(verdict(allow, allowLoops[0], token: "known") == .revoked)
        #expect(deny.health == .unavailable)

        // Redis comes back (empty: no persistence); the same store objects recover.
        try server.restart()
        #expect(waitUntil(5) { deny.health == .ok && allow.health == .ok })
        #expect(verdict(deny, loops[0], token: "unknown") == .allowed)
        // The revocation queued during the outage reached Redis and the other instance.
        #expect(waitUntil(2) { server.cli(["EXISTS", "portcullis:revoked:jti:during-outage"]) == "1" })
        #expect(waitUntil(2) { verdict(allow, allowLoops[0], token: "during-outage") == .revoked })
        let seen = events.get()
        #expect(seen.first.map { if case .synchronized = $0 { return true } else { return false } } == true)
        #expect(seen.contains { if case .degraded = $0 { return true } else { return false } })
        #expect(seen.contains(.stale))
        #expect(seen.filter { if case .synchronized = $0 { return true } else { return false } }.count == 2)
    }
}

/// #36: revocations synced from an ordered log instead of by scanning.
@Suite(.serialized) struct RevocationLogTests {
    /// `SCAN` calls the server has answered so far (`INFO commandstats`).
    static func scans(_ server: RedisProcess) -> Int {
        let stats = server.cli(["INFO", "commandstats"])
        guard let line = stats.split(whereSeparator: \.isNewline).first(where: { $0.hasPrefix("cmdstat_scan:") }),
              let calls = line.split(separator: "=").dropFirst().first?.split(separator: ",").first else { return 0 }
        return Int(calls) ?? 0
    }

    /// A change logged without its announcement (an app writing the documented log, or an
    /// announcement lost on the way) is applied from the log, in order, without a scan.
    @Test func aLoggedChangeWithoutItsAnnouncementIsAppliedWithoutScanning() throws {
        let server = try RedisProcess()
        let loops = [EventLoop(index: 0), EventLoop(index: 1)]
        let store = RedisRevocationStore(configuration: redisConfiguration(server), loops: loops, catchUpInterval: 0.2)
        store.start()
        defer { store.shutdown() }
        #expect(waitUntil(5) { store.health == .ok })
        let scansBefore = Self.scans(server)
        let until = nowSeconds() + 60
        let key = RedisRevocationSchema.key(for: .token("logged-only"))
        server.cli(["SET", key, "1", "EXAT", "\(until)"])
        server.cli(["XADD", RedisRevocationSchema.logKey(forKey: key), "*", "m", "jti \(until) logged-only"])
        #expect(waitUntil(3) { loops.allSatisfy { verdict(store, $0, token: "logged-only") == .revoked } })
        server.cli(["DEL", key])
        server.cli(["XADD", RedisRevocationSchema.logKey(forKey: key), "*", "m", "unrevoke jti logged-only"])
        #expect(waitUntil(3) { loops.allSatisfy { verdict(store, $0, token: "logged-only") == .allowed } })
        #expect(Self.scans(server) == scansBefore, "followed the log, never scanned")
    }

    /// The gateway logs its own changes: a revocation and an undo through the store are one
    /// entry each, in the stream of the key's group, in order.
    @Test func theStoreLogsEveryChangeInTheStreamOfItsKey() throws {
        let server = try RedisProcess()
        let store = RedisRevocationStore(configuration: redisConfiguration(server), loops: [EventLoop(index: 0)])
        store.start()
        defer { store.shutdown() }
        #expect(waitUntil(5) { store.health == .ok })
        let until = nowSeconds() + 60
        #expect(revokeAndWait(store, .token(id: "kept-in-order", until: until)) != nil)
        let done = DispatchSemaphore(value: 0)
        store.undo(.token("kept-in-order")) { _ in done.signal() }
        #expect(done.wait(timeout: .now() + 5) == .success)
        let stream = RedisRevocationSchema.logKey(forKey: RedisRevocationSchema.key(for: .token("kept-in-order")))
        let entries = server.cli(["XRANGE", stream, "-", "+"])
        #expect(entries.contains("jti \(until) kept-in-order") && entries.contains("unrevoke jti kept-in-order"), "\(entries)")
        let revoked = try #require(entries.range(of: "jti \(until) kept-in-order"))
        let undone = try #require(entries.range(of: "unrevoke jti kept-in-order"))
        #expect(revoked.lowerBound < undone.lowerBound)
        #expect(server.cli(["XLEN", stream]) == "2")
    }

    /// Instance B's subscription drops while A revokes: when B resubscribes it reads the log
    /// after its cursors and holds all of them, without scanning.
    @Test func aDroppedSubscriptionCatchesUpFromItsCursors() throws {
        let server = try RedisProcess()
        let loopsA = [EventLoop(index: 0)], loopsB = [EventLoop(index: 0), EventLoop(index: 1)]
        let a = RedisRevocationStore(configuration: redisConfiguration(server), loops: loopsA)
        // B polls the log rarely: what it holds after the drop comes from the catch-up on resubscribing.
        let b = RedisRevocationStore(configuration: redisConfiguration(server), loops: loopsB, catchUpInterval: 3600)
        a.start(); b.start()
        defer { a.shutdown(); b.shutdown() }
        #expect(waitUntil(5) { a.health == .ok && b.health == .ok })
        let scansBefore = Self.scans(server)
        // Every subscriber is cut off; A's revocations are published while nobody listens.
        _ = server.cli(["CLIENT", "KILL", "TYPE", "pubsub"])
        let until = nowSeconds() + 60
        for i in 0..<50 { _ = revokeAndWait(a, .token(id: "missed-\(i)", until: until)) }
        #expect(waitUntil(5) { (0..<50).allSatisfy { i in loopsB.allSatisfy { verdict(b, $0, token: "missed-\(i)") == .revoked } } })
        #expect(waitUntil(5) { b.health == .ok })
        #expect(Self.scans(server) == scansBefore, "caught up from the log, never scanned")
    }

    /// A stream trimmed past B's cursor while B was away: B cannot know what it missed, so it
    /// reads every key again (and says so).
    @Test func aStreamTrimmedPastTheCursorReadsEverythingAgain() throws {
        let server = try RedisProcess()
        let loops = [EventLoop(index: 0)]
        let events = Locked<[StoreEvent]>([])
        let store = RedisRevocationStore(configuration: redisConfiguration(server), loops: loops, catchUpInterval: 3600) { event in
            events.update { $0.append(event) }
        }
        store.start()
        defer { store.shutdown() }
        #expect(waitUntil(5) { store.health == .ok })
        let scansBefore = Self.scans(server)
        // Written and logged without an announcement, then trimmed away before B reads it.
        let until = nowSeconds() + 60
        let key = RedisRevocationSchema.key(for: .token("trimmed"))
        let stream = RedisRevocationSchema.logKey(forKey: key)
        server.cli(["SET", key, "1", "EXAT", "\(until)"])
        server.cli(["XADD", stream, "*", "m", "jti \(until) trimmed"])
        server.cli(["XTRIM", stream, "MAXLEN", "0"])
        #expect(verdict(store, loops[0], token: "trimmed") == .allowed)
        _ = server.cli(["CLIENT", "KILL", "TYPE", "pubsub"])
        #expect(waitUntil(5) { verdict(store, loops[0], token: "trimmed") == .revoked })
        #expect(events.get().contains { if case .logGap = $0 { return true } else { return false } }, "\(events.get())")
        #expect(Self.scans(server) > scansBefore)
    }
}
