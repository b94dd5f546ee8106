/// What Redis last said of each key this instance asked about, so a key far from its limit
/// is admitted at once and charged in the background (the charge is the same script, sent
/// without waiting): a request on a shared budget then costs no round trip before it is
/// forwarded, only when its key nears the limit does it wait for Redis's answer.
///
/// The rule (per rule and key): admitted ahead when the key's TAT as Redis last answered here,
/// plus the requests this instance admitted ahead and Redis has not answered yet, plus this
/// one, leaves at least half the burst unspent, and fewer than an eighth of the burst is
/// unanswered here (`maxAhead`). Every answer (to these charges or to requests that waited)
/// replaces the TAT. So an instance whose picture is stale (another instance spent the budget
/// since) admits at most `maxAhead` requests too many before its first answer corrects it: a
/// fleet of up to 8 instances stays within one burst of the limit, and a key whose budget is
/// small (a burst under 8) always waits for Redis, exactly as before. With
/// `on_unavailable: deny` nothing goes ahead (a charge Redis may never take would let a
/// request by uncounted).
///
/// Bounded as the refusal cache is (`KeyTable`); a forgotten key waits for Redis once.
/// Threading: any thread.
final class HeadroomCache: Sendable {
    struct Entry {
        /// Monotonic microseconds: the key's TAT as Redis last answered (Redis's `now` taken
        /// as the moment its answer was read here, which only makes the picture more careful).
        var tat: Int64
        /// Admitted ahead here, not answered by Redis yet.
        var unanswered: Int64
    }

    private let table: KeyTable<Entry>

    init(maxKeys: Int = 100_000) {
        table = KeyTable(maxKeys: maxKeys)
    }

    /// At most this many requests of one key are admitted ahead and unanswered at once.
    static func maxAhead(_ rule: RateLimitRule) -> Int64 { rule.burst / 8 }

    /// Admits one request of `key` ahead (counted as unanswered) when the rule above allows.
    func reserve(_ rule: RateLimitRule, key: RateLimitKey, now: Int64) -> Bool {
        let limit = Self.maxAhead(rule)
        guard limit > 0 else { return false }
        let gcra = rule.gcra
        return table.update(RuleKey(rule: rule.name, key: key), isIdle: { $0.unanswered == 0 && $0.tat <= now }) { entry, tallies in
            guard var found = entry, found.unanswered < limit else { return false }
            let spent = max(found.tat, now) &- now &+ (found.unanswered &+ 1) &* gcra.interval
            guard spent <= gcra.tolerance / 2 else { return false }
            found.unanswered += 1
            entry = found
            // Counted here, under the lock the reservation holds anyway (see `tallies`).
            tallies[rule.name, default: .init()].allowed += 1
            return true
        }
    }

    /// Gives back a reservation no charge will answer (another rule of the request refused it).
    func release(_ rule: RateLimitRule, key: RateLimitKey) {
        table.update(RuleKey(rule: rule.name, key: key), isIdle: { _ in false }) { entry, tallies in
            tallies[rule.name, default: .init()].allowed -= 1
            if var found = entry {
                found.unanswered = max(0, found.unanswered - 1)
                entry = found
            }
        }
    }

    /// Requests admitted ahead (reserved and not released), by rule name.
    func tallies() -> [String: EmbeddedRateLimitStore.Counts] { table.tallies() }

    /// Redis answered for `key` (`decision`, read at `now`), or did not (nil: the key waits
    /// for Redis again); `reserved`: the answer settles a request admitted ahead.
    func learn(_ rule: RateLimitRule, key: RateLimitKey, _ decision: GCRA.Decision?, reserved: Bool, now: Int64) {
        table.update(RuleKey(rule: rule.name, key: key), isIdle: { $0.unanswered == 0 && $0.tat <= now }) { entry, _ in
            var found = entry ?? Entry(tat: now, unanswered: 0)
            if reserved { found.unanswered = max(0, found.unanswered - 1) }
            if let decision {
                // Allowed: the new TAT is `reset` ahead; refused: the TAT stands `reset` ahead.
                found.tat = now &+ decision.resetMicroseconds
            } else {
                // Unknown: no headroom until Redis answers again.
                found.tat = Int64.max / 2
            }
            entry = found.unanswered == 0 && decision == nil ? nil : found
        }
    }

    var count: Int { table.count }
}
