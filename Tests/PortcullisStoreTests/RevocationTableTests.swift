import Testing
@testable import PortcullisStore

/// The hash index behind every view: what is in it is found, what is not is not,
/// whatever the size, the kind or the bytes of the identifier.
struct RevocationTableTests {
    @Test func everyEntryIsFoundThroughGrowthAndNothingElseIs() {
        var table = RevocationTable()
        // Several doublings of the storage (16 slots → 32,768).
        for i in 0..<6000 {
            table.apply(.token(id: "jti-\(i)", until: 1000), maxCredentialLifetime: 10)
            if i % 2 == 0 { table.apply(.session(id: "sid-\(i)", until: 1000), maxCredentialLifetime: 10) }
            if i % 3 == 0 { table.apply(.subject("sub-\(i)", before: 500, until: 1000), maxCredentialLifetime: 10) }
        }
        #expect(table.count == 6000 + 3000 + 2000)
        for i in 0..<6000 {
            #expect(table.isRevoked(tokenID: "jti-\(i)", sessionID: nil, subject: "x", issuedAt: 1, now: 900))
            #expect(table.isRevoked(tokenID: nil, sessionID: "sid-\(i)", subject: "x", issuedAt: 1, now: 900) == (i % 2 == 0))
            #expect(table.isRevoked(tokenID: nil, sessionID: nil, subject: "sub-\(i)", issuedAt: 1, now: 900) == (i % 3 == 0))
            #expect(!table.isRevoked(tokenID: "jti-\(i + 6000)", sessionID: "sid-\(i + 6000)", subject: "sub-\(i + 6000)",
                                     issuedAt: nil, now: 900))
        }
    }

    @Test func theSameTextUnderAnotherKindIsAnotherEntry() {
        var table = RevocationTable()
        table.apply(.token(id: "abc", until: 1000), maxCredentialLifetime: 10)
        #expect(table.isRevoked(tokenID: "abc", sessionID: nil, subject: "u", issuedAt: 1, now: 900))
        #expect(!table.isRevoked(tokenID: nil, sessionID: "abc", subject: "abc", issuedAt: nil, now: 900))
        #expect(table.contains(.token(id: "abc", until: 0)))
        #expect(!table.contains(.session(id: "abc", until: 0)))
    }

    @Test func identifiersOfEveryLengthAndEncodingAreExact() {
        // Lengths around every branch of the hash (0–3, 4–7, 8–16, 17+ bytes), ids that
        // differ in one byte only, and non-ASCII text.
        let ids = (0..<40).map { String(repeating: "a", count: $0) } + (0..<40).map { String(repeating: "a", count: $0) + "b" }
            + ["é", "e\u{301}", "ü-ñ-東京", "😀", "a\u{0}b", "google:117512345678901234567"]
        var table = RevocationTable()
        for id in ids where !id.isEmpty { table.apply(.token(id: id, until: 1000), maxCredentialLifetime: 10) }
        for id in ids where !id.isEmpty {
            #expect(table.isRevoked(tokenID: id, sessionID: nil, subject: "u", issuedAt: 1, now: 900), "\(id.debugDescription)")
            #expect(!table.isRevoked(tokenID: id + "x", sessionID: nil, subject: "u", issuedAt: 1, now: 900))
        }
        #expect(!table.isRevoked(tokenID: "", sessionID: nil, subject: "u", issuedAt: 1, now: 900))
    }

    @Test func identifiersAreComparedAsBytes() {
        // NFC and NFD "é" are equal Swift Strings but two Redis keys; the table follows Redis.
        var table = RevocationTable()
        table.apply(.token(id: "caf\u{E9}", until: 1000), maxCredentialLifetime: 10)
        #expect(table.isRevoked(tokenID: "caf\u{E9}", sessionID: nil, subject: "u", issuedAt: 1, now: 900))
        #expect(!table.isRevoked(tokenID: "cafe\u{301}", sessionID: nil, subject: "u", issuedAt: 1, now: 900))
    }

    @Test func entriesOnlyWidenAndExpireAtTheirUntil() {
        var table = RevocationTable()
        table.apply(.token(id: "t", until: 1000), maxCredentialLifetime: 10)
        table.apply(.token(id: "t", until: 500), maxCredentialLifetime: 10)
        #expect(table.count == 1)
        #expect(table.isRevoked(tokenID: "t", sessionID: nil, subject: "u", issuedAt: 1, now: 999))
        #expect(!table.isRevoked(tokenID: "t", sessionID: nil, subject: "u", issuedAt: 1, now: 1000))
        table.apply(.subject("s", before: 100, until: 1000), maxCredentialLifetime: 10)
        table.apply(.subject("s", before: 200, until: 800), maxCredentialLifetime: 10)
        #expect(table.revocations(subject: "s", now: 900) == [.subject("s", before: 200, until: 1000)])
        #expect(table.isRevoked(tokenID: nil, sessionID: nil, subject: "s", issuedAt: 199, now: 900))
        #expect(!table.isRevoked(tokenID: nil, sessionID: nil, subject: "s", issuedAt: 200, now: 900))
    }

    @Test func pruneKeepsTheLiveEntriesOnly() {
        var table = RevocationTable()
        for i in 0..<1000 { table.apply(.token(id: "t\(i)", until: i % 2 == 0 ? 100 : 2000), maxCredentialLifetime: 10) }
        table.prune(now: 100)
        #expect(table.count == 500)
        for i in 0..<1000 {
            #expect(table.isRevoked(tokenID: "t\(i)", sessionID: nil, subject: "u", issuedAt: 1, now: 50) == (i % 2 == 1))
        }
        table.prune(now: 3000)
        #expect(table.count == 0)
        #expect(!table.isRevoked(tokenID: "t1", sessionID: nil, subject: "u", issuedAt: 1, now: 50))
        table.apply(.session(id: "again", until: 5000), maxCredentialLifetime: 10)
        #expect(table.isRevoked(tokenID: nil, sessionID: "again", subject: "u", issuedAt: 1, now: 3000))
    }

    @Test func aCopyIsNotChangedByTheOriginal() {
        var original = RevocationTable()
        original.apply(.token(id: "a", until: 1000), maxCredentialLifetime: 10)
        let snapshot = original
        original.apply(.token(id: "b", until: 1000), maxCredentialLifetime: 10)
        original.apply(.token(id: "a", until: 5000), maxCredentialLifetime: 10)
        original.prune(now: 2000)
        #expect(snapshot.count == 1)
        #expect(snapshot.isRevoked(tokenID: "a", sessionID: nil, subject: "u", issuedAt: 1, now: 900))
        #expect(!snapshot.isRevoked(tokenID: "b", sessionID: nil, subject: "u", issuedAt: 1, now: 900))
        #expect(!snapshot.isRevoked(tokenID: "a", sessionID: nil, subject: "u", issuedAt: 1, now: 1000))
        #expect(original.count == 1)
        #expect(original.isRevoked(tokenID: "a", sessionID: nil, subject: "u", issuedAt: 1, now: 4000))
    }

    @Test func theHashDependsOnSeedKindAndEveryByte() {
        let h = IdentifierHash(seed: 42)
        #expect(h.hash("abc", kind: 1) != h.hash("abc", kind: 2))
        #expect(h.hash("abc", kind: 1) != IdentifierHash(seed: 43).hash("abc", kind: 1))
        #expect(h.hash("abc", kind: 1) == h.hash(String("xabc".dropFirst()), kind: 1))
        let base = Array("jti-1234-Hk6EP6Dh8Y93mRNtsDB1Q-and-some-more".utf8)
        var seen = Set<UInt64>()
        for n in 0...base.count {
            for flip in 0..<n {
                var bytes = Array(base[..<n])
                bytes[flip] ^= 0x01
                seen.insert(bytes.withUnsafeBytes { h.hash($0, kind: 1) })
            }
            seen.insert(Array(base[..<n]).withUnsafeBytes { h.hash($0, kind: 1) })
        }
        #expect(seen.count == (0...base.count).reduce(0) { $0 + $1 + 1 })
    }
}
