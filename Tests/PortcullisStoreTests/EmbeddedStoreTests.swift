import Testing
import PortcullisTestSupport
import PortcullisIO
@testable import PortcullisStore

/// The default store: same behaviour as the Redis store, minus Redis.
@Suite(.serialized) struct EmbeddedStoreTests {
    let loops = [EventLoop(index: 0), EventLoop(index: 1)]

    @Test func everyKindOfRevocationReachesEveryLoop() throws {
        let store = EmbeddedRevocationStore(loops: loops)
        store.start()
        defer { store.shutdown() }
        let now = nowSeconds()
        #expect(try revokeAndWait(store, .token(id: "jti-1", until: now + 60))?.get() != nil)
        #expect(try revokeAndWait(store, .session(id: "dev-9", until: now + 60))?.get() != nil)
        #expect(try revokeAndWait(store, .subject("google:42", before: now - 10, until: nil))?.get() != nil)
        #expect(waitUntil(2) { loops.allSatisfy { entryCount(store, $0) == 3 } })
        for loop in loops {
            #expect(verdict(store, loop, token: "jti-1") == .revoked)
            #expect(verdict(store, loop, token: "jti-2") == .allowed)
            #expect(verdict(store, loop, session: "dev-9") == .revoked)
            #expect(verdict(store, loop, subject: "google:42", issuedAt: now - 100) == .revoked)
            #expect(verdict(store, loop, subject: "google:42", issuedAt: now - 5) == .allowed)
            #expect(verdict(store, loop, subject: "google:42", issuedAt: nil) == .revoked)
            #expect(verdict(store, loop, subject: "google:43", issuedAt: now - 100) == .allowed)
        }
        #expect(store.health == .ok)
        let listed = Locked<[Revocation]?>(nil)
        store.revocations(subject: "google:42") { r in listed.update { $0 = try? r.get() } }
        #expect(waitUntil(2) { listed.get() != nil })
        #expect(listed.get() == [.subject("google:42", before: now - 10, until: now - 10 + 30 * 24 * 3600)])
    }

    @Test func expiredEntriesStopApplyingAndArePruned() throws {
        let store = EmbeddedRevocationStore(loops: loops, pruneInterval: 0.5)
        store.start()
        defer { store.shutdown() }
        let now = nowSeconds()
        revokeAndWait(store, .token(id: "short", until: now + 1))
        #expect(verdict(store, loops[0], token: "short") == .revoked)
        #expect(waitUntil(4) { verdict(store, loops[0], token: "short") == .allowed })
        #expect(waitUntil(3) { loops.allSatisfy { entryCount(store, $0) == 0 } })
    }

    @Test func emptyIdsAreRefused() {
        let store = EmbeddedRevocationStore(loops: loops)
        guard case .failure(.invalid(let why))? = revokeAndWait(store, .token(id: "", until: nowSeconds() + 60)) else {
            Issue.record("an empty jti must be refused"); return
        }
        #expect(why == "empty jti")
    }

    @Test func aLaterSignOutEverywhereNeverWeakensAnEarlierOne() {
        var table = RevocationTable()
        table.apply(.subject("s", before: 200, until: 1000), maxCredentialLifetime: 10)
        table.apply(.subject("s", before: 100, until: 500), maxCredentialLifetime: 10)
        #expect(table.isRevoked(tokenID: nil, sessionID: nil, subject: "s", issuedAt: 150, now: 900))
    }

    @Test func schemaMessagesRoundTrip() {
        let cases: [Revocation] = [.token(id: "a b", until: 5), .session(id: "d", until: 6), .subject("google:1 x", before: 3, until: 9)]
        for r in cases {
            #expect(RedisRevocationSchema.parse(message: RedisRevocationSchema.message(for: r)) == .revocation(r))
        }
        #expect(RedisRevocationSchema.key(for: .token(id: "x", until: 1)) == "portcullis:revoked:jti:x")
        #expect(RedisRevocationSchema.revocation(key: "portcullis:revoked:subject:u:1", value: "77", expireTime: 99)
                == .subject("u:1", before: 77, until: 99))
    }
}
