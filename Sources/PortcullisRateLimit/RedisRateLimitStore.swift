internal import COpenSSL
import Logging
import PortcullisCore
import PortcullisRedis

/// The rate-limit state of a fleet (`store.redis`, standalone or Sentinel): each key's TAT
/// (see `GCRA`) in Redis, read and moved by one script per rule in one pipelined write, so
/// every instance enforces the same budget and none can overwrite another's count (the
/// script runs atomically on the server, with the server's clock: instances' clocks do not
/// matter). One key per command, so a Redis Cluster client routes each by its slot
/// (`RedisKeyedPipelining`: standalone, Sentinel and cluster clients alike).
///
/// When Redis cannot answer (down, timing out), `decide` completes with nil and the caller
/// applies `rate_limits.on_unavailable`; the change of state is logged once each way.
///
/// Threading: any thread; completions run on the client's loop.
public final class RedisRateLimitStore: Sendable {
    /// One client per event loop (by `EventLoop.index`): a request's round trip is written
    /// and answered on its own loop, with no hop to another queue.
    public let clients: [any RedisKeyedPipelining]
    let logger: Logger
    /// How long a request waits for Redis before `on_unavailable` applies.
    let timeout: Double
    private let state = LockedValue(State())
    /// Refusals still standing, answered without asking Redis (see `RefusalCache`).
    let refusals: RefusalCache
    /// Keys far from their limit, admitted without waiting (see `HeadroomCache`).
    let headroom: HeadroomCache

    struct State {
        var available = true
        var counts: [String: EmbeddedRateLimitStore.Counts] = [:]
    }

    /// Keys live under this prefix (`portcullis:ratelimit:<rule>:<u|a>:<value>`), each with
    /// an expiry at its TAT: an idle key leaves Redis by itself.
    public static let keyPrefix = "portcullis:ratelimit:"

    /// KEYS[1]: the key. ARGV: interval and tolerance in microseconds. Returns
    /// {allowed (1/0), microseconds the budget is spent ahead (allowed) or until whole
    /// (refused), microseconds until a retry (0 when allowed)}.
    static let script = """
    local t = redis.call('TIME')
    local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
    local interval = tonumber(ARGV[1])
    local tolerance = tonumber(ARGV[2])
    local tat = tonumber(redis.call('GET', KEYS[1])) or now
    if tat < now then tat = now end
    local ahead = tat + interval - now
    if ahead > tolerance then
      return {0, tat - now, ahead - tolerance}
    end
    redis.call('SET', KEYS[1], string.format('%d', tat + interval), 'PX', math.max(1, math.ceil(ahead / 1000)))
    return {1, ahead, 0}
    """

    /// `clients[i]` serves requests of the loop with index `i` (at least one client).
    public init(clients: [any RedisKeyedPipelining], logger: Logger, timeout: Double = 0.5, maxKeys: Int = 100_000) {
        precondition(!clients.isEmpty)
        self.clients = clients
        self.logger = logger
        self.timeout = timeout
        refusals = RefusalCache(maxKeys: maxKeys)
        headroom = HeadroomCache(maxKeys: maxKeys)
    }

    /// Admits `checks` at once when every rule's key has headroom here (`HeadroomCache`), and
    /// sends their charges to Redis without waiting; false: ask Redis and wait (`decide`).
    /// `loopIndex`: the caller's loop (its client).
    public func admitAhead(_ checks: [(rule: RateLimitRule, key: RateLimitKey)], loopIndex: Int = 0,
                           now: Int64 = EmbeddedRateLimitStore.now()) -> Bool {
        for (index, check) in checks.enumerated() where !headroom.reserve(check.rule, key: check.key, now: now) {
            for earlier in checks[..<index] { headroom.release(earlier.rule, key: earlier.key) }
            return false
        }
        state.withLock { state in
            for check in checks { state.counts[check.rule.name, default: .init()].allowed += 1 }
        }
        decide(checks, loopIndex: loopIndex, ahead: true) { _ in }
        return true
    }

    /// The first of `checks` whose refusal still stands (answered here, counted as limited),
    /// or nil: ask Redis.
    public func standingRefusal(_ checks: [(rule: RateLimitRule, key: RateLimitKey)],
                                now: Int64 = EmbeddedRateLimitStore.now()) -> (index: Int, decision: GCRA.Decision)? {
        for (index, check) in checks.enumerated() {
            if let decision = refusals.refusal(rule: check.rule.name, key: check.key, now: now) {
                state.withLock { $0.counts[check.rule.name, default: .init()].limited += 1 }
                return (index, decision)
            }
        }
        return nil
    }

    /// The script's SHA-1, for `EVALSHA` (40 bytes on the wire instead of the script; a
    /// server that lost its script cache answers NOSCRIPT and gets `EVAL` once).
    static let scriptSHA: String = {
        let bytes = Array(script.utf8)
        var digest = [UInt8](repeating: 0, count: 20)
        var length: UInt32 = 0
        _ = EVP_Digest(bytes, bytes.count, &digest, &length, EVP_sha1(), nil)
        let hex = Array("0123456789abcdef".utf8)
        return String(decoding: digest.prefix(Int(length)).flatMap { [hex[Int($0 >> 4)], hex[Int($0 & 15)]] }, as: UTF8.self)
    }()

    public static func key(rule: String, _ key: RateLimitKey) -> String {
        keyPrefix + rule + (key.isAddress ? ":a:" : ":u:") + key.value
    }

    /// The decision of each rule for its key, in order, or nil when Redis did not answer.
    /// `loopIndex`: the caller's loop (its client; the completion runs on that loop).
    /// `ahead`: the charges of a request `admitAhead` let through (settled, not counted again).
    public func decide(_ checks: [(rule: RateLimitRule, key: RateLimitKey)], loopIndex: Int = 0, ahead: Bool = false,
                       completion: @escaping @Sendable ([GCRA.Decision]?) -> Void) {
        let client = clients[loopIndex >= 0 ? loopIndex % clients.count : 0]
        let commands = checks.map { check in
            let key = Self.key(rule: check.rule.name, check.key)
            return (key: key, arguments: ["EVALSHA", Self.scriptSHA, "1", key,
                                          String(check.rule.gcra.interval), String(check.rule.gcra.tolerance)])
        }
        client.pipeline(keyed: commands, timeout: timeout) { [self] replies in
            let lostScript = replies.contains { reply in
                if case .failure(.server(let message)) = reply { return message.hasPrefix("NOSCRIPT") }
                return false
            }
            guard lostScript else { return finish(checks, replies, ahead: ahead, completion) }
            // A server without the script (restarted, failed over, flushed): EVAL loads it.
            // NOSCRIPT ran nothing, so nothing is counted twice.
            let loading = commands.map { (key: $0.key, arguments: ["EVAL", Self.script] + $0.arguments.dropFirst(2)) }
            client.pipeline(keyed: loading, timeout: timeout) { [self] replies in finish(checks, replies, ahead: ahead, completion) }
        }
    }

    /// The replies as decisions: counted, refusals remembered (see `RefusalCache`), then
    /// handed to `completion` (nil when any command failed).
    private func finish(_ checks: [(rule: RateLimitRule, key: RateLimitKey)], _ replies: [Result<RedisReply, RedisError>],
                        ahead: Bool, _ completion: @escaping @Sendable ([GCRA.Decision]?) -> Void) {
        var decisions: [GCRA.Decision] = []
        var failure: String?
        let now = EmbeddedRateLimitStore.now()
        for (check, reply) in zip(checks, replies) {
            var decision: GCRA.Decision?
            switch reply {
            case .success(let value):
                decision = Self.decision(value, check.rule.gcra)
                if decision == nil, failure == nil { failure = "unexpected reply to the rate-limit script" }
            case .failure(let error):
                if failure == nil { failure = error.description }
            }
            headroom.learn(check.rule, key: check.key, decision, reserved: ahead, now: now)
            if let decision {
                decisions.append(decision)
                refusals.remember(rule: check.rule.name, key: check.key, decision, now: now)
            }
        }
        // A charge sent ahead was counted when its request was admitted.
        if ahead { return completion(failure == nil ? decisions : nil) }
        record(rules: checks.map(\.rule), decisions: failure == nil ? decisions : nil, failure: failure)
        completion(failure == nil ? decisions : nil)
    }

    static func decision(_ reply: RedisReply, _ gcra: GCRA) -> GCRA.Decision? {
        guard let items = reply.array, items.count == 3, let allowed = items[0].integer,
              let spent = items[1].integer, let retry = items[2].integer else { return nil }
        if allowed == 1 {
            return GCRA.Decision(allowed: true, tat: 0, remaining: max(0, (gcra.tolerance - spent) / gcra.interval),
                                 resetMicroseconds: spent, retryAfterMicroseconds: 0)
        }
        return GCRA.Decision(allowed: false, tat: 0, remaining: 0, resetMicroseconds: spent, retryAfterMicroseconds: retry)
    }

    private func record(rules: [RateLimitRule], decisions: [GCRA.Decision]?, failure: String?) {
        let change: Bool? = state.withLock { state in
            if let decisions {
                for (rule, decision) in zip(rules, decisions) {
                    if decision.allowed { state.counts[rule.name, default: .init()].allowed += 1 }
                    else { state.counts[rule.name, default: .init()].limited += 1 }
                }
            } else {
                for rule in rules { state.counts[rule.name, default: .init()].unavailable += 1 }
            }
            let available = decisions != nil
            guard available != state.available else { return nil }
            state.available = available
            return available
        }
        if change == false {
            logger.error("rate-limit store unavailable; rate_limits.on_unavailable applies", metadata: ["reason": "\(failure ?? "-")"])
        } else if change == true {
            logger.notice("rate-limit store answers again")
        }
    }

    /// Decisions by rule name (this instance's), for `/metrics`.
    public func counts() -> [String: EmbeddedRateLimitStore.Counts] { state.withLock { $0.counts } }
}
