import PortcullisCore

/// The rate-limit state of one instance (no `store.redis`): each key's TAT (see `GCRA`) in
/// a table split into shards, each behind its own lock, held only for one lookup and
/// update (no I/O under it). It outlives reloads (the builder keeps one per process), so a
/// reload does not hand every client a fresh budget: a rule keeps its keys while its name
/// stays.
///
/// Bounded: at most `maxKeys` keys. A shard that is full first forgets its idle keys (a
/// TAT in the past is the same as no entry); if it is still full — more distinct keys are
/// active than `maxKeys` — it forgets an eighth of its entries, whose clients start again
/// from a whole burst. That is the price of a bound (a flood of addresses cannot grow the
/// table without limit); it is counted (`evictions`) for `/metrics`.
///
/// Threading: any thread.
public final class EmbeddedRateLimitStore: Sendable {
    struct Key: Hashable {
        let rule: String
        let key: RateLimitKey
    }

    /// Decisions per rule, for `/metrics`.
    public struct Counts: Sendable, Equatable {
        public var allowed = 0
        public var limited = 0
        /// Requests the shared store could not decide on (`on_unavailable` applied).
        public var unavailable = 0
        public init(allowed: Int = 0, limited: Int = 0, unavailable: Int = 0) {
            self.allowed = allowed
            self.limited = limited
            self.unavailable = unavailable
        }
    }

    final class Shard: @unchecked Sendable {
        // @unchecked Sendable: every field only under `lock`.
        let lock = Lock()
        var tats: [Key: Int64] = [:]
        var counts: [String: Counts] = [:]
        var evictions = 0
    }

    private let shards: [Shard]
    private let capacityPerShard: Int
    static let shardCount = 16

    public init(maxKeys: Int = 100_000) {
        shards = (0..<Self.shardCount).map { _ in Shard() }
        capacityPerShard = max(8, maxKeys / Self.shardCount)
    }

    /// The decision for one request counted under `key` by `rule`, at `now` (monotonic
    /// microseconds; tests pass their own), and its record.
    public func decide(rule: RateLimitRule, key: RateLimitKey, now: Int64 = EmbeddedRateLimitStore.now()) -> GCRA.Decision {
        let entry = Key(rule: rule.name, key: key)
        let shard = shards[Int(UInt(bitPattern: entry.hashValue) % UInt(Self.shardCount))]
        return shard.lock.withLock {
            let decision = rule.gcra.decide(tat: shard.tats[entry], now: now)
            if decision.allowed {
                if shard.tats[entry] == nil && shard.tats.count >= capacityPerShard { makeRoom(shard, now: now) }
                shard.tats[entry] = decision.tat
                shard.counts[rule.name, default: Counts()].allowed += 1
            } else {
                shard.counts[rule.name, default: Counts()].limited += 1
            }
            return decision
        }
    }

    /// Under `shard.lock`: forgets idle keys, then, if that was not enough, an eighth.
    private func makeRoom(_ shard: Shard, now: Int64) {
        shard.tats = shard.tats.filter { $0.value > now }
        guard shard.tats.count >= capacityPerShard else { return }
        let drop = max(1, capacityPerShard / 8)
        for key in shard.tats.keys.prefix(drop) { shard.tats[key] = nil }
        shard.evictions += drop
    }

    /// Decisions by rule name, summed over the shards.
    public func counts() -> [String: Counts] {
        var total: [String: Counts] = [:]
        for shard in shards {
            shard.lock.withLock {
                for (rule, counts) in shard.counts {
                    total[rule, default: Counts()].allowed += counts.allowed
                    total[rule, default: Counts()].limited += counts.limited
                }
            }
        }
        return total
    }

    /// Keys forgotten while still active, because the table was full.
    public var evictions: Int { shards.reduce(0) { sum, shard in sum + shard.lock.withLock { shard.evictions } } }

    /// Keys held now (idle ones included until a full shard sweeps them).
    public var keyCount: Int { shards.reduce(0) { sum, shard in sum + shard.lock.withLock { shard.tats.count } } }

    /// Monotonic microseconds: a wall-clock step neither refills nor drains a budget.
    @inline(__always)
    public static func now() -> Int64 { Int64(MonotonicClock.nowNanoseconds() / 1000) }
}
