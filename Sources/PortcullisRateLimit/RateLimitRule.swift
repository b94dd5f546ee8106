/// One `rate_limits:` rule: which routes, what a request is counted under, and the rate.
/// A class: a request's checks and charges carry the rule by reference (one retain), not
/// its names, prefixes and arguments copied field by field. Immutable; equal when configured
/// alike.
public final class RateLimitRule: Sendable, Equatable {
    /// What a request is counted under.
    public enum Key: Sendable, Equatable, CustomStringConvertible {
        /// The verified user id the gateway injects; a request without identity counts
        /// under its client address.
        case user
        /// The client address (the peer, or from `X-Forwarded-For` when the peer is a
        /// trusted proxy), whether or not the request carries identity.
        case clientAddress
        /// A claim of the verified credential (a tenant, a client id); without identity or
        /// without that claim, the client address.
        case claim(String)

        public var description: String {
            switch self {
            case .user: return "user"
            case .clientAddress: return "client_address"
            case .claim(let name): return "claim:\(name)"
            }
        }
    }

    /// Names the rule in `RateLimit-Policy`, on `/metrics` and in the store's keys.
    public let name: String
    /// Route paths as configured (`routes[].path`); nil: every route.
    public let routes: [String]?
    public let key: Key
    /// `count` requests per `periodSeconds`, sustained.
    public let count: Int64
    public let periodSeconds: Int64
    /// Requests allowed at once from an idle key.
    public let burst: Int64
    public let gcra: GCRA
    /// What the shared store sends for this rule on every charge, made once: the start of
    /// its keys (`RedisRateLimitStore.key`) and the script's two arguments.
    let identityKeyPrefix: String, addressKeyPrefix: String
    let intervalArgument: String, toleranceArgument: String

    public init(name: String, routes: [String]?, key: Key, count: Int64, periodSeconds: Int64, burst: Int64? = nil) {
        self.name = name
        self.routes = routes
        self.key = key
        self.count = count
        self.periodSeconds = periodSeconds
        self.burst = burst ?? count
        gcra = GCRA(count: count, periodMicroseconds: periodSeconds * 1_000_000, burst: self.burst)
        identityKeyPrefix = RedisRateLimitStore.keyStart(rule: name, address: false)
        addressKeyPrefix = RedisRateLimitStore.keyStart(rule: name, address: true)
        intervalArgument = String(gcra.interval)
        toleranceArgument = String(gcra.tolerance)
    }

    public static func == (lhs: RateLimitRule, rhs: RateLimitRule) -> Bool {
        lhs.name == rhs.name && lhs.routes == rhs.routes && lhs.key == rhs.key && lhs.count == rhs.count
            && lhs.periodSeconds == rhs.periodSeconds && lhs.burst == rhs.burst
    }

    /// `RateLimit-Policy` (draft-ietf-httpapi-ratelimit-headers): the rule's name, its quota
    /// `q` (the burst: what an idle key may send at once) and window `w` (the seconds that
    /// quota takes to come back at the sustained rate).
    public var policyHeader: String {
        "\"\(name)\";q=\(burst);w=\(Self.seconds(rounding: gcra.tolerance))"
    }

    /// `RateLimit`: what is left of the quota (`r`) and the seconds until it is whole (`t`).
    public func limitHeader(_ decision: GCRA.Decision) -> String {
        "\"\(name)\";r=\(decision.remaining);t=\(Self.seconds(rounding: decision.resetMicroseconds))"
    }

    /// Whole seconds, rounded up (a client told 0 would retry at once).
    public static func seconds(rounding microseconds: Int64) -> Int64 {
        microseconds <= 0 ? 0 : (microseconds + 999_999) / 1_000_000
    }
}

/// `rate_limits:` as a whole.
public struct RateLimitSettings: Sendable, Equatable {
    /// What a request gets when the shared store cannot be asked.
    public enum Unavailable: String, Sendable, Equatable {
        /// Forward it, uncounted (a limiter protects the app; it should not take it down).
        case allow
        /// Answer 503 with `Retry-After`.
        case deny
    }

    public var rules: [RateLimitRule]
    public var onUnavailable: Unavailable
    /// Keys the embedded store keeps at most (idle ones are forgotten first).
    public var maxKeys: Int

    public init(rules: [RateLimitRule] = [], onUnavailable: Unavailable = .allow, maxKeys: Int = 100_000) {
        self.rules = rules
        self.onUnavailable = onUnavailable
        self.maxKeys = maxKeys
    }

    /// Parses a rate: `<count>/<unit>` with unit `s`, `m`, `h` or `d` (or `second`,
    /// `minute`, `hour`, `day`), or `<count>/<n><unit>` (`100/10s`). Nil: not a rate.
    public static func parseRate(_ text: String) -> (count: Int64, periodSeconds: Int64)? {
        let parts = String(text.filter { $0 != " " }).split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count == 2, let count = Int64(parts[0]), count > 0, count <= 1_000_000_000 else { return nil }
        var unit = Substring(parts[1])
        var multiple: Int64 = 1
        let digits = unit.prefix { $0.isASCII && $0.isNumber }
        if !digits.isEmpty {
            guard let n = Int64(digits), n > 0, n <= 1_000_000 else { return nil }
            multiple = n
            unit = unit.dropFirst(digits.count)
        }
        let seconds: Int64
        switch unit {
        case "s", "sec", "second": seconds = 1
        case "m", "min", "minute": seconds = 60
        case "h", "hour": seconds = 3600
        case "d", "day": seconds = 86_400
        default: return nil
        }
        return (count, seconds * multiple)
    }
}
