internal import COpenSSL
import PortcullisCore

/// A bounded cache of verified credentials (Envoy's verified-token cache).
///
/// - Keyed by SipHash-1-3-128 (see `SipHash128`) of the whole credential under a random
///   per-process key: the raw token is never stored, and entries cannot be
///   targeted by choosing tokens.
/// - Each hit re-checks expiry (`exp + leeway`).
/// - Sharded (16 shards, one `Lock` each); a hit is a hash, one uncontended
///   lock and a dictionary lookup, with no allocation.
/// - Key rotation: `invalidate(provider:generation:)` drops a provider's
///   entries in every shard and records the new generation there; an insert
///   carrying an older generation (a verification that raced the rotation)
///   is discarded.
final class VerifiedTokenCache: Sendable {
    struct Key: Hashable {
        let low: UInt64
        let high: UInt64
        func hash(into hasher: inout Hasher) { hasher.combine(low) }
    }

    struct Entry {
        let identity: VerifiedIdentity
        let validUntil: Double
        let provider: Int
    }

    struct Shard {
        var entries: [Key: Entry] = [:]
        var generations: [UInt64]
        /// Counted under the lock the lookup holds anyway (no extra atomics).
        var hits = 0
        var misses = 0
        var evictions = 0
    }

    private let shards: [LockedValue<Shard>]
    private let hashKey: (UInt64, UInt64)
    private let capacityPerShard: Int
    static let shardCount = 16

    /// `capacity` is the total entry bound; 0 disables caching.
    init(capacity: Int, providerCount: Int) {
        capacityPerShard = capacity == 0 ? 0 : max(1, capacity / VerifiedTokenCache.shardCount)
        shards = (0..<VerifiedTokenCache.shardCount).map { _ in
            LockedValue(Shard(generations: [UInt64](repeating: 1, count: providerCount)))
        }
        var random = (UInt64(0), UInt64(0))
        let ok = withUnsafeMutableBytes(of: &random) { RAND_bytes($0.baseAddress!.assumingMemoryBound(to: UInt8.self), 16) == 1 }
        if !ok {  // RAND_bytes does not fail on Linux with getrandom; fall back to the system RNG anyway.
            random = (UInt64.random(in: .min ... .max), UInt64.random(in: .min ... .max))
        }
        hashKey = random
    }

    var isEnabled: Bool { capacityPerShard > 0 }

    /// The cache key of a bearer credential.
    func key(bearer token: UnsafeRawBufferPointer) -> Key {
        var hasher = SipHash128.cacheHasher(key: hashKey)
        hasher.update(byte: 1)
        hasher.update(token)
        let (low, high) = hasher.finalize()
        return Key(low: low, high: high)
    }

    /// The cache key of a session cookie (name and joined value).
    func key(cookieName: String, value: UnsafeRawBufferPointer) -> Key {
        var hasher = SipHash128.cacheHasher(key: hashKey)
        hasher.update(byte: 2)
        var name = cookieName
        name.withUTF8 { hasher.update(UnsafeRawBufferPointer($0)) }
        hasher.update(byte: 0)
        hasher.update(value)
        let (low, high) = hasher.finalize()
        return Key(low: low, high: high)
    }

    @inline(__always)
    private func shard(_ key: Key) -> LockedValue<Shard> {
        shards[Int(truncatingIfNeeded: key.high & UInt64(VerifiedTokenCache.shardCount - 1))]
    }

    /// The cached identity, if present, unexpired at `now` and from a
    /// provider `allowed` admits.
    @inline(__always)
    func lookup(_ key: Key, now: Double, allowed: (Int) -> Bool) -> VerifiedIdentity? {
        guard isEnabled else { return nil }
        return shard(key).withLock { shard -> VerifiedIdentity? in
            guard let entry = shard.entries[key] else { shard.misses += 1; return nil }
            guard now < entry.validUntil else {
                shard.entries.removeValue(forKey: key)
                shard.misses += 1
                return nil
            }
            guard allowed(entry.provider) else { shard.misses += 1; return nil }
            shard.hits += 1
            return entry.identity
        }
    }

    func insert(_ key: Key, identity: VerifiedIdentity, validUntil: Double, provider: Int, generation: UInt64) {
        guard isEnabled else { return }
        shard(key).withLock { shard in
            guard shard.generations[provider] == generation else { return }
            if shard.entries.count >= capacityPerShard, shard.entries[key] == nil {
                shard.entries.remove(at: shard.entries.startIndex)
                shard.evictions += 1
            }
            shard.entries[key] = Entry(identity: identity, validUntil: validUntil, provider: provider)
        }
    }

    /// Drops `provider`'s entries after its keys changed.
    func invalidate(provider: Int, generation: UInt64) {
        for shard in shards {
            shard.withLock { shard in
                shard.generations[provider] = generation
                shard.entries = shard.entries.filter { $0.value.provider != provider }
            }
        }
    }

    func statistics() -> VerifiedTokenCacheStatistics {
        shards.reduce(into: VerifiedTokenCacheStatistics()) { total, shard in
            shard.withLock { shard in
                total.hits += shard.hits
                total.misses += shard.misses
                total.evictions += shard.evictions
                total.entries += shard.entries.count
            }
        }
    }

    var count: Int { statistics().entries }
}

/// Verified-token cache lookups and evictions since start, summed over the
/// shards, and the entries held now (for metrics).
public struct VerifiedTokenCacheStatistics: Sendable, Equatable {
    public var hits = 0
    public var misses = 0
    public var evictions = 0
    public var entries = 0
}
