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
/// standalone and Sentinel Redis, one per master on a cluster (`clusterScript`, whose keys may
/// lie in several slots of the master it runs on; by slot while the slot map is not known,
/// and again by slot for a call that met a key that moved). Redis's cost is mostly per call
/// (the command, the script's start): one call for a pass's requests instead of one each
/// (about 11 keys a call in the RS256 load row with 64 connections).
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
    static let script = gcra(keys: """
    local keys = KEYS
    local base = 0
    """)

    /// `script` for keys of several slots on one cluster master (one call per master instead of
    /// one per slot): Redis 7's `allow-cross-slot-keys` flag lets a script touch keys of
    /// several slots of the node it runs on. KEYS: the first key (it routes the call). ARGV:
    /// the other keys, then each key's interval and tolerance. A key not served here (the
    /// caller's slot map moved) fails the call before it changed anything (see `gcra`), and
    /// the caller can send its keys again, one call per slot.
    static let clusterScript = gcra(flags: "#!lua flags=allow-cross-slot-keys\n", keys: """
    local n = (#ARGV + 1) / 3
    local keys = {KEYS[1]}
    for i = 2, n do keys[i] = ARGV[i - 1] end
    local base = n - 1
    """)

    /// The GCRA step of both scripts, for `keys` (a Lua array the `keys` preamble sets, with
    /// `base`: where in ARGV the first key's interval and tolerance follow). Every key is read
    /// before any is written, so a script that fails on a key fails before it changed
    /// anything; a key twice is charged twice, the second after the first (`charged`).
    private static func gcra(flags: String = "", keys: String) -> String {
        flags + keys + """

        local t = redis.call('TIME')
        local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
        local stored = {}
        for i = 1, #keys do stored[i] = redis.call('GET', keys[i]) end
        local charged = {}
        local out = {}
        for i = 1, #keys do
          local key = keys[i]
          local interval = tonumber(ARGV[base + 2 * i - 1])
          local tolerance = tonumber(ARGV[base + 2 * i])
          local tat = charged[key] or tonumber(stored[i]) or now
          if tat < now then tat = now end
          local ahead = tat + interval - now
          if ahead > tolerance then
            out[#out + 1] = 0; out[#out + 1] = tat - now; out[#out + 1] = ahead - tolerance
          else
            charged[key] = tat + interval
            redis.call('SET', key, string.format('%d', tat + interval), 'PX', math.max(1, math.ceil(ahead / 1000)))
            out[#out + 1] = 1; out[#out + 1] = ahead; out[#out + 1] = 0
          end
        end
        return out
        """
    }

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
        case .ahead(let units):
            // Checks a lease paid for send nothing; a request paid for entirely, no charge.
            if !units.allPrepaid {
                enqueue(Charge(checks: checks, ahead: true, units: units, admitted: now) { _ in }, loop: loop)
            }
            return .ahead
        case .ask:
            return .ask
        }
    }

    /// The scripts' SHA-1s, for `EVALSHA` (40 bytes on the wire instead of the script; a
    /// server that lost its script cache answers NOSCRIPT and gets `EVAL` once).
    static let scriptSHA = sha1Hex(script)
    static let clusterScriptSHA = sha1Hex(clusterScript)

    static func sha1Hex(_ text: String) -> String {
        let bytes = Array(text.utf8)
        var digest = [UInt8](repeating: 0, count: 20)
        var length: UInt32 = 0
        _ = EVP_Digest(bytes, bytes.count, &digest, &length, EVP_sha1(), nil)
        let hex = Array("0123456789abcdef".utf8)
        return String(decoding: digest.prefix(Int(length)).flatMap { [hex[Int($0 >> 4)], hex[Int($0 & 15)]] }, as: UTF8.self)
    }

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
        enqueue(Charge(checks: checks, ahead: ahead, completion: completion), loop: loop)
    }

    private func enqueue(_ charge: Charge, loop: EventLoop?) {
        let index = (loop?.index ?? 0) % clients.count
        if let loop, loop.inPass {
            let batch = batches[index]
            if batch.pending.isEmpty { loop.atPassEnd(batch) }
            batch.pending.append(charge)
            return
        }
        send([charge], clientIndex: index)
    }

    /// One request's charges: its rules' keys, and where their decisions go. A request
    /// admitted ahead (`ahead`, at `admitted`) may charge a lease of several units for a
    /// check, or nothing for one a lease paid for (`units`; nil: one unit each).
    struct Charge {
        let checks: [(rule: RateLimitRule, key: RateLimitKey)]
        let ahead: Bool
        var units: LeaseUnits? = nil
        var admitted: Int64 = 0
        let completion: @Sendable ([GCRA.Decision]?) -> Void

        func units(of check: Int) -> Int64 { units?[check] ?? 1 }
    }

    /// Sends `charges` as few script calls (see the type's comment), and gives each charge
    /// its replies, in the order of its checks.
    func send(_ charges: [Charge], clientIndex: Int) {
        let client = clients[clientIndex]
        // Every key of every charge, in order: one server takes them all together; a cluster's
        // master takes the keys of its slots (by slot while the map is not known here).
        var items: [Item] = []
        items.reserveCapacity(charges.count)
        for (c, charge) in charges.enumerated() {
            for (k, check) in charge.checks.enumerated() {
                let units = charge.units(of: k)
                if units > 0 { items.append(Item(charge: c, check: k, units: units, key: Self.key(check.rule, check.key))) }
            }
        }
        let calls = client.routesBySlot
            ? Self.calls(items) { slot in client.master(ofSlot: slot) ?? (-1 - slot) }
            : Self.calls(items, slotted: false) { _ in 0 }
        guard !calls.isEmpty else {
            for charge in charges { finish(charge, [], failure: nil) }
            return
        }
        run(calls, charges, on: client) { [self] calls, replies in deliver(charges, calls, replies) }
    }

    /// One key of one check of a charge, and the units it charges.
    struct Item: Sendable {
        let charge: Int, check: Int
        var units: Int64 = 1
        let key: String
    }

    /// One script call: its keys, in order; whether they lie in several slots (on a cluster,
    /// keys of one master: `clusterScript`).
    struct Call: Sendable {
        var items: [Item]
        var spansSlots = false
    }

    /// `items` as calls of at most `maxKeysPerCall` keys, in order, those of one `group` (of
    /// their slot) together; `slotted`: keys have slots (a cluster), so a call whose keys lie
    /// in several is marked.
    static func calls(_ items: [Item], slotted: Bool = true, group: (_ slot: Int) -> Int) -> [Call] {
        var calls: [Call] = []
        var open: [Int: (call: Int, slot: Int)] = [:]  // group -> open call, and its first key's slot
        for item in items {
            let slot = slotted ? HashSlot.of(item.key) : 0
            let key = group(slot)
            if let (index, first) = open[key], calls[index].items.count < maxKeysPerCall {
                calls[index].items.append(item)
                if first != slot { calls[index].spansSlots = true }
            } else {
                open[key] = (calls.count, slot)
                calls.append(Call(items: [item]))
            }
        }
        return calls
    }

    /// Sends `calls` and hands `done` every call with its reply. A server without the script
    /// (restarted, failed over, flushed; on a cluster one master of several) answers NOSCRIPT:
    /// EVAL loads it, for the calls it refused only (NOSCRIPT ran nothing and the other calls
    /// ran once, so nothing is counted twice). A call spanning slots that the server refused
    /// (its keys not all on the master it reached, the slot map having moved since, see
    /// `isRefusal`) ran nothing either: its keys go again, one call per slot.
    private func run(_ calls: [Call], _ charges: [Charge], on client: any RedisKeyedPipelining,
                     then done: @escaping @Sendable ([Call], [Result<RedisReply, RedisError>]) -> Void) {
        let commands = calls.map { Self.command($0, charges) }
        client.pipeline(keyed: commands.map { (key: $0.key, arguments: $0.arguments) }, timeout: timeout) { [self] replies in
            let lost = replies.indices.filter { index in
                if case .failure(.server(let message)) = replies[index] { return message.hasPrefix("NOSCRIPT") }
                return false
            }
            let split: @Sendable ([Result<RedisReply, RedisError>]) -> Void = { [self] replies in
                let refused = calls.indices.filter { calls[$0].spansSlots && Self.isRefusal(replies[$0]) }
                guard !refused.isEmpty else { return done(calls, replies) }
                let kept = calls.indices.filter { !refused.contains($0) }
                let again = Self.calls(refused.flatMap { calls[$0].items }) { slot in slot }
                run(again, charges, on: client) { retried, answers in
                    done(kept.map { calls[$0] } + retried, kept.map { replies[$0] } + answers)
                }
            }
            guard !lost.isEmpty else { return split(replies) }
            let loading = lost.map { index in
                (key: commands[index].key, arguments: ["EVAL", commands[index].script] + commands[index].arguments.dropFirst(2))
            }
            client.pipeline(keyed: loading, timeout: timeout) { retried in
                var merged = replies
                for (index, reply) in zip(lost, retried) { merged[index] = reply }
                split(merged)
            }
        }
    }

    /// The command for `call`: `script` with every key declared, or, for keys of several slots,
    /// `clusterScript` with the first declared (it routes the call) and the others as arguments.
    private static func command(_ call: Call, _ charges: [Charge]) -> (key: String, arguments: [String], script: String) {
        let spans = call.spansSlots
        var arguments = ["EVALSHA", spans ? clusterScriptSHA : scriptSHA, spans ? "1" : String(call.items.count)]
        arguments.reserveCapacity(3 + 3 * call.items.count)
        for item in call.items { arguments.append(item.key) }
        for item in call.items {
            // `units` requests at once are one GCRA step of `units` intervals.
            let rule = charges[item.charge].checks[item.check].rule
            arguments.append(item.units == 1 ? rule.intervalArgument : String(rule.gcra.interval &* item.units))
            arguments.append(rule.toleranceArgument)
        }
        return (call.items[0].key, arguments, spans ? clusterScript : script)
    }

    /// Whether a call spanning slots was refused by the server, which then ran none of its
    /// writes: a key not served where it ran (the script reads every key before it writes
    /// one), a server that does not take the script's flag (before Redis 7), memory full
    /// (checked before a script that writes starts). Not a timeout or a lost connection:
    /// the call may have run.
    static func isRefusal(_ reply: Result<RedisReply, RedisError>) -> Bool {
        if case .failure(.server) = reply { return true }
        return false
    }

    /// Reads each call's reply (3 integers per key) as the decisions of its charges' checks.
    private func deliver(_ charges: [Charge], _ calls: [Call], _ replies: [Result<RedisReply, RedisError>]) {
        var decided = charges.map { [GCRA.Decision?](repeating: nil, count: $0.checks.count) }
        var failures = [String?](repeating: nil, count: charges.count)
        for (call, reply) in zip(calls, replies) {
            let group = call.items
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
        for (index, (check, decision)) in zip(charge.checks, decided).enumerated() {
            let units = charge.units(of: index)
            guard units > 0 else { continue }  // paid for by a lease: nothing was sent
            picture.learn(check.rule, key: check.key, decision, reserved: charge.ahead, units: units,
                          admitted: charge.admitted, now: now)
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
