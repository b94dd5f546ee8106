import PortcullisRedis

/// The Redis key schema: a PUBLIC interface. Any program can revoke by writing
/// these keys (and, for an immediate effect, publishing on the channel), for
/// example with redis-cli; every gateway then enforces it. See REDIS-SCHEMA.md.
///
/// Keys (one per revocation; the key expires with the credential, `EXAT` = epoch seconds):
///
///     portcullis:revoked:jti:<jti>            value: anything ("1")      expires at the token's exp
///     portcullis:revoked:session:<session>    value: anything ("1")      expires at the session's end
///     portcullis:revoked:subject:<subject>    value: <before> (decimal epoch seconds; credentials
///                                             with iat < before are revoked)  expires when the last
///                                             such credential has expired
///
/// A key without an expiry is enforced until it is deleted.
///
/// Channel `portcullis:revocations`, one message per revocation (ids last: they may contain spaces;
/// on a cluster gateways announce with `SPUBLISH` on the sharded channel of that name and
/// listen to both it and the classic one, see `announcement`):
///
///     jti <until> <jti>
///     session <until> <session>
///     subject <before> <until> <subject>
///     unrevoke jti|session|subject <id>       (the key was deleted: forget that entry)
///     resync                                  (re-read every key: after deletions, bulk imports)
///
/// The log: the same messages, in order, in `logGroups` Redis Streams
/// `portcullis:revocation-log:{<g>}` (one field `m`; a change's group is its key's hash
/// slot modulo `logGroups`, so one target's changes stay in order in one stream). Every
/// gateway writes its changes there too and follows the streams with a cursor each.
///
/// Gateways subscribe to the channel and apply messages at once (< 1 ms across
/// instances); they read every key with `SCAN` only at start and after a reconnection of
/// the data connection (a failover, a restart), and otherwise catch up from their cursors
/// (every `catchUpInterval`, and at once after the subscription comes back): a change
/// whose message was missed is applied from the log, in order, without scanning. A
/// cursor older than what a stream trimmed (`MAXLEN ~ logLength`) re-reads every key.
/// With `notify-keyspace-events` (`K` and `$` or `A`) plain `SET`s of the keys are picked
/// up too. A write that is neither logged, published nor notified is enforced after the
/// next full read (a reconnection, a `resync` message).
public enum RedisRevocationSchema {
    public static let keyPrefix = "portcullis:revoked:"
    public static let channel = "portcullis:revocations"

    /// Streams of the log (each in its own slot on a cluster: `{g}` is its hash tag).
    public static let logGroups = 16
    /// Entries a stream keeps, about (`XADD … MAXLEN ~`).
    public static let logLength = 100_000

    public static func logKey(group: Int) -> String { "portcullis:revocation-log:{\(group)}" }

    /// The stream that logs the changes of the key `key`.
    public static func logKey(forKey key: String) -> String { logKey(group: HashSlot.of(key) % logGroups) }

    /// Appends `message` to the log of `key`'s group.
    static func logCommand(key: String, message: String) -> [String] {
        ["XADD", logKey(forKey: key), "MAXLEN", "~", String(logLength), "*", "m", message]
    }

    public static func key(for target: RevocationTarget) -> String {
        switch target {
        case .token(let id): return keyPrefix + "jti:" + id
        case .session(let id): return keyPrefix + "session:" + id
        case .subject(let s): return keyPrefix + "subject:" + s
        }
    }

    /// The pub/sub message announcing an undo (the key is already deleted).
    public static func message(undo target: RevocationTarget) -> String {
        switch target {
        case .token(let id): return "unrevoke jti \(id)"
        case .session(let id): return "unrevoke session \(id)"
        case .subject(let s): return "unrevoke subject \(s)"
        }
    }

    public static func key(for revocation: Revocation) -> String {
        switch revocation {
        case .token(let id, _): return keyPrefix + "jti:" + id
        case .session(let id, _): return keyPrefix + "session:" + id
        case .subject(let s, _, _): return keyPrefix + "subject:" + s
        }
    }

    /// The pub/sub message announcing `revocation` (with `until` resolved).
    public static func message(for revocation: Revocation) -> String {
        switch revocation {
        case .token(let id, let until): return "jti \(until) \(id)"
        case .session(let id, let until): return "session \(until) \(id)"
        case .subject(let s, let before, let until): return "subject \(before) \(until ?? Int64.max) \(s)"
        }
    }

    enum Announcement: Equatable {
        case revocation(Revocation)
        case undo(RevocationTarget)
        case resync
    }

    static func parse(message: String) -> Announcement? {
        if message == "resync" { return .resync }
        let parts = message.split(separator: " ", maxSplits: 1)
        guard parts.count == 2 else { return nil }
        let rest = parts[1]
        switch parts[0] {
        case "unrevoke":
            let f = rest.split(separator: " ", maxSplits: 1)
            guard f.count == 2, !f[1].isEmpty else { return nil }
            switch f[0] {
            case "jti": return .undo(.token(String(f[1])))
            case "session": return .undo(.session(String(f[1])))
            case "subject": return .undo(.subject(String(f[1])))
            default: return nil
            }
        case "jti", "session":
            let f = rest.split(separator: " ", maxSplits: 1)
            guard f.count == 2, let until = Int64(f[0]) else { return nil }
            let id = String(f[1])
            return .revocation(parts[0] == "jti" ? .token(id: id, until: until) : .session(id: id, until: until))
        case "subject":
            let f = rest.split(separator: " ", maxSplits: 2)
            guard f.count == 3, let before = Int64(f[0]), let until = Int64(f[1]) else { return nil }
            return .revocation(.subject(String(f[2]), before: before, until: until))
        default:
            return nil
        }
    }

    /// Rebuilds a revocation from a key, its value and its `EXPIRETIME`
    /// (-1: no expiry → kept until deleted; -2: gone).
    static func revocation(key: String, value: String?, expireTime: Int64) -> Revocation? {
        guard key.hasPrefix(keyPrefix), expireTime != -2 else { return nil }
        let until = expireTime == -1 ? Int64.max : expireTime
        let rest = key.dropFirst(keyPrefix.count)
        if rest.hasPrefix("jti:") { return .token(id: String(rest.dropFirst(4)), until: until) }
        if rest.hasPrefix("session:") { return .session(id: String(rest.dropFirst(8)), until: until) }
        if rest.hasPrefix("subject:") {
            guard let value, let before = Int64(value) else { return nil }
            return .subject(String(rest.dropFirst(8)), before: before, until: until)
        }
        return nil
    }

    /// Keeps the latest `before` and the latest expiry when a subject is revoked again.
    static let subjectScript = """
    local before = tonumber(ARGV[1])
    local untilAt = tonumber(ARGV[2])
    local cur = tonumber(redis.call('GET', KEYS[1]) or '')
    if cur and cur > before then before = cur end
    local exp = redis.call('EXPIRETIME', KEYS[1])
    if exp > untilAt then untilAt = exp end
    redis.call('SET', KEYS[1], string.format('%d', before), 'EXAT', untilAt)
    return before
    """

    /// The announcement of `text`: a `PUBLISH` on the channel, or on a cluster (`sharded`) an
    /// `SPUBLISH`, which the master of the channel's slot delivers to the gateways subscribed
    /// there (`SSUBSCRIBE`) without crossing the cluster bus to every node (A→B on loopback:
    /// p99 1.5–1.9 ms, max 3.5 ms, against 2.1–5.1 ms and up to 44 ms through the bus,
    /// `Benchmarks/load/propagation.py --cluster`). Gateways on a cluster listen to both: an
    /// app's `PUBLISH` still reaches them.
    static func announcement(_ text: String, sharded: Bool) -> [String] {
        [sharded ? "SPUBLISH" : "PUBLISH", channel, text]
    }

    /// The commands that store, log and announce `revocation` (until resolved).
    static func writeCommands(for revocation: Revocation, sharded: Bool = false) -> [[String]] {
        let key = key(for: revocation)
        let store: [String]
        switch revocation {
        case .token(_, let until), .session(_, let until):
            store = ["SET", key, "1", "EXAT", String(until)]
        case .subject(_, let before, let until):
            store = ["EVAL", subjectScript, "1", key, String(before), String(until ?? Int64.max)]
        }
        let text = message(for: revocation)
        return [store, logCommand(key: key, message: text), announcement(text, sharded: sharded)]
    }

    /// The commands that delete, log and announce the undo of `target`.
    static func undoCommands(for target: RevocationTarget, sharded: Bool = false) -> [[String]] {
        let key = key(for: target)
        let text = message(undo: target)
        return [["DEL", key], logCommand(key: key, message: text), announcement(text, sharded: sharded)]
    }
}
