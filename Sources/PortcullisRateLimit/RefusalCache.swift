/// Refusals the shared store answered, remembered until their `Retry-After` passes: a key's
/// TAT only moves forward, so a request refused at `t` with a wait of `r` means no request
/// of that key can pass anywhere in the fleet before `t + r`. Until then this instance
/// answers 429 itself, without a round trip: a client hammering past its limit costs Redis
/// nothing more (the answer is the same the script would give, to within the round trip's
/// own delay).
///
/// Bounded as the embedded store is (`KeyTable`: lapsed refusals swept first; a forgotten
/// refusal only means the next request asks Redis again). Threading: any thread.
final class RefusalCache: Sendable {
    struct Entry {
        /// Monotonic microseconds before which a request is refused.
        var until: Int64
        /// Monotonic microseconds at which the key's budget is whole again.
        var whole: Int64
    }

    private let table: KeyTable<Entry>

    init(maxKeys: Int = 100_000) {
        table = KeyTable(maxKeys: maxKeys)
    }

    /// Remembers that `rule` refused `key` at `now` with `decision`.
    func remember(rule: String, key: RateLimitKey, _ decision: GCRA.Decision, now: Int64) {
        guard !decision.allowed, decision.retryAfterMicroseconds > 0 else { return }
        table.update(RuleKey(rule: rule, key: key), isIdle: { $0.until <= now }) { entry, _ in
            entry = Entry(until: now &+ decision.retryAfterMicroseconds, whole: now &+ decision.resetMicroseconds)
        }
    }

    /// The refusal still standing for `key` under `rule` at `now`, as a decision (nil: ask).
    func refusal(rule: String, key: RateLimitKey, now: Int64) -> GCRA.Decision? {
        table.update(RuleKey(rule: rule, key: key), isIdle: { $0.until <= now }) { entry, _ in
            guard let found = entry else { return nil }
            guard found.until > now else {
                entry = nil
                return nil
            }
            return GCRA.Decision(allowed: false, tat: 0, remaining: 0, resetMicroseconds: found.whole &- now,
                                 retryAfterMicroseconds: found.until &- now)
        }
    }

    var count: Int { table.count }
}
