#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Atomics

/// The revocation entries themselves: one open-addressed hash index over every
/// jti, session and subject entry, keyed by a 64-bit `IdentifierHash` of
/// (kind, id). A value type (copy-on-write) for the stores' own tables; the loops'
/// views all read one storage that `ViewReplicas` changes in place while they read it
/// (`applyInPlace`; see `Storage` for how that needs no lock).
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

    /// Whether any subject ("sign out everywhere") entry is held: only then are a user's
    /// other names worth building.
    var hasSubjects: Bool { storage.hasSubjects }

    /// The hot path: no allocation, no lock. A subject cutoff revokes a credential
    /// without `iat`: it cannot prove it is newer.
    @inline(__always)
    func isRevoked(tokenID: String?, sessionID: String?, subject: String, issuedAt: Int64?, now: Int64) -> Bool {
        storage.isRevoked(tokenID: tokenID, sessionID: sessionID, subject: subject, issuedAt: issuedAt, now: now)
    }

    /// Revocations that name `subject` (token and session entries carry no subject).
    func revocations(subject: String, now: Int64) -> [Revocation] {
        guard let i = storage.find(subject, kind: .subject), storage.until(i) > now else { return [] }
        return [.subject(subject, before: storage.before(i), until: storage.until(i))]
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
        if let i = storage.find(id, kind: kind), storage.until(i) >= until, storage.before(i) >= before { return false }
        if !isKnownUniquelyReferenced(&storage) || storage.isFull {
            storage = storage.copy(minimumCapacity: storage.count + 1, keeping: { _ in true })
        }
        storage.upsert(id, kind: kind, until: until, before: before)
        return true
    }

    /// `apply` for the one table every loop reads (`ViewReplicas`, its writer under its
    /// lock): the entry is added or widened in place even though the loops share the
    /// storage, so they see it at their next lookup; only a full storage is replaced by a
    /// larger copy. True when it was: the loops must be handed the new storage.
    mutating func applyInPlace(_ revocation: Revocation, maxCredentialLifetime: Int64) -> Bool {
        let until = revocation.expiry(maxCredentialLifetime: maxCredentialLifetime)
        let (id, kind, before) = Self.key(revocation)
        if let i = storage.find(id, kind: kind) {
            storage.widen(i, until: until, before: before)
            return false
        }
        let replaced = storage.isFull
        if replaced { storage = storage.copy(minimumCapacity: storage.count + 1, keeping: { _ in true }) }
        storage.add(id, kind: kind, until: until, before: before)
        return replaced
    }

    /// The same entries in a storage of their own (nothing else holds it), for a writer
    /// that changes it in place (`applyInPlace`).
    func detached() -> RevocationTable {
        var table = RevocationTable()
        table.storage = storage.copy(minimumCapacity: storage.count, keeping: { _ in true })
        return table
    }

    /// Whether both tables read the same memory (tests: the loops share one).
    func sharesStorage(with other: RevocationTable) -> Bool { storage === other.storage }

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
            let e = storage.entry(i)
            guard e.until > now else { continue }
            if let o = other.storage.find(e.id, kind: e.kind), other.storage.until(o) >= e.until,
               other.storage.before(o) >= e.before { continue }
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
    /// The memory behind a table.
    ///
    /// One writer at a time (a table that holds the only reference to it, or
    /// `ViewReplicas` under its lock) and any number of readers on other threads, with no
    /// lock: entries are only appended or widened, so a storage read by several loops can
    /// take new entries in place.
    /// - An entry's hash, identifier and kind are written before the slot that names it is
    ///   published (a releasing store); a reader finds the slot with an acquiring load, so it
    ///   sees them complete. They never change after.
    /// - An entry's `until` and `before` are atomics: widened in place (releasing), read
    ///   with acquiring loads.
    /// - The counts are atomics, raised before the slot is published: a reader that sees a
    ///   count of 0 sees no entry of that kind either way.
    /// Pruning, an undo and growth build a new storage (`copy`); the old one is never
    /// written again, and is freed when its last reader lets go of it (reference counting:
    /// nothing dangles).
    final class Storage: @unchecked Sendable {
        // @unchecked Sendable: see the type comment (atomics and publish-after-initialize).
        let hasher = IdentifierHash.process
        /// A power of two (16 at least), or 0 for the empty table.
        let slotCount: Int
        /// Tag (upper 32 bits of the hash) and entry index + 1; 0 is empty. Atomic.
        private let slots: UnsafeMutablePointer<UnsafeAtomic<UInt64>.Storage>
        /// At most half the slots: linear probing stays short.
        let capacity: Int
        /// The immutable part of each entry (written once, before its slot).
        private let keys: UnsafeMutablePointer<Key>
        /// Each entry's `until` and `before` (atomic; see the type comment).
        private let untils: UnsafeMutablePointer<UnsafeAtomic<Int64>.Storage>
        private let befores: UnsafeMutablePointer<UnsafeAtomic<Int64>.Storage>
        /// count, token, session and subject entries (atomic).
        private let counts: UnsafeMutablePointer<UnsafeAtomic<Int>.Storage>

        struct Key {
            let hash: UInt64
            let id: String
            let kind: Kind
        }

        init(slotCount: Int) {
            self.slotCount = slotCount
            capacity = slotCount / 2
            slots = .allocate(capacity: max(slotCount, 1))
            slots.initialize(repeating: .init(0), count: max(slotCount, 1))
            keys = .allocate(capacity: max(capacity, 1))
            untils = .allocate(capacity: max(capacity, 1))
            befores = .allocate(capacity: max(capacity, 1))
            counts = .allocate(capacity: 4)
            counts.initialize(repeating: .init(0), count: 4)
        }

        deinit {
            let n = count
            keys.deinitialize(count: n)
            untils.deinitialize(count: n)
            befores.deinitialize(count: n)
            keys.deallocate()
            untils.deallocate()
            befores.deallocate()
            slots.deinitialize(count: max(slotCount, 1))
            slots.deallocate()
            counts.deinitialize(count: 4)
            counts.deallocate()
        }

        @inline(__always)
        private func counter(_ i: Int) -> UnsafeAtomic<Int> { UnsafeAtomic(at: counts + i) }

        var count: Int { counter(0).load(ordering: .acquiring) }
        var hasSubjects: Bool { counter(3).load(ordering: .acquiring) > 0 }
        var isFull: Bool { count >= capacity }

        @inline(__always)
        private func countOf(_ kind: Kind) -> Int { counter(Int(kind.rawValue)).load(ordering: .acquiring) }

        @inline(__always)
        func until(_ i: Int) -> Int64 { UnsafeAtomic<Int64>(at: untils + i).load(ordering: .acquiring) }
        @inline(__always)
        func before(_ i: Int) -> Int64 { UnsafeAtomic<Int64>(at: befores + i).load(ordering: .acquiring) }

        /// Entry `i` (below `count`) as it stands now.
        func entry(_ i: Int) -> Entry {
            let k = keys[i]
            return Entry(hash: k.hash, id: k.id, kind: k.kind, until: until(i), before: before(i))
        }

        @inline(__always)
        func isRevoked(tokenID: String?, sessionID: String?, subject: String, issuedAt: Int64?, now: Int64) -> Bool {
            if let tokenID, countOf(.token) > 0, let i = find(tokenID, kind: .token), until(i) > now { return true }
            if let sessionID, countOf(.session) > 0, let i = find(sessionID, kind: .session), until(i) > now { return true }
            if countOf(.subject) > 0, let i = find(subject, kind: .subject), until(i) > now {
                guard let issuedAt else { return true }
                if issuedAt < before(i) { return true }
            }
            return false
        }

        /// The index of the entry for (kind, id), if present.
        @inline(__always)
        func find(_ id: String, kind: Kind) -> Int? {
            guard slotCount > 0 else { return nil }
            let hash = hasher.hash(id, kind: kind.rawValue)
            let tag = hash >> 32
            let mask = slotCount &- 1
            var i = Int(truncatingIfNeeded: hash) & mask
            while true {
                let slot = UnsafeAtomic<UInt64>(at: slots + i).load(ordering: .acquiring)
                if slot == 0 { return nil }
                if slot >> 32 == tag {
                    let index = Int(truncatingIfNeeded: slot & 0xFFFF_FFFF) &- 1
                    let k = keys + index
                    if k.pointee.hash == hash && k.pointee.kind == kind && Self.sameBytes(k.pointee.id, id) { return index }
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
            (0..<count).contains { predicate(entry($0)) }
        }

        /// A new storage with the entries that pass `keep` and room for at least
        /// `minimumCapacity` entries (the smallest power of two of slots that is;
        /// growing a full storage by one entry doubles it). By the writer.
        func copy(minimumCapacity: Int, keeping keep: (Entry) -> Bool) -> Storage {
            let n = count
            var kept = 0
            for i in 0..<n where keep(entry(i)) { kept += 1 }
            let needed = max(kept, minimumCapacity)
            var slotCount = needed == 0 ? 0 : 16
            while slotCount / 2 < needed { slotCount *= 2 }
            let copy = Storage(slotCount: slotCount)
            for i in 0..<n {
                let e = entry(i)
                if keep(e) { copy.append(e) }
            }
            return copy
        }

        /// Widens the entry for (kind, id) or adds it. By the writer, with room.
        func upsert(_ id: String, kind: Kind, until: Int64, before: Int64) {
            if let i = find(id, kind: kind) { return widen(i, until: until, before: before) }
            add(id, kind: kind, until: until, before: before)
        }

        /// Widens entry `i` (a later `until`, a later `before` win). By the writer.
        func widen(_ i: Int, until: Int64, before: Int64) {
            let u = UnsafeAtomic<Int64>(at: untils + i), b = UnsafeAtomic<Int64>(at: befores + i)
            // `before` first: a reader that sees the later `until` also sees the wider cutoff.
            if before > b.load(ordering: .relaxed) { b.store(before, ordering: .releasing) }
            if until > u.load(ordering: .relaxed) { u.store(until, ordering: .releasing) }
        }

        /// Adds an entry (kind, id) that is not held. By the writer, with room.
        func add(_ id: String, kind: Kind, until: Int64, before: Int64) {
            append(Entry(hash: hasher.hash(id, kind: kind.rawValue), id: id, kind: kind, until: until, before: before))
        }

        /// Adds an entry: everything it is made of first, its slot last. By the writer.
        private func append(_ entry: Entry) {
            let n = count
            precondition(n < capacity && n < Int(UInt32.max), "revocation table storage full")
            (keys + n).initialize(to: Key(hash: entry.hash, id: entry.id, kind: entry.kind))
            (untils + n).initialize(to: .init(entry.until))
            (befores + n).initialize(to: .init(entry.before))
            counter(0).store(n + 1, ordering: .releasing)
            counter(Int(entry.kind.rawValue)).wrappingIncrement(ordering: .releasing)
            let mask = slotCount - 1
            var i = Int(truncatingIfNeeded: entry.hash) & mask
            while UnsafeAtomic<UInt64>(at: slots + i).load(ordering: .relaxed) != 0 { i = (i + 1) & mask }
            UnsafeAtomic<UInt64>(at: slots + i).store((entry.hash >> 32) << 32 | UInt64(n + 1), ordering: .releasing)
        }
    }
}
