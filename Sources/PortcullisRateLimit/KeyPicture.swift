/// What this instance knows of each key on the shared store, from Redis's own answers, so
/// that most requests need no round trip before they are answered:
///
/// - **A refusal still standing.** A key's TAT only moves forward, so a request refused at
///   `t` with a wait of `r` means no request of that key can pass anywhere in the fleet
///   before `t + r`. Until then this instance answers 429 itself: a client hammering past
///   its limit costs Redis nothing more (the answer is the one the script would give, to
///   within the round trip's own delay).
/// - **Headroom.** A key far from its limit is admitted at once and charged in the
///   background (the same script, sent without waiting); only when its key nears the limit
///   does a request wait for Redis. The rule (per rule and key): admitted ahead when the
///   key's TAT as Redis last answered here, plus the requests this instance admitted ahead
///   and Redis has not answered yet, plus this one, leaves at least half the burst unspent,
///   and fewer than an eighth of the burst is unanswered here (`maxAhead`). Every answer
///   (to these charges or to requests that waited) replaces the TAT. So an instance whose
///   picture is stale (another instance spent the budget since) admits at most `maxAhead`
///   requests too many before its first answer corrects it: a fleet of up to 8 instances
///   stays within one burst of the limit, and a key whose budget is small (a burst under 8)
///   always waits for Redis. With `on_unavailable: deny` nothing goes ahead (a charge Redis
///   may never take would let a request by uncounted).
///
/// Both live in one entry per key, so a request looks its key up once on the way in
/// (`admit`) and once when Redis answers (`learn`). Bounded as the embedded store is
/// (`KeyTable`); a forgotten key waits for Redis once. Threading: any thread.
final class KeyPicture: Sendable {
    struct Entry {
        /// Monotonic microseconds: the key's TAT as Redis last answered (Redis's `now` taken
        /// as the moment its answer was read here, which only makes the picture more careful);
        /// `unknown`: no headroom until Redis answers again.
        var tat: Int64
        /// Admitted ahead here, not answered by Redis yet.
        var unanswered: Int64
        /// Monotonic microseconds before which a request is refused (0: no refusal stands),
        /// and at which the key's budget is whole again.
        var refusedUntil: Int64 = 0
        var whole: Int64 = 0

        static let unknown = Int64.max / 2

        func isIdle(at now: Int64) -> Bool { unanswered == 0 && tat <= now && refusedUntil <= now }
    }

    typealias Admission = RateLimitAdmission

    private let table: KeyTable<Entry>

    init(maxKeys: Int = 100_000) {
        table = KeyTable(maxKeys: maxKeys)
    }

    /// At most this many requests of one key are admitted ahead and unanswered at once.
    static func maxAhead(_ rule: RateLimitRule) -> Int64 { rule.burst / 8 }

    /// One request's way in, one lookup per check: the first standing refusal, else ahead
    /// when `mayGoAhead` and every key has headroom (each counted as unanswered and its
    /// admission tallied as allowed), else ask Redis. Reservations of a request that does
    /// not go ahead are given back.
    func admit(_ checks: [(rule: RateLimitRule, key: RateLimitKey)], mayGoAhead: Bool, now: Int64) -> Admission {
        var reserved = 0
        var ahead = mayGoAhead
        var outcome = Admission.ask
        for (index, check) in checks.enumerated() {
            let step = step(check.rule, key: check.key, reserve: ahead, now: now)
            if case .refused(_, let decision) = step {
                outcome = .refused(index: index, decision)
                break
            }
            if step == .ahead { reserved += 1 } else { ahead = false }
        }
        if ahead, reserved == checks.count, !checks.isEmpty { return .ahead }
        for check in checks.prefix(reserved) { release(check.rule, key: check.key) }
        return outcome
    }

    /// One check under its key's lock: a refusal that stands (`.refused`, index 0), a
    /// reservation (`.ahead`, only when `reserve`) or neither (`.ask`).
    private func step(_ rule: RateLimitRule, key: RateLimitKey, reserve: Bool, now: Int64) -> Admission {
        let gcra = rule.gcra
        let limit = Self.maxAhead(rule)
        return table.update(RuleKey(rule: rule.name, key: key), isIdle: { $0.isIdle(at: now) }) { entry, tallies in
            guard var found = entry else { return .ask }
            if found.refusedUntil > now {
                return .refused(index: 0, GCRA.Decision(allowed: false, tat: 0, remaining: 0, resetMicroseconds: found.whole &- now,
                                                        retryAfterMicroseconds: found.refusedUntil &- now))
            }
            if found.refusedUntil != 0 {  // lapsed
                found.refusedUntil = 0
                entry = found
            }
            guard reserve, limit > 0, found.unanswered < limit else { return .ask }
            let spent = max(found.tat, now) &- now &+ (found.unanswered &+ 1) &* gcra.interval
            guard spent <= gcra.tolerance / 2 else { return .ask }
            found.unanswered += 1
            entry = found
            // Counted here, under the lock the reservation holds anyway (see `tallies`).
            tallies.add(rule.name, allowed: 1)
            return .ahead
        }
    }

    /// Gives back a reservation no charge will answer (another check of its request refused
    /// or has to wait).
    private func release(_ rule: RateLimitRule, key: RateLimitKey) {
        table.update(RuleKey(rule: rule.name, key: key), isIdle: { _ in false }) { entry, tallies in
            tallies.add(rule.name, allowed: -1)
            if var found = entry {
                found.unanswered = max(0, found.unanswered - 1)
                entry = found
            }
        }
    }

    /// Requests admitted ahead, by rule name.
    func tallies() -> [String: EmbeddedRateLimitStore.Counts] { table.tallies() }

    /// Redis answered for `key` (`decision`, read at `now`), or did not (nil: the key waits
    /// for Redis again); `reserved`: the answer settles a request admitted ahead. A refusal
    /// is remembered until its `Retry-After` passes.
    func learn(_ rule: RateLimitRule, key: RateLimitKey, _ decision: GCRA.Decision?, reserved: Bool, now: Int64) {
        table.update(RuleKey(rule: rule.name, key: key), isIdle: { $0.isIdle(at: now) }) { entry, _ in
            var found = entry ?? Entry(tat: now, unanswered: 0)
            if reserved { found.unanswered = max(0, found.unanswered - 1) }
            guard let decision else {
                found.tat = Entry.unknown
                entry = found.unanswered == 0 && found.refusedUntil <= now ? nil : found
                return
            }
            // Allowed: the new TAT is `reset` ahead; refused: the TAT stands `reset` ahead.
            found.tat = now &+ decision.resetMicroseconds
            if !decision.allowed, decision.retryAfterMicroseconds > 0 {
                found.refusedUntil = now &+ decision.retryAfterMicroseconds
                found.whole = now &+ decision.resetMicroseconds
            }
            entry = found
        }
    }

    var count: Int { table.count }
}

/// What a request's checks get on the way in.
public enum RateLimitAdmission: Equatable, Sendable {
    /// The check at `index` is refused by a refusal Redis gave that still stands.
    case refused(index: Int, GCRA.Decision)
    /// Every check's key has headroom: admitted, its charges leave without waiting.
    case ahead
    /// Redis decides (the request waits for its answer).
    case ask
}
