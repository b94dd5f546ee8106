import PortcullisCore

/// Refusals the shared store answered, remembered until their `Retry-After` passes: a key's
/// TAT only moves forward, so a request refused at `t` with a wait of `r` means no request
/// of that key can pass anywhere in the fleet before `t + r`. Until then this instance
/// answers 429 itself, without a round trip: a client hammering past its limit costs Redis
/// nothing more (the answer is the same the script would give, to within the round trip's
/// own delay).
///
/// Bounded as the embedded store is (idle entries swept first, then an eighth forgotten: a
/// forgotten refusal only means the next request asks Redis again). Threading: any thread;
/// each shard's lock is held for one lookup or update.
final class RefusalCache: Sendable {
    struct Key: Hashable {
        let rule: String
        let key: RateLimitKey
    }

    struct Entry {
        /// Monotonic microseconds before which a request is refused.
        var until: Int64
        /// Monotonic microseconds at which the key's budget is whole again.
        var whole: Int64
    }

    final class Shard: @unchecked Sendable {
        // @unchecked Sendable: `entries` only under `lock`.
        let lock = Lock()
        var entries: [Key: Entry] = [:]
    }

    private let shards: [Shard]
    private let capacityPerShard: Int
    static let shardCount = 16

    init(maxKeys: Int = 100_000) {
        shards = (0..<Self.shardCount).map { _ in Shard() }
        capacityPerShard = max(8, maxKeys / Self.shardCount)
    }

    private func shard(_ key: Key) -> Shard { shards[Int(UInt(bitPattern: key.hashValue) % UInt(Self.shardCount))] }

    /// Remembers that `rule` refused `key` at `now` with `decision`.
    func remember(rule: String, key: RateLimitKey, _ decision: GCRA.Decision, now: Int64) {
        guard !decision.allowed, decision.retryAfterMicroseconds > 0 else { return }
        let entry = Key(rule: rule, key: key)
        let shard = shard(entry)
        shard.lock.withLock {
            if shard.entries[entry] == nil && shard.entries.count >= capacityPerShard {
                shard.entries = shard.entries.filter { $0.value.until > now }
                if shard.entries.count >= capacityPerShard {
                    for old in shard.entries.keys.prefix(max(1, capacityPerShard / 8)) { shard.entries[old] = nil }
                }
            }
            shard.entries[entry] = Entry(until: now &+ decision.retryAfterMicroseconds,
                                         whole: now &+ decision.resetMicroseconds)
        }
    }

    /// The refusal still standing for `key` under `rule` at `now`, as a decision (nil: ask).
    func refusal(rule: String, key: RateLimitKey, now: Int64) -> GCRA.Decision? {
        let entry = Key(rule: rule, key: key)
        let shard = shard(entry)
        return shard.lock.withLock {
            guard let found = shard.entries[entry] else { return nil }
            guard found.until > now else {
                shard.entries[entry] = nil
                return nil
            }
            return GCRA.Decision(allowed: false, tat: 0, remaining: 0, resetMicroseconds: found.whole &- now,
                                 retryAfterMicroseconds: found.until &- now)
        }
    }

    var count: Int { shards.reduce(0) { sum, shard in sum + shard.lock.withLock { shard.entries.count } } }
}
