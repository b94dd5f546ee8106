/// The generic cell rate algorithm (GCRA, ITU-T I.371; the "virtual scheduling" form), as
/// rate limiters that keep one value per key use it (redis-cell, Stripe's, Envoy's
/// descriptor limits in spirit): the state of a key is one number, its *theoretical
/// arrival time* (TAT), the moment the key's budget is whole again.
///
/// A rule allows `count` requests per `period` with bursts of up to `burst`: each request
/// moves the TAT one *emission interval* (`period / count`) on; a request is refused when
/// that would put the TAT more than `burst` intervals past now. An idle key (TAT in the
/// past) starts from now, so it may send `burst` at once, then one per interval. A refusal
/// changes nothing, so a client hammering a limit does not push its own recovery away.
///
/// All in integer microseconds, so the embedded store and the Redis script (which gets its
/// clock from `TIME`) compute the same answers. Pure: no clock, no storage.
public struct GCRA: Sendable, Equatable {
    /// Microseconds between requests at the sustained rate (≥ 1).
    public let interval: Int64
    /// Requests allowed at once from an idle key (≥ 1).
    public let burst: Int64

    public init(count: Int64, periodMicroseconds: Int64, burst: Int64) {
        precondition(count > 0 && periodMicroseconds > 0 && burst > 0)
        interval = max(1, periodMicroseconds / count)
        self.burst = burst
    }

    /// How far past now the TAT may lie before a request is refused.
    public var tolerance: Int64 { interval &* burst }

    public struct Decision: Sendable, Equatable {
        public var allowed: Bool
        /// The key's new TAT when allowed (to store); the old one (unchanged) when refused.
        public var tat: Int64
        /// Requests the key may still send at once after this one.
        public var remaining: Int64
        /// Microseconds until the key's whole burst is back.
        public var resetMicroseconds: Int64
        /// Microseconds until a request would be allowed (0 when allowed).
        public var retryAfterMicroseconds: Int64
    }

    /// The decision for one request at `now`, for a key whose stored TAT is `tat` (nil:
    /// never seen, or expired).
    public func decide(tat stored: Int64?, now: Int64) -> Decision {
        let start = max(stored ?? now, now)
        let next = start &+ interval
        let ahead = next &- now  // how far the budget would be spent, in microseconds
        if ahead > tolerance {
            return Decision(allowed: false, tat: start, remaining: 0, resetMicroseconds: start &- now,
                            retryAfterMicroseconds: ahead &- tolerance)
        }
        return Decision(allowed: true, tat: next, remaining: (tolerance &- ahead) / interval,
                        resetMicroseconds: ahead, retryAfterMicroseconds: 0)
    }

    /// Microseconds a stored TAT stays worth keeping: past it, the key is idle and equal to a
    /// key never seen (the store may forget it; Redis sets it as the key's expiry).
    public func expiry(ofTAT tat: Int64, now: Int64) -> Int64 { max(0, tat &- now) }
}
