#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The revocation entries themselves: one open-addressed hash index over every
/// jti, session and subject entry, keyed by a 64-bit `IdentifierHash` of
/// (kind, id). A value type: each view holds its own copy; a snapshot given to
/// several views shares its `Storage` until one of them changes it (copy-on-write).
///
/// Layout, for the hot path (`isRevoked`: up to three lookups per request, nearly
/// always misses):
/// - slots: a power-of-two array of 8-byte slots, at most half full, linear
///   probing. A slot holds the upper 32 bits of the entry's hash (its tag) and its
///   index in the entries plus one; 0 is empty. A miss reads consecutive slots of
///   one cache line and stops at the first empty one without touching a string.
/// - entries: dense. A lookup confirms a tag match on the full 64-bit hash, the
///   kind, and the full identifier, so a hash collision never changes an answer
///   (neither a false "revoked" nor a false "allowed"). Identifiers are their
///   UTF-8 bytes: two canonically equivalent but differently encoded ids (NFC and
///   NFD "é") are two identifiers, as they are two keys in Redis. (The former
///   `[String: …]` dictionaries matched them; no issuer we know of sends both.)
///
/// Both live in manually allocated memory behind `let` pointers of one final
/// class, so a lookup is loads and compares: no array copy (retain/release), no
/// runtime exclusivity check, no generic value witness.
///
/// Entries are only added or widened in place; pruning rebuilds the storage
/// (every `pruneInterval`, off the request path).
///
/// Measured (Benchmarks/StoreBenchmarks/Profile/callgrind-check.sh, instructions
/// per `RevocationView.check` against 10,000 entries; a range where the per-process
/// seeds move the probe lengths):
///
/// | layout | allowed (jti + session + subject misses) | revoked jti |
/// |---|---:|---:|
/// | three `[String: …]` dictionaries | 3,140–3,370 | 885 |
/// | this index | 424–460 | 378 |
///
/// The dictionaries spent their time in SipHash (three `Hasher`s, ~1,000) and in
/// `String` comparisons (~1,200): `Dictionary` stores no hashes and compares the
/// key with every occupied bucket of a probe chain, at up to 75 % load.
struct RevocationTable: Sendable {
    enum Kind: UInt8, Sendable { case token = 1, session = 2, subject = 3 }

    struct Entry {
        var hash: UInt64
        var id: String
        var kind: Kind
        /// Epoch seconds after which the entry is useless.
        var until: Int64
        /// Subjects: credentials issued (iat) before this are revoked. 0 otherwise.
        var before: Int64
    }

    private var storage = Storage(slotCount: 0)

    var count: Int { storage.count }

    /// The hot path: no allocation, no lock. A subject cutoff revokes a credential
    /// without `iat`: it cannot prove it is newer.
    @inline(__always)
    /// Whether any subject ("sign out everywhere") entry is held: only then are a user's
    /// other names worth building.
    var hasSubjects: Bool { storage.hasSubjects }

    func isRevoked(tokenID: String?, sessionID: String?, subject: String, issuedAt: Int64?, now: Int64) -> Bool {
        storage.isRevoked(tokenID: tokenID, sessionID: sessionID, subject: subject, issuedAt: issuedAt, now: now)
    }

    /// Revocations that name `subject` (token and session entries carry no subject).
    func revocations(subject: String, now: Int64) -> [Revocation] {
        guard let e = storage.find(subject, kind: .subject), e.pointee.until > now else { return [] }
        return [.subject(subject, before: e.pointee.before, until: e.pointee.until)]
    }

    func contains(_ revocation: Revocation) -> Bool {
        let (id, kind, _) = Self.key(revocation)
        return storage.find(id, kind: kind) != nil
    }

    /// Adds or widens an entry (later `until`, later `before` win: a revocation
    /// never gets weaker by being applied twice or out of order).
    /// False when the table already held it (as long and as wide): nothing changed.
    @discardableResult
    mutating func apply(_ revocation: Revocation, maxCredentialLifetime: Int64) -> Bool {
        let until = revocation.expiry(maxCredentialLifetime: maxCredentialLifetime)
        let (id, kind, before) = Self.key(revocation)
        if let e = storage.find(id, kind: kind), e.pointee.until >= until, e.pointee.before >= before { return false }
        if !isKnownUniquelyReferenced(&storage) || storage.isFull {
            storage = storage.copy(minimumCapacity: storage.count + 1, keeping: { _ in true })
        }
        storage.upsert(id, kind: kind, until: until, before: before)
        return true
    }

    /// Removes the entry `target` names (an undo); false when there was none. Rebuilds
    /// the storage (off the request path: undos are rare admin actions).
    @discardableResult
    mutating func remove(_ target: RevocationTarget) -> Bool {
        let (id, kind) = Self.key(target)
        guard storage.find(id, kind: kind) != nil else { return false }
        storage = storage.copy(minimumCapacity: 0, keeping: { !($0.kind == kind && Storage.sameBytes($0.id, id)) })
        return true
    }

    private static func key(_ target: RevocationTarget) -> (id: String, kind: Kind) {
        switch target {
        case .token(let t): return (t, .token)
        case .session(let s): return (s, .session)
        case .subject(let s): return (s, .subject)
        }
    }

    /// The live entries of this table that `other` lacks (or holds weaker), as revocations:
    /// what a snapshot read from a new master lost. Off the request path (a failover).
    func revocations(missingFrom other: RevocationTable, now: Int64) -> [Revocation] {
        var missing: [Revocation] = []
        for i in 0..<storage.count {
            let e = storage.entries[i]
            guard e.until > now else { continue }
            if let o = other.storage.find(e.id, kind: e.kind), o.pointee.until >= e.until, o.pointee.before >= e.before { continue }
            switch e.kind {
            case .token: missing.append(.token(id: e.id, until: e.until))
            case .session: missing.append(.session(id: e.id, until: e.until))
            case .subject: missing.append(.subject(e.id, before: e.before, until: e.until))
            }
        }
        return missing
    }

    /// Drops entries whose `until` has passed.
    mutating func prune(now: Int64) {
        guard storage.containsEntry(where: { $0.until <= now }) else { return }
        storage = storage.copy(minimumCapacity: 0, keeping: { $0.until > now })
    }

    private static func key(_ revocation: Revocation) -> (id: String, kind: Kind, before: Int64) {
        let (id, kind) = key(revocation.target)
        if case .subject(_, let before, _) = revocation { return (id, kind, before) }
        return (id, kind, 0)
    }
}

extension RevocationTable {
    /// The memory behind a table. Mutated only through a table that holds the one
    /// reference to it (copy-on-write), so a storage shared by several views, and
    /// read on their loops, never changes.
    final class Storage: @unchecked Sendable {
        // @unchecked Sendable: once shared it is immutable (see type comment); the
        // counters below change only while uniquely referenced on one queue.
        let hasher = IdentifierHash.process
        /// A power of two (16 at least), or 0 for the empty table.
        let slotCount: Int
        let slots: UnsafeMutablePointer<UInt64>
        /// At most half the slots: linear probing stays short.
        let capacity: Int
        let entries: UnsafeMutablePointer<Entry>
        // @exclusivity(unchecked): see the type comment; the runtime access checks
        // would otherwise run on every lookup.
        @exclusivity(unchecked) private(set) var count = 0
        @exclusivity(unchecked) private var tokenCount = 0
        @exclusivity(unchecked) private var sessionCount = 0
        @exclusivity(unchecked) private var subjectCount = 0
        var hasSubjects: Bool { subjectCount > 0 }

        init(slotCount: Int) {
            self.slotCount = slotCount
            capacity = slotCount / 2
            slots = .allocate(capacity: max(slotCount, 1))
            slots.initialize(repeating: 0, count: max(slotCount, 1))
            entries = .allocate(capacity: max(capacity, 1))
        }

        deinit {
            entries.deinitialize(count: count)
            entries.deallocate()
            slots.deallocate()
        }

        var isFull: Bool { count >= capacity }

        @inline(__always)
        func isRevoked(tokenID: String?, sessionID: String?, subject: String, issuedAt: Int64?, now: Int64) -> Bool {
            if let tokenID, tokenCount > 0, let e = find(tokenID, kind: .token), e.pointee.until > now { return true }
            if let sessionID, sessionCount > 0, let e = find(sessionID, kind: .session), e.pointee.until > now { return true }
            if subjectCount > 0, let e = find(subject, kind: .subject), e.pointee.until > now {
                guard let issuedAt else { return true }
                if issuedAt < e.pointee.before { return true }
            }
            return false
        }

        /// The entry for (kind, id), if present.
        @inline(__always)
        func find(_ id: String, kind: Kind) -> UnsafeMutablePointer<Entry>? {
            guard count > 0 else { return nil }
            let hash = hasher.hash(id, kind: kind.rawValue)
            let tag = hash >> 32
            let mask = slotCount &- 1
            var i = Int(truncatingIfNeeded: hash) & mask
            while true {
                let slot = slots[i]
                if slot == 0 { return nil }
                if slot >> 32 == tag {
                    let e = entries + (Int(truncatingIfNeeded: slot & 0xFFFF_FFFF) &- 1)
                    if e.pointee.hash == hash && e.pointee.kind == kind && Self.sameBytes(e.pointee.id, id) { return e }
                }
                i = (i &+ 1) & mask
            }
        }

        /// Identifiers are compared as bytes, as Redis compares keys and RFC 7519 compares
        /// `jti`/`sub` values; `String.==` would also match canonically equivalent
        /// but differently encoded text, which `IdentifierHash` puts elsewhere anyway.
        @inline(__always)
        static func sameBytes(_ a: String, _ b: String) -> Bool {
            let same = a.utf8.withContiguousStorageIfAvailable { x in
                b.utf8.withContiguousStorageIfAvailable { y in
                    // memcmp: `elementsEqual` over the buffers is ~30 instructions a byte.
                    x.count == y.count && (x.count == 0 || memcmp(x.baseAddress!, y.baseAddress!, x.count) == 0)
                }
            }
            return (same ?? nil) ?? a.utf8.elementsEqual(b.utf8)
        }

        func containsEntry(where predicate: (Entry) -> Bool) -> Bool {
            (0..<count).contains { predicate(entries[$0]) }
        }

        /// A new storage with the entries that pass `keep` and room for at least
        /// `minimumCapacity` entries (the smallest power of two of slots that is;
        /// growing a full storage by one entry doubles it).
        func copy(minimumCapacity: Int, keeping keep: (Entry) -> Bool) -> Storage {
            var kept = 0
            for i in 0..<count where keep(entries[i]) { kept += 1 }
            let needed = max(kept, minimumCapacity)
            var slotCount = needed == 0 ? 0 : 16
            while slotCount / 2 < needed { slotCount *= 2 }
            let copy = Storage(slotCount: slotCount)
            for i in 0..<count where keep(entries[i]) { copy.append(entries[i]) }
            return copy
        }

        /// Widens the entry for (kind, id) or adds it. Uniquely referenced, with room.
        func upsert(_ id: String, kind: Kind, until: Int64, before: Int64) {
            if let e = find(id, kind: kind) {
                e.pointee.until = max(e.pointee.until, until)
                e.pointee.before = max(e.pointee.before, before)
                return
            }
            append(Entry(hash: hasher.hash(id, kind: kind.rawValue), id: id, kind: kind, until: until, before: before))
        }

        private func append(_ entry: Entry) {
            precondition(count < capacity && count < Int(UInt32.max), "revocation table storage full")
            (entries + count).initialize(to: entry)
            count += 1
            switch entry.kind {
            case .token: tokenCount += 1
            case .session: sessionCount += 1
            case .subject: subjectCount += 1
            }
            let mask = slotCount - 1
            var i = Int(truncatingIfNeeded: entry.hash) & mask
            while slots[i] != 0 { i = (i + 1) & mask }
            slots[i] = (entry.hash >> 32) << 32 | UInt64(count)
        }
    }
}
