import PortcullisCore

/// The rate-limit state of one instance (no `store.redis`): each key's TAT (see `GCRA`) in
/// a `KeyTable` (16 locked shards, a lock held for one lookup and update). It outlives
/// reloads (the builder keeps one per process), so a reload does not hand every client a
/// fresh budget: a rule keeps its keys while its name stays.
///
/// Bounded: at most `maxKeys` keys. A shard that is full first forgets its idle keys (a
/// TAT in the past is the same as no entry); if it is still full — more distinct keys are
/// active than `maxKeys` — it forgets an eighth of its entries, whose clients start again
/// from a whole burst. That is the price of a bound (a flood of addresses cannot grow the
/// table without limit); it is counted (`evictions`).
///
/// Threading: any thread.
public final class EmbeddedRateLimitStore: Sendable {
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

    private let table: KeyTable<Int64>

    public init(maxKeys: Int = 100_000) {
        table = KeyTable(maxKeys: maxKeys)
    }

    /// The decision for one request counted under `key` by `rule`, at `now` (monotonic
    /// microseconds; tests pass their own), and its record.
    public func decide(rule: RateLimitRule, key: RateLimitKey, now: Int64 = EmbeddedRateLimitStore.now()) -> GCRA.Decision {
        table.update(RuleKey(rule: rule.name, key: key), isIdle: { $0 <= now }) { tat, tallies in
            let decision = rule.gcra.decide(tat: tat, now: now)
            if decision.allowed {
                tat = decision.tat
                tallies.add(rule.name, allowed: 1)
            } else {
                tallies.add(rule.name, limited: 1)
            }
            return decision
        }
    }

    /// Decisions by rule name, summed over the shards.
    public func counts() -> [String: Counts] { table.tallies() }

    /// Keys forgotten while still active, because the table was full.
    public var evictions: Int { table.evictions }

    /// Keys held now (idle ones included until a full shard sweeps them).
    public var keyCount: Int { table.count }

    /// Monotonic microseconds: a wall-clock step neither refills nor drains a budget.
    @inline(__always)
    public static func now() -> Int64 { Int64(MonotonicClock.nowNanoseconds() / 1000) }
}
