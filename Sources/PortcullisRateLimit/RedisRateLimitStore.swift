internal import COpenSSL
import Logging
import PortcullisCore
import PortcullisIO
import PortcullisRedis

/// The rate-limit state of a fleet (`store.redis`, standalone, Sentinel or Cluster): each
/// key's TAT (see `GCRA`) in Redis, read and moved by a script, so every instance enforces
/// the same budget and none can overwrite another's count (the script runs atomically on
/// the server, with the server's clock: instances' clocks do not matter).
///
/// One script call charges many keys: the charges a loop's pass produces (every request it
/// read, each rule's key) leave together at the end of the pass, as one call per server on
/// standalone and Sentinel Redis, one per slot on a cluster (a script's keys must share a
/// slot there; `RedisKeyedPipelining.routesBySlot`). Redis's cost is mostly per call (the
/// command, the script's start): one call for a pass's requests instead of one each (about
/// 11 keys a call in the RS256 load row with 64 connections).
/// Keys are charged in the order they were asked for, so a key twice in a pass is charged
/// twice, the second after the first.
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
    /// Standing refusals and headroom, from Redis's answers (see `KeyPicture`).
    let picture: KeyPicture
    /// Charges waiting for the end of their loop's pass, by loop index (= client index).
    private let batches: [LoopBatch]
    /// At most this many keys in one script call (its reply is 3 integers per key).
    static let maxKeysPerCall = 64

    struct State {
        var available = true
        var counts: [String: EmbeddedRateLimitStore.Counts] = [:]
    }

    /// Keys live under this prefix (`portcullis:ratelimit:<rule>:<u|a>:<value>`), each with
    /// an expiry at its TAT: an idle key leaves Redis by itself.
    public static let keyPrefix = "portcullis:ratelimit:"

    /// KEYS: the keys to charge, in order. ARGV: each key's interval and tolerance in
    /// microseconds (2 per key). Returns 3 integers per key: allowed (1/0), microseconds the
    /// budget is spent ahead (allowed) or until whole (refused), microseconds until a retry
    /// (0 when allowed). With one key, exactly the reply of a single GCRA step.
    static let script = """
    local t = redis.call('TIME')
    local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
    local out = {}
    for i = 1, #KEYS do
      local interval = tonumber(ARGV[2 * i - 1])
      local tolerance = tonumber(ARGV[2 * i])
      local tat = tonumber(redis.call('GET', KEYS[i])) or now
      if tat < now then tat = now end
      local ahead = tat + interval - now
      if ahead > tolerance then
        out[#out + 1] = 0; out[#out + 1] = tat - now; out[#out + 1] = ahead - tolerance
      else
        redis.call('SET', KEYS[i], string.format('%d', tat + interval), 'PX', math.max(1, math.ceil(ahead / 1000)))
        out[#out + 1] = 1; out[#out + 1] = ahead; out[#out + 1] = 0
      end
    end
    return out
    """

    /// `clients[i]` serves requests of the loop with index `i` (at least one client).
    public init(clients: [any RedisKeyedPipelining], logger: Logger, timeout: Double = 0.5, maxKeys: Int = 100_000) {
        precondition(!clients.isEmpty)
        self.clients = clients
        self.logger = logger
        self.timeout = timeout
        picture = KeyPicture(maxKeys: maxKeys)
        batches = clients.indices.map { LoopBatch(clientIndex: $0) }
        for batch in batches { batch.store = self }
    }

    /// A request's way in (see `KeyPicture`): refused at once by a refusal Redis gave that
    /// still stands (counted as limited); admitted ahead when `mayGoAhead` and every rule's
    /// key has headroom here, its charges sent to Redis without waiting (`loop`: as for
    /// `decide`); else `.ask`: the caller asks Redis with `decide` and waits.
    public func admit(_ checks: [(rule: RateLimitRule, key: RateLimitKey)], loop: EventLoop? = nil, mayGoAhead: Bool = true,
                      now: Int64 = EmbeddedRateLimitStore.now()) -> RateLimitAdmission {
        switch picture.admit(checks, mayGoAhead: mayGoAhead, now: now) {
        case .refused(let index, let decision):
            state.withLock { $0.counts[checks[index].rule.name, default: .init()].limited += 1 }
            return .refused(index: index, decision)
        case .ahead:
            decide(checks, loop: loop, ahead: true) { _ in }
            return .ahead
        case .ask:
            return .ask
        }
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
        keyStart(rule: rule, address: key.isAddress) + key.value
    }

    /// What every key of `rule` starts with, for addresses or identities (made once per rule,
    /// see `RateLimitRule.identityKeyPrefix`).
    static func keyStart(rule: String, address: Bool) -> String {
        keyPrefix + rule + (address ? ":a:" : ":u:")
    }

    /// `key(rule:_:)` from the rule's prefix made once (one concatenation per charge).
    @inline(__always)
    static func key(_ rule: RateLimitRule, _ key: RateLimitKey) -> String {
        (key.isAddress ? rule.addressKeyPrefix : rule.identityKeyPrefix) + key.value
    }

    /// The decision of each rule for its key, in order, or nil when Redis did not answer.
    /// `loop`: the caller's loop, on whose queue the caller runs (a request's decision); its
    /// client sends the charges and the completion runs there. Inside one of its passes the
    /// charges wait for the pass's end and leave with the others (see the type's comment);
    /// outside a pass they leave now; nil (tests): the first client, now.
    /// `ahead`: the charges of a request `admit` let through ahead (settled, not counted again;
    /// `completion` gets nil).
    public func decide(_ checks: [(rule: RateLimitRule, key: RateLimitKey)], loop: EventLoop? = nil,
                       ahead: Bool = false, completion: @escaping @Sendable ([GCRA.Decision]?) -> Void) {
        let index = (loop?.index ?? 0) % clients.count
        let charge = Charge(checks: checks, ahead: ahead, completion: completion)
        if let loop, loop.inPass {
            let batch = batches[index]
            if batch.pending.isEmpty { loop.atPassEnd(batch) }
            batch.pending.append(charge)
            return
        }
        send([charge], clientIndex: index)
    }

    /// One request's charges: its rules' keys, and where their decisions go.
    struct Charge {
        let checks: [(rule: RateLimitRule, key: RateLimitKey)]
        let ahead: Bool
        let completion: @Sendable ([GCRA.Decision]?) -> Void
    }

    /// Sends `charges` as few script calls (see the type's comment), and gives each charge
    /// its replies, in the order of its checks.
    func send(_ charges: [Charge], clientIndex: Int) {
        let client = clients[clientIndex]
        // Every key of every charge, in order, as (charge, check, key), grouped into calls.
        var groups: [[(charge: Int, check: Int, key: String)]] = []
        var bySlot: [Int: Int] = [:]  // slot -> open group (cluster only)
        for (c, charge) in charges.enumerated() {
            for (k, check) in charge.checks.enumerated() {
                let key = Self.key(check.rule, check.key)
                let item = (charge: c, check: k, key: key)
                if client.routesBySlot {
                    let slot = HashSlot.of(key)
                    if let open = bySlot[slot], groups[open].count < Self.maxKeysPerCall {
                        groups[open].append(item)
                    } else {
                        bySlot[slot] = groups.count
                        groups.append([item])
                    }
                } else if let last = groups.indices.last, groups[last].count < Self.maxKeysPerCall {
                    groups[last].append(item)
                } else {
                    groups.append([item])
                }
            }
        }
        guard !groups.isEmpty else {
            for charge in charges { finish(charge, [], failure: nil) }
            return
        }
        let commands = groups.map { group in
            var arguments = ["EVALSHA", Self.scriptSHA, String(group.count)]
            arguments.reserveCapacity(3 + 3 * group.count)
            for item in group { arguments.append(item.key) }
            for item in group {
                let rule = charges[item.charge].checks[item.check].rule
                arguments.append(rule.intervalArgument)
                arguments.append(rule.toleranceArgument)
            }
            return (key: group[0].key, arguments: arguments)
        }
        let sent = groups
        client.pipeline(keyed: commands, timeout: timeout) { [self] replies in
            let lost = replies.indices.filter { index in
                if case .failure(.server(let message)) = replies[index] { return message.hasPrefix("NOSCRIPT") }
                return false
            }
            guard !lost.isEmpty else { return deliver(charges, sent, replies) }
            // A server without the script (restarted, failed over, flushed; on a cluster one
            // master of several): EVAL loads it, for the calls it refused only. NOSCRIPT ran
            // nothing and the other calls ran once, so nothing is counted twice.
            let loading = lost.map { (key: commands[$0].key, arguments: ["EVAL", Self.script] + commands[$0].arguments.dropFirst(2)) }
            client.pipeline(keyed: loading, timeout: timeout) { [self] retried in
                var merged = replies
                for (index, reply) in zip(lost, retried) { merged[index] = reply }
                deliver(charges, sent, merged)
            }
        }
    }

    /// Reads each call's reply (3 integers per key) as the decisions of its charges' checks.
    private func deliver(_ charges: [Charge], _ groups: [[(charge: Int, check: Int, key: String)]],
                         _ replies: [Result<RedisReply, RedisError>]) {
        var decided = charges.map { [GCRA.Decision?](repeating: nil, count: $0.checks.count) }
        var failures = [String?](repeating: nil, count: charges.count)
        for (group, reply) in zip(groups, replies) {
            switch reply {
            case .success(let value):
                if let items = value.array, items.count == 3 * group.count {
                    for (j, item) in group.enumerated() {
                        let rule = charges[item.charge].checks[item.check].rule
                        if let decision = Self.decision(items, at: 3 * j, rule.gcra) {
                            decided[item.charge][item.check] = decision
                            continue
                        }
                        if failures[item.charge] == nil { failures[item.charge] = Self.unexpectedReply }
                    }
                } else {
                    for item in group where failures[item.charge] == nil { failures[item.charge] = Self.unexpectedReply }
                }
            case .failure(let error):
                for item in group where failures[item.charge] == nil { failures[item.charge] = error.description }
            }
        }
        for (index, charge) in charges.enumerated() {
            finish(charge, decided[index], failure: failures[index])
        }
    }

    static let unexpectedReply = "unexpected reply to the rate-limit script"

    /// A charge's decisions (nil where Redis gave none; then `failure` says why): counted,
    /// the picture told (see `KeyPicture`), then handed to the
    /// charge's completion (nil when any check failed).
    private func finish(_ charge: Charge, _ decided: [GCRA.Decision?], failure: String?) {
        let now = EmbeddedRateLimitStore.now()
        for (check, decision) in zip(charge.checks, decided) {
            picture.learn(check.rule, key: check.key, decision, reserved: charge.ahead, now: now)
        }
        // A charge sent ahead was counted when its request was admitted; nobody waits for it.
        if charge.ahead { return charge.completion(nil) }
        let decisions = failure == nil ? decided.compactMap { $0 } : nil
        record(rules: charge.checks.map(\.rule), decisions: decisions, failure: failure)
        charge.completion(decisions)
    }

    /// The decision in `items[offset..<offset + 3]` (the script's three integers for a key).
    static func decision(_ items: [RedisReply], at offset: Int, _ gcra: GCRA) -> GCRA.Decision? {
        guard offset + 3 <= items.count, let allowed = items[offset].integer, let spent = items[offset + 1].integer,
              let retry = items[offset + 2].integer else { return nil }
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
    /// (The requests admitted ahead are counted by `picture`, under its shard locks.)
    public func counts() -> [String: EmbeddedRateLimitStore.Counts] {
        var total = state.withLock { $0.counts }
        for (rule, counts) in picture.tallies() { total[rule, default: .init()].allowed += counts.allowed }
        return total
    }
}

/// The charges one loop's pass produced, sent together when the pass ends (see
/// `RedisRateLimitStore`). Only touched on its loop's queue: `decide` appends there (its
/// callers run on the request's loop) and the loop calls `passEnded` there.
final class LoopBatch: PassEndTarget, @unchecked Sendable {
    // @unchecked Sendable: confined to one loop's queue (see the type comment).
    var pending: [RedisRateLimitStore.Charge] = []
    let clientIndex: Int
    /// The store; a batch whose store was let go answers its charges as unavailable.
    weak var store: RedisRateLimitStore?

    init(clientIndex: Int) { self.clientIndex = clientIndex }

    func passEnded() {
        var charges: [RedisRateLimitStore.Charge] = []
        swap(&charges, &pending)
        guard let store else {
            for charge in charges { charge.completion(nil) }
            return
        }
        store.send(charges, clientIndex: clientIndex)
    }
}
