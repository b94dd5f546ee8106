import PortcullisCore

/// A rule's key, as the tables hold it.
struct RuleKey: Hashable {
    let rule: String
    let key: RateLimitKey
}

/// Per-key rate-limit state (the embedded store's TATs, the shared store's `KeyPicture`):
/// a map split into 16 shards, each behind its own lock held for one lookup and
/// update (no I/O under it), and bounded: a shard that is full when a new key comes first
/// forgets its idle entries (`isIdle`), then, if that was not enough, an eighth of its
/// entries (counted in `evictions`). Each shard also keeps tallies by rule name, under the
/// same lock.
///
/// Threading: any thread.
final class KeyTable<Value>: @unchecked Sendable {
    // @unchecked Sendable: each shard's fields only under its lock.
    final class Shard {
        let lock = Lock()
        var entries: [RuleKey: Value] = [:]
        var tallies = RuleTallies()
        var evictions = 0
    }

    private let shards: [Shard]
    private let capacityPerShard: Int
    static var shardCount: Int { 16 }

    init(maxKeys: Int) {
        shards = (0..<Self.shardCount).map { _ in Shard() }
        capacityPerShard = max(8, maxKeys / Self.shardCount)
    }

    /// Runs `body` under the key's shard lock with its entry (nil: none) and the shard's
    /// tallies; what `body` leaves in the entry is kept (nil removes it).
    func update<Result>(_ key: RuleKey, isIdle: (Value) -> Bool,
                        _ body: (inout Value?, inout RuleTallies) -> Result) -> Result {
        let shard = shards[Int(UInt(bitPattern: key.hashValue) % UInt(Self.shardCount))]
        return shard.lock.withLock {
            // Below capacity, the entry is updated in place: one hash and probe per call.
            guard shard.entries.count >= capacityPerShard else { return body(&shard.entries[key], &shard.tallies) }
            var value = shard.entries[key]
            let existed = value != nil
            let result = body(&value, &shard.tallies)
            if let value {
                if !existed { makeRoom(shard, isIdle: isIdle) }
                shard.entries[key] = value
            } else if existed {
                shard.entries[key] = nil
            }
            return result
        }
    }

    private func makeRoom(_ shard: Shard, isIdle: (Value) -> Bool) {
        shard.entries = shard.entries.filter { !isIdle($0.value) }
        guard shard.entries.count >= capacityPerShard else { return }
        let drop = max(1, capacityPerShard / 8)
        for key in shard.entries.keys.prefix(drop) { shard.entries[key] = nil }
        shard.evictions += drop
    }

    /// The tallies by rule name, summed over the shards.
    func tallies() -> [String: EmbeddedRateLimitStore.Counts] {
        var total: [String: EmbeddedRateLimitStore.Counts] = [:]
        for shard in shards {
            shard.lock.withLock {
                for (rule, counts) in shard.tallies.byRule {
                    total[rule, default: .init()].allowed += counts.allowed
                    total[rule, default: .init()].limited += counts.limited
                    total[rule, default: .init()].unavailable += counts.unavailable
                }
            }
        }
        return total
    }

    var evictions: Int { shards.reduce(0) { sum, shard in sum + shard.lock.withLock { shard.evictions } } }
    var count: Int { shards.reduce(0) { sum, shard in sum + shard.lock.withLock { shard.entries.count } } }
}

/// Decision counts by rule name, as a shard keeps them: a short list searched in order (a
/// configuration has a handful of rules), so counting a decision under the shard's lock
/// costs a comparison of names, not a hashed lookup.
struct RuleTallies {
    private(set) var byRule: [(rule: String, counts: EmbeddedRateLimitStore.Counts)] = []

    /// Adds to `rule`'s counts.
    mutating func add(_ rule: String, allowed: Int = 0, limited: Int = 0) {
        guard let index = byRule.firstIndex(where: { $0.rule == rule }) else {
            return byRule.append((rule, .init(allowed: allowed, limited: limited)))
        }
        byRule[index].counts.allowed += allowed
        byRule[index].counts.limited += limited
    }
}
