import Foundation
import PortcullisAuth
import PortcullisCore
import PortcullisEdgeAuth
import PortcullisIO
import PortcullisRedis
import PortcullisStore

/// `portcullis verify`'s revocation check, from outside the running gateway, against what
/// the configuration names: the embedded store's journal (`store.state_dir`, read without
/// being opened for writing, so a gateway running on it is not disturbed) or the Redis keys
/// (`store.redis` / `store.sentinel`, the schema in REDIS-SCHEMA.md). The same entries the
/// gateway checks: the credential's `jti` (else its hash, and the hash an older version
/// used), its session id, and its user's "sign out everywhere" cutoff under each of the
/// user's names (`EdgeAuthenticator.forEachUserName`: the user id as the gateway injects
/// it, the provider's `sub` bare and prefixed). Without a state directory or Redis, revocations live in the running
/// gateway's memory only: not checked, and said so.
public enum RevocationLookup {
    public enum Outcome: Equatable, Sendable {
        /// Checked where `place` says: nothing revokes the credential.
        case notRevoked(place: String)
        /// `entry` (for example `jti abc`) revokes it, found in `place`.
        case revoked(entry: String, place: String)
        /// Not checked, because of `reason`.
        case notChecked(reason: String)
    }

    public static func check(_ configuration: GatewayConfiguration, identity: VerifiedIdentity,
                             now: Int64 = Int64(Date().timeIntervalSince1970), redisTimeout: Double = 3) -> Outcome {
        let maxCredentialLifetime = RevocationPolicy().maxCredentialLifetime  // the store's policy
        let userID = EdgeAuthenticator.userID(identity, prefixProvider: configuration.identity.prefixProvider)
        let tokenIDs = [identity.tokenID ?? identity.credentialHash, identity.legacyCredentialHash].compactMap { $0 }
        let issuedAt = identity.issuedAt.map { Int64($0) }
        // Every name the user may have been signed out everywhere under, as the gateway checks.
        var userNames: [String] = []
        EdgeAuthenticator.forEachUserName(identity, userID: userID) { userNames.append($0); return true }
        if configuration.store.usesRedis {
            return checkRedis(configuration, tokenIDs: tokenIDs, sessionID: identity.sessionID, userNames: userNames,
                              issuedAt: issuedAt, timeout: redisTimeout)
        }
        guard let directory = configuration.store.stateDirectory else {
            return .notChecked(reason: "they are in the running gateway's memory only (no store.state_dir or store.redis)")
        }
        let path = (directory as NSString).appendingPathComponent("revocations.jsonl")
        guard FileManager.default.fileExists(atPath: path) else { return .notRevoked(place: "\(path) (no revocations yet)") }
        let revocations: [Revocation]
        do {
            revocations = try RevocationJournal.read(path: path, now: now,
                                                     maxCredentialLifetime: maxCredentialLifetime) { _ in }
        } catch {
            return .notChecked(reason: "\(error)")
        }
        for revocation in revocations {
            switch revocation {
            case .token(let id, let until) where until > now && tokenIDs.contains(id):
                return .revoked(entry: "jti \(id)", place: path)
            case .session(let id, let until) where until > now && id == identity.sessionID:
                return .revoked(entry: "session \(id)", place: path)
            case .subject(let subject, let before, _) where userNames.contains(subject)
                && revocation.expiry(maxCredentialLifetime: maxCredentialLifetime) > now
                && (issuedAt.map { $0 < before } ?? true):
                return .revoked(entry: "subject \(subject) (credentials issued before \(before))", place: path)
            default:
                continue
            }
        }
        return .notRevoked(place: path)
    }

    private static func checkRedis(_ configuration: GatewayConfiguration, tokenIDs: [String], sessionID: String?,
                                   userNames: [String], issuedAt: Int64?, timeout: Double) -> Outcome {
        let redis: RedisConfiguration
        do { redis = try StoreRevocations.redisConfiguration(configuration.store) } catch {
            return .notChecked(reason: "\(error)")
        }
        var keys = tokenIDs.map { RedisRevocationSchema.key(for: .token($0)) }
        if let sessionID { keys.append(RedisRevocationSchema.key(for: .session(sessionID))) }
        let subjectKeys = Set(userNames.map { RedisRevocationSchema.key(for: .subject($0)) })
        keys.append(contentsOf: userNames.map { RedisRevocationSchema.key(for: .subject($0)) })
        let client = RedisClient(configuration: redis, loop: EventLoop(index: -4))
        client.start()
        defer { client.shutdown() }
        // Never the URL: it may hold a password.
        let place = !configuration.store.clusterNodes.isEmpty ? "Redis (store.cluster)"
            : configuration.store.sentinelMaster.map { "Redis (store.sentinel, master \($0))" } ?? "Redis (store.redis)"
        guard let replies = client.pipelineAndWait(keys.map { ["GET", $0] }, timeout: timeout), replies.count == keys.count else {
            return .notChecked(reason: "\(place) did not answer within \(timeout) s")
        }
        for (key, reply) in zip(keys, replies) {
            switch reply {
            case .failure(let error):
                return .notChecked(reason: "\(place): \(error)")
            case .success(let value):
                guard let text = value.string else { continue }  // nil: no such key
                let name = key.dropFirst(RedisRevocationSchema.keyPrefix.count)  // "jti:<id>"
                let entry = name.firstIndex(of: ":").map { "\(name[..<$0]) \(name[name.index(after: $0)...])" } ?? String(name)
                if subjectKeys.contains(key) {
                    // "Sign out everywhere": credentials issued before `text` (or without iat).
                    guard let before = Int64(text) else { return .revoked(entry: entry, place: place) }
                    if issuedAt.map({ $0 < before }) ?? true { return .revoked(entry: "\(entry) (credentials issued before \(before))", place: place) }
                } else {
                    return .revoked(entry: entry, place: place)
                }
            }
        }
        return .notRevoked(place: place)
    }
}
