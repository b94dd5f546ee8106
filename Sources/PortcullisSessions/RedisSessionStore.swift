import Foundation
import PortcullisCore
import PortcullisRedis

/// Sessions in Redis, shared by every instance (`store.redis`, `store.sentinel` or
/// `store.cluster`; every command and script touches one key, so each runs on its slot's
/// node): one hash
/// per session, `portcullis:session:<id>` (expiring with the session), and one set of ids per
/// user, `portcullis:user-sessions:<user>`. A refresh reads the session, decides with the
/// one rule (`Rotation.decide`, as the embedded store does) and applies the decision with a
/// compare-and-set of the counter it read, so two instances refreshing the same token at
/// once cannot both rotate: the loser reads again and decides again (then `current`, within
/// the grace). The access token of a rotation is made before the compare-and-set (its claims
/// do not depend on the counter) and kept only if it applies.
///
/// The current access token is kept in the hash (a racing refresh on another instance gets
/// the same pair); it is short-lived and Redis already holds the revocation state.
public final class RedisSessionStore: SessionStore, @unchecked Sendable {
    // @unchecked Sendable: the client is thread-safe; everything else is immutable.
    public let client: RedisClient
    let timeout: Double

    static let prefix = "portcullis:session:"
    static let userPrefix = "portcullis:user-sessions:"
    static let fields = ["user", "provider", "device", "created", "used", "expires", "counter", "rotated", "access", "access_expires", "claims", "subject", "id_token"]

    /// With Sentinel: a creation or an end is acknowledged only on a server that is still the
    /// master, once a replica took it (`WAIT 1`) or when the master has none, as revocations
    /// are (see `RedisRevocationStore`): a failover must not bring back a logged-out session.
    let confirmReplication: Bool
    static let replicationWait = ["WAIT", "1", "1000"]

    public init(client: RedisClient, timeout: Double = 2, confirmReplication: Bool = false) {
        self.client = client
        self.timeout = timeout
        self.confirmReplication = confirmReplication
    }

    /// Whether the replies of `WAIT` and `ROLE` (the last two) confirm a replicated write.
    static func replicated(_ replies: [Result<RedisReply, RedisError>]) -> Bool {
        guard replies.count >= 2, case .success(let waited) = replies[replies.count - 2],
              case .success(let role) = replies[replies.count - 1] else { return false }
        guard let fields = role.array, fields.first?.string == "master" else { return false }
        let replicas = fields.count > 2 ? fields[2].array?.count ?? 0 : 0
        return (waited.integer ?? 0) >= 1 || replicas == 0
    }

    public func create(_ record: SessionRecord, maxPerUser: Int,
                       completion: @escaping @Sendable (_ ok: Bool, _ evicted: [SessionRecord]) -> Void) {
        let key = Self.prefix + record.id
        let userKey = Self.userPrefix + record.user
        // The session first (with Sentinel or Cluster, confirmed on its own node), then its
        // user's index and how many ids it holds.
        var commands = [["HSET", key] + Self.values(record), ["EXPIREAT", key, "\(record.expiresAt)"]]
        if confirmReplication { commands += [Self.replicationWait, ["ROLE"]] }
        let indexAt = commands.count
        commands += [
            ["SADD", userKey, record.id],
            // The user's set lives as long as their longest session (GT: never shortened).
            ["EXPIREAT", userKey, "\(record.expiresAt)", "GT"],
            ["EXPIREAT", userKey, "\(record.expiresAt)", "NX"],
            ["SCARD", userKey],
        ]
        client.pipeline(commands, timeout: timeout) { [self] replies in
            // The index too: a session its user's list does not name would escape "sign out
            // everywhere". A creation not acknowledged hands out no token, so its hash is inert.
            let ok = [replies[0], replies[1], replies[indexAt]].allSatisfy { if case .success = $0 { return true } else { return false } }
                && (!confirmReplication || Self.replicated(Array(replies[..<indexAt])))
            guard ok else { return completion(false, []) }
            guard case .success(let count) = replies[indexAt + 3], (count.integer ?? 0) > Int64(maxPerUser) else {
                return completion(true, [])
            }
            cap(user: record.user, keeping: record.id, maxPerUser: maxPerUser) { completion(true, $0) }
        }
    }

    /// Ends the least recently used sessions of `user` past `maxPerUser` (never `keeping`, the
    /// one just made) and forgets ids whose session expired. Each end is its own single-key
    /// script (`endScript`), so it runs on a cluster too; two sign-ins of one user at once may
    /// each end one, so the cap can end one session more than needed, never keep one more.
    private func cap(user: String, keeping: String, maxPerUser: Int,
                     completion: @escaping @Sendable ([SessionRecord]) -> Void) {
        let (client, timeout) = (self.client, self.timeout)
        let userKey = Self.userPrefix + user
        client.send(["SMEMBERS", userKey], timeout: timeout) { [self] reply in
            guard case .success(let value) = reply, let ids = value.array?.compactMap(\.string), !ids.isEmpty else {
                return completion([])
            }
            client.pipeline(ids.map { ["HGET", Self.prefix + $0, "used"] }, timeout: timeout) { [self] replies in
                var live: [(id: String, used: Int64)] = []
                var gone: [String] = []
                for (id, reply) in zip(ids, replies) {
                    guard case .success(let used) = reply else { continue }
                    if let text = used.string, let value = Int64(text) { live.append((id, value)) } else { gone.append(id) }
                }
                let excess = live.count - maxPerUser
                let victims = excess > 0 ? live.filter { $0.id != keeping }.sorted { $0.used < $1.used }.prefix(excess).map(\.id) : []
                if !gone.isEmpty { client.send(["SREM", userKey] + gone, timeout: timeout) { _ in } }
                guard !victims.isEmpty else { return completion([]) }
                client.pipeline(victims.map { ["EVAL", Self.endScript, "1", Self.prefix + $0, user] }, timeout: timeout) { replies in
                    var evicted: [SessionRecord] = []
                    for (id, reply) in zip(victims, replies) {
                        if case .success(let value) = reply, let items = value.array, items.count == Self.fields.count,
                           let old = Self.record(id: id, values: items) {
                            evicted.append(old)
                        }
                    }
                    client.send(["SREM", userKey] + victims, timeout: timeout) { _ in }
                    completion(evicted)
                }
            }
        }
    }

    /// The compare-and-set that applies a `Rotation` decision made on a read: KEYS[1] the
    /// session; ARGV[1] the counter the decision read, ARGV[2] `rotate` or `end`, ARGV[3] the
    /// session id, then for `rotate` the new counter, now, the new access token and its
    /// expiry (the user's index forgets an ended id after, or when next read: one key per
    /// script, so it runs on a cluster). Returns 1 when applied, 0 when the counter moved meanwhile (the
    /// caller reads again and decides again), -1 when the session is gone.
    static let compareAndSetScript = """
    local counter = redis.call('HGET', KEYS[1], 'counter')
    if not counter then return -1 end
    if counter ~= ARGV[1] then return 0 end
    if ARGV[2] == 'rotate' then
      redis.call('HSET', KEYS[1], 'counter', ARGV[4], 'used', ARGV[5], 'rotated', ARGV[5], 'access', ARGV[6], 'access_expires', ARGV[7])
    else
      redis.call('DEL', KEYS[1])
    end
    return 1
    """

    /// How many times a rotation reads again after losing a race (each loss means another
    /// refresh of the session moved it; the next decision is then `current` or `reused`).
    static let compareAndSetAttempts = 4

    public func record(id: String, completion: @escaping @Sendable (SessionFound) -> Void) {
        client.send(["HGETALL", Self.prefix + id], timeout: timeout) { reply in
            guard case .success(let value) = reply else { return completion(.failed) }
            completion(Self.record(id: id, hash: value).map { .found($0) } ?? .missing)
        }
    }

    public func rotate(id: String, counter: UInt64, now: Int64, grace: Int64, idleTimeout: Int64, known: SessionRecord?,
                       next: @escaping @Sendable (SessionRecord) -> SessionRecord,
                       completion: @escaping @Sendable (RotateOutcome) -> Void) {
        let key = Self.prefix + id
        if let known { return rotate(known, key: key, counter: counter, now: now, grace: grace, idleTimeout: idleTimeout,
                                     next: next, completion: completion) }
        record(id: id) { [self] lookup in
            switch lookup {
            case .missing: return completion(.unknown)
            case .failed: return completion(.failed)
            case .found(let found):
                rotate(found, key: key, counter: counter, now: now, grace: grace, idleTimeout: idleTimeout, next: next, completion: completion)
            }
        }
    }

    private func rotate(_ record: SessionRecord, key: String, counter: UInt64, now: Int64, grace: Int64, idleTimeout: Int64,
                        next: @escaping @Sendable (SessionRecord) -> SessionRecord, attempt: Int = 1,
                        completion: @escaping @Sendable (RotateOutcome) -> Void) {
        let decision = Rotation.decide(record, presented: counter, now: now, grace: grace, idleTimeout: idleTimeout)
        if decision == .current { return completion(.current(record)) }
        var applied = record
        var arguments = ["EVAL", Self.compareAndSetScript, "1", key, "\(record.counter)",
                         decision == .rotate ? "rotate" : "end", record.id]
        if decision == .rotate {
            // The access token a rotation issues (its claims do not depend on the counter).
            var moved = record
            moved.counter = counter
            applied = next(moved)
            arguments += ["\(applied.counter)", "\(now)", applied.accessToken, "\(applied.accessExpiresAt)"]
        }
        let result = applied
        client.send(arguments, timeout: timeout) { [self] reply in
            // No answer (unreachable, too slow, an error): it may or may not have been applied.
            guard case .success(let value) = reply, let answer = value.integer else { return completion(.failed) }
            if answer == 1 && decision != .rotate { forgetInIndex(record) }
            switch answer {
            case 1:
                switch decision {
                case .rotate: completion(.rotated(result))
                case .expired: completion(.expired)
                case .reused, .current: completion(.reused(record))
                }
            case 0 where attempt < Self.compareAndSetAttempts:
                // Another refresh moved the session since it was read: decide on what it holds now.
                self.record(id: record.id) { [self] lookup in
                    switch lookup {
                    case .missing: completion(.unknown)
                    case .failed: completion(.failed)
                    case .found(let found):
                        rotate(found, key: key, counter: counter, now: now, grace: grace, idleTimeout: idleTimeout,
                               next: next, attempt: attempt + 1, completion: completion)
                    }
                }
            case 0:
                completion(.failed)
            default:
                completion(.unknown)
            }
        }
    }

    /// KEYS[1] the session; ARGV[1] the user it must belong to ("" for any). Deletes it and
    /// returns its fields (the caller removes the id from the user's index).
    static let endScript = """
    local h = redis.call('HMGET', KEYS[1], 'user','provider','device','created','used','expires','counter','rotated','access','access_expires','claims','subject','id_token')
    if not h[1] or (ARGV[1] ~= '' and h[1] ~= ARGV[1]) then return {} end
    redis.call('DEL', KEYS[1])
    return h
    """

    /// Removes an ended session's id from its user's index (best effort: `list` and the cap
    /// forget ids whose session is gone).
    private func forgetInIndex(_ record: SessionRecord) {
        client.send(["SREM", Self.userPrefix + record.user, record.id], timeout: timeout) { _ in }
    }

    public func end(id: String, user: String?, completion: @escaping @Sendable (SessionEnd) -> Void) {
        let commands = [["EVAL", Self.endScript, "1", Self.prefix + id, user ?? ""]]
            + (confirmReplication ? [Self.replicationWait, ["ROLE"]] : [])
        client.pipeline(commands, timeout: timeout) { [self] replies in
            guard case .success(let value)? = replies.first, let items = value.array else { return completion(.failed) }
            guard items.count == Self.fields.count, let record = Self.record(id: id, values: items) else {
                return completion(.notFound)
            }
            // Ended here but not yet where the next master would have it: not acknowledged.
            forgetInIndex(record)
            if confirmReplication && !Self.replicated(replies) { return completion(.failed) }
            completion(.ended(record))
        }
    }

    public func list(user: String, now: Int64, completion: @escaping @Sendable ([SessionRecord]) -> Void) {
        let (client, timeout) = (self.client, self.timeout)
        client.send(["SMEMBERS", Self.userPrefix + user], timeout: timeout) { reply in
            guard case .success(let value) = reply, let ids = value.array?.compactMap(\.string), !ids.isEmpty else {
                return completion([])
            }
            client.pipeline(ids.map { ["HGETALL", Self.prefix + $0] }, timeout: timeout) { replies in
                var records: [SessionRecord] = []
                var stale: [String] = []
                for (id, reply) in zip(ids, replies) {
                    if case .success(let hash) = reply, let record = Self.record(id: id, hash: hash), record.expiresAt > now {
                        records.append(record)
                    } else if case .success = reply {
                        stale.append(id)  // expired by Redis: its id leaves the user's set
                    }
                }
                if !stale.isEmpty { client.send(["SREM", Self.userPrefix + user] + stale, timeout: timeout) { _ in } }
                completion(records.filter { $0.user == user }.sorted { $0.createdAt < $1.createdAt })
            }
        }
    }

    // MARK: Encoding

    static func values(_ r: SessionRecord) -> [String] {
        ["user", r.user, "provider", r.provider, "device", r.device, "created", "\(r.createdAt)", "used", "\(r.lastUsedAt)",
         "expires", "\(r.expiresAt)", "counter", "\(r.counter)", "rotated", "\(r.rotatedAt)", "access", r.accessToken,
         "access_expires", "\(r.accessExpiresAt)", "claims", r.claims, "subject", r.subject, "id_token", r.idToken]
    }

    /// From HGETALL's flat [name, value, …] reply.
    static func record(id: String, hash: RedisReply) -> SessionRecord? {
        guard let flat = hash.array, !flat.isEmpty, flat.count % 2 == 0 else { return nil }
        var map: [String: RedisReply] = [:]
        for i in stride(from: 0, to: flat.count, by: 2) { if let name = flat[i].string { map[name] = flat[i + 1] } }
        return record(id: id, values: fields.map { map[$0] ?? .null })
    }

    /// From values in `fields` order.
    static func record(id: String, values: [RedisReply]) -> SessionRecord? {
        let text = values.map(\.string)
        func int(_ i: Int) -> Int64? { text[i].flatMap { Int64($0) } }
        guard let user = text[0], let provider = text[1], let device = text[2], let created = int(3), let used = int(4),
              let expires = int(5), let counter = int(6), let rotated = int(7), let accessExpires = int(9) else { return nil }
        return SessionRecord(id: id, user: user, provider: provider, device: device, createdAt: created, lastUsedAt: used,
                             expiresAt: expires, counter: UInt64(max(0, counter)), rotatedAt: rotated,
                             accessToken: text[8] ?? "", accessExpiresAt: accessExpires, claims: text[10] ?? "",
                             subject: text[11] ?? "", idToken: text[12] ?? "")
    }
}
