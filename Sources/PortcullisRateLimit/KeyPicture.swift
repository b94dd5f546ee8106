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
/// - **Leases.** A key that keeps coming back while it has headroom is charged several
///   requests at once (a *lease*: one GCRA step of `n` intervals, as the script takes it),
///   and the next `n - 1` requests here use the units already paid for without sending
///   anything. The lease size follows the demand seen here: it starts at 1 (one charge per
///   request, as without leases), doubles when a request finds the last lease used up
///   within its lifetime, and otherwise (the last lease lapsed, or was used up before a
///   pause) is what the key used here in its last lifetime window and a quarter more (a
///   key whose demand fell gets less; one back from a pause gets what its last burst took,
///   not a new ramp); it stays within `maxLease` (a sixteenth
///   of the burst, at most 64: a burst under 32 never leases) and the half-burst headroom
///   rule above, one lease in flight per key. Paid units are only used within
///   `leaseLifetime` of their request's admission (an eighth of the burst's window, at most
///   10 s); unused ones lapse (the budget they held comes back as the TAT passes). Redis
///   is never told less than what was admitted: each use is charged before it happens, at
///   most `leaseLifetime` earlier, so over any window the fleet admits at most an eighth of
///   the burst more than GCRA would at those moments (whatever the number of instances), on
///   top of the `maxAhead` bound above. It is the trade quota assignment makes (Envoy's
///   rate-limit quota service, Google's Doorman), bounded here by the rule's own burst.
///
/// All of it lives in one entry per key, so a request looks its key up once on the way in
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
        /// Units of the unanswered charges (`unanswered` counts requests; a lease is one
        /// request of several units).
        var pendingUnits: Int64 = 0
        /// Units paid for by an answered lease and not used yet, usable before `paidUntil`
        /// (monotonic microseconds; also when the last lease's units were used up).
        var prepaid: Int64 = 0
        var paidUntil: Int64 = 0
        /// Units of this key's next lease.
        var lease: Int64 = 1
        /// Demand seen here, by lease lifetime: the requests admitted ahead since
        /// `windowStart` (monotonic microseconds), and in the last window that had any (a
        /// pause does not erase it: a key that comes back is expected to want as much again).
        var windowStart: Int64 = 0
        var usedNow: Int32 = 0
        var usedBefore: Int32 = 0

        /// Counts one request admitted ahead at `now`; a window lasts `window` microseconds.
        mutating func countUse(at now: Int64, window: Int64) {
            if now &- windowStart >= window {
                usedBefore = usedNow
                usedNow = 0
                windowStart = now
            }
            usedNow &+= 1
        }

        /// A lease for the demand seen in the last full window (while one runs, the larger of
        /// it and the one before), with a quarter more so a burst a little larger than the
        /// last one is still one charge.
        func leaseForDemand(at now: Int64, window: Int64) -> Int64 {
            let demand = Int64(now &- windowStart >= window ? usedNow : max(usedBefore, usedNow))
            return max(1, demand &+ demand / 4)
        }

        static let unknown = Int64.max / 2

        func isIdle(at now: Int64) -> Bool {
            unanswered == 0 && tat <= now && refusedUntil <= now && (prepaid == 0 || paidUntil <= now)
        }
    }

    /// What `admit` decided: as `RateLimitAdmission`, and for a request that goes ahead, the
    /// units to charge for each of its checks (0: paid for by a lease, nothing to send).
    enum Admission: Equatable {
        case refused(index: Int, GCRA.Decision)
        case ahead(units: LeaseUnits)
        case ask

        var isAhead: Bool { if case .ahead = self { return true } else { return false } }
    }

    private let table: KeyTable<Entry>

    init(maxKeys: Int = 100_000) {
        table = KeyTable(maxKeys: maxKeys)
    }

    /// At most this many requests of one key are admitted ahead and unanswered at once.
    static func maxAhead(_ rule: RateLimitRule) -> Int64 { rule.burst / 8 }

    /// The largest lease of a key of `rule` (below 2: the rule never leases).
    static func maxLease(_ rule: RateLimitRule) -> Int64 { min(rule.burst / 16, 64) }

    /// How long after its request's admission a lease's units may be used.
    static func leaseLifetime(_ rule: RateLimitRule) -> Int64 { min(rule.gcra.tolerance / 8, 10_000_000) }

    /// One request's way in, one lookup per check: the first standing refusal, else ahead
    /// when `mayGoAhead` and every key has headroom or a paid unit (each counted as
    /// unanswered or as a unit used, and its admission tallied as allowed), else ask Redis.
    /// Reservations of a request that does not go ahead are given back. A request with more
    /// checks than `LeaseUnits` holds goes ahead without leases.
    func admit(_ checks: [(rule: RateLimitRule, key: RateLimitKey)], mayGoAhead: Bool, now: Int64) -> Admission {
        var units = LeaseUnits()
        var ahead = mayGoAhead && !checks.isEmpty
        let leases = checks.count <= LeaseUnits.capacity
        var outcome = Admission.ask
        for (index, check) in checks.enumerated() {
            switch step(check.rule, key: check.key, reserve: ahead, leases: leases, now: now) {
            case .refused(let decision):
                outcome = .refused(index: index, decision)
            case .reserved(let charged):
                units.append(charged)
                continue
            case .ask:
                ahead = false
                continue
            }
            break
        }
        if ahead, units.count == checks.count { return .ahead(units: units) }
        for (index, check) in checks.prefix(units.count).enumerated() {
            release(check.rule, key: check.key, units: units[index])
        }
        return outcome
    }

    private enum Step {
        case refused(GCRA.Decision)
        /// Reserved: a charge of that many units, or (0) a unit a lease paid for.
        case reserved(Int64)
        case ask
    }

    /// One check under its key's lock: a refusal that stands, a reservation (only when
    /// `reserve`) or neither.
    private func step(_ rule: RateLimitRule, key: RateLimitKey, reserve: Bool, leases: Bool, now: Int64) -> Step {
        let gcra = rule.gcra
        let limit = Self.maxAhead(rule)
        return table.update(RuleKey(rule: rule.name, key: key), isIdle: { $0.isIdle(at: now) }) { entry, tallies in
            guard var found = entry else { return .ask }
            defer { entry = found }  // what changed below is kept (the table writes the entry back anyway)
            // A unit already paid for is used first, even past a refusal: Redis counted it.
            let lifetime = Self.leaseLifetime(rule)
            if reserve, found.prepaid > 0 {
                if now < found.paidUntil {
                    found.prepaid -= 1
                    found.countUse(at: now, window: lifetime)
                    tallies.add(rule.name, allowed: 1)
                    return .reserved(0)
                }
                found.prepaid = 0  // lapsed unused
            }
            if found.refusedUntil > now {
                return .refused(GCRA.Decision(allowed: false, tat: 0, remaining: 0, resetMicroseconds: found.whole &- now,
                                              retryAfterMicroseconds: found.refusedUntil &- now))
            }
            found.refusedUntil = 0  // lapsed, if it was set
            guard reserve, limit > 0, found.unanswered < limit else { return .ask }
            // A new lease (one in flight at a time): twice the last when that one was used up
            // while still fresh (demand outgrows it); else (it lapsed, or was used up and the key
            // paused) what the key used here in its last lifetime window, a quarter more: a key
            // whose demand fell gets less, one that comes back after a pause gets what its last
            // burst took (one charge per burst, not a new ramp). Its size is kept once reserved.
            var lease = found.lease, units: Int64 = 1
            let maxLease = Self.maxLease(rule)
            if leases, maxLease > 1, found.pendingUnits == found.unanswered {
                lease = min(now < found.paidUntil ? lease &* 2 : found.leaseForDemand(at: now, window: lifetime), maxLease)
                units = lease
            }
            let before = max(found.tat, now) &- now &+ found.pendingUnits &* gcra.interval
            if before &+ units &* gcra.interval > gcra.tolerance / 2 {
                units = 1
                guard before &+ gcra.interval <= gcra.tolerance / 2 else { return .ask }
            }
            found.lease = lease
            found.unanswered += 1
            found.pendingUnits += units
            found.countUse(at: now, window: lifetime)
            // Counted here, under the lock the reservation holds anyway (see `tallies`).
            tallies.add(rule.name, allowed: 1)
            return .reserved(units)
        }
    }

    /// Gives back a reservation its request did not use (another check of the request was
    /// refused or has to wait): a paid unit, or a charge that will not be sent.
    private func release(_ rule: RateLimitRule, key: RateLimitKey, units: Int64) {
        table.update(RuleKey(rule: rule.name, key: key), isIdle: { _ in false }) { entry, tallies in
            tallies.add(rule.name, allowed: -1)
            guard var found = entry else { return }
            found.usedNow = max(0, found.usedNow - 1)  // not a use after all
            if units == 0 {
                found.prepaid += 1
            } else {
                found.unanswered = max(0, found.unanswered - 1)
                found.pendingUnits = max(0, found.pendingUnits - units)
            }
            entry = found
        }
    }

    /// Requests admitted ahead, by rule name.
    func tallies() -> [String: EmbeddedRateLimitStore.Counts] { table.tallies() }

    /// Redis answered for `key` (`decision`, read at `now`), or did not (nil: the key waits
    /// for Redis again); `reserved`: the answer settles a request admitted ahead, charged
    /// `units` (a lease when more than 1; its request was admitted at `admitted`). A refusal
    /// is remembered until its `Retry-After` passes.
    func learn(_ rule: RateLimitRule, key: RateLimitKey, _ decision: GCRA.Decision?, reserved: Bool, units: Int64 = 1,
               admitted: Int64 = 0, now: Int64) {
        table.update(RuleKey(rule: rule.name, key: key), isIdle: { $0.isIdle(at: now) }) { entry, _ in
            var found = entry ?? Entry(tat: now, unanswered: 0)
            if reserved {
                found.unanswered = max(0, found.unanswered - 1)
                found.pendingUnits = max(0, found.pendingUnits - units)
            }
            guard let decision else {
                found.tat = Entry.unknown
                entry = found.unanswered == 0 && found.refusedUntil <= now ? nil : found
                return
            }
            // Allowed: the new TAT is `reset` ahead; refused: the TAT stands `reset` ahead.
            found.tat = now &+ decision.resetMicroseconds
            if reserved, decision.allowed {
                // The lease's units are fresh for `leaseLifetime` after its admission; a single
                // unit's answer only starts that clock when no lease's units are left (answers
                // of other loops' connections may come in any order).
                let until = admitted &+ Self.leaseLifetime(rule)
                if units > 1 {
                    found.paidUntil = found.prepaid > 0 ? min(found.paidUntil, until) : until
                    found.prepaid += units - 1
                } else if found.prepaid == 0 {
                    found.paidUntil = until
                }
            } else if reserved, units > 1 {
                found.lease = 1  // refused: the key is near its limit; its demand starts over
                found.usedNow = 0
                found.usedBefore = 0
            }
            if !decision.allowed, decision.retryAfterMicroseconds > 0 {
                found.refusedUntil = now &+ decision.retryAfterMicroseconds
                found.whole = now &+ decision.resetMicroseconds
            }
            entry = found
        }
    }

    var count: Int { table.count }
}

/// The units a request admitted ahead charges for each of its checks, in order (0: a unit a
/// lease paid for): up to `capacity` checks, held inline (no allocation per request).
struct LeaseUnits: Equatable {
    static let capacity = 8
    private var packed: UInt64 = 0
    private(set) var count = 0

    /// Appends `units` (0...255; leases are at most 64).
    mutating func append(_ units: Int64) {
        precondition(count < Self.capacity && units >= 0 && units <= 255)
        packed |= UInt64(units) << (8 * UInt64(count))
        count += 1
    }

    subscript(index: Int) -> Int64 { Int64((packed >> (8 * UInt64(index))) & 0xff) }

    /// Whether every check was paid for by a lease (nothing to send).
    var allPrepaid: Bool { packed == 0 }
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
