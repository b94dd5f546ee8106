import PortcullisEdgeAuth
import Foundation
import Logging
import PortcullisAuth
import PortcullisIO
import PortcullisProxy
import PortcullisRedis
import PortcullisStore
import PortcullisSessions
import PortcullisCore

/// The revocation check and logout revocation over a `RevocationStore`
/// (embedded by default, Redis when `store.redis` or `store.sentinel` is set).
///
/// What a credential is known by: its `jti`; else its `sid` (a session or
/// device); else the hex SHA-256 prefix of the credential itself
/// (`VerifiedIdentity.credentialHash`), so a Google or Apple ID token, which
/// carries no `jti`, can still be revoked. "Sign out everywhere" revokes the
/// subject: the user id the gateway injects (`X-User-Id`'s value).
public final class StoreRevocations: RevocationChecking {
    public let store: any RevocationStore
    private let views: [RevocationView]
    /// How long a jti or session revocation without its own expiry is kept (the store's policy).
    var maxCredentialLifetime: Int64 { store.policy.maxCredentialLifetime }

    public init(store: any RevocationStore, loopCount: Int) {
        self.store = store
        self.views = (0..<loopCount).map { store.view(loopIndex: $0) }
    }

    public func check(loopIndex: Int, identity: VerifiedIdentity, userID: String, now: Int64) -> RevocationDecision {
        let issuedAt = identity.issuedAt.map { Int64($0) }
        let view = views[loopIndex]
        var verdict = view.check(tokenID: identity.tokenID ?? identity.credentialHash, sessionID: identity.sessionID,
                                 subject: userID, issuedAt: issuedAt, now: now)
        if case .allowed = verdict, let legacy = identity.legacyCredentialHash {
            // Revoked by an earlier version's hash (the whole token): still revoked.
            verdict = view.check(tokenID: legacy, sessionID: nil, subject: userID, issuedAt: issuedAt, now: now)
        }
        if case .allowed = verdict, view.hasSubjectRevocations {
            // The user's other names (provider sub, `provider:sub`, a session's ID provider's).
            let (provider, subject) = EdgeAuthenticator.identityProvider(of: identity)
            verdict = Self.checkOtherNames(view, user: userID, provider: provider, subject: subject, issuedAt: issuedAt, now: now)
        }
        switch verdict {
        case .allowed: return .allowed
        case .revoked: return .revoked
        case .unavailable: return .unavailable
        }
    }

    /// A session's own verdict outside a request (the exchange, a refresh): its session id,
    /// and its user's "sign out everywhere" cutoff under every name the user has (the
    /// session's user, the ID provider's subject bare and prefixed) against `issuedAt` (the
    /// ID token's, or when the session began). On the loop of `loopIndex`.
    public func check(loopIndex: Int, sessionID: String?, user: String, provider: String?, subject: String?,
                      issuedAt: Int64?, now: Int64) -> RevocationVerdict {
        let view = views[loopIndex]
        var verdict = view.check(tokenID: nil, sessionID: sessionID, subject: user, issuedAt: issuedAt, now: now)
        if case .allowed = verdict, view.hasSubjectRevocations {
            verdict = Self.checkOtherNames(view, user: user, provider: provider, subject: subject, issuedAt: issuedAt, now: now)
        }
        return verdict
    }

    /// The verdict for the user's names other than `user` (already checked): the first that
    /// is not `.allowed`, else `.allowed`.
    private static func checkOtherNames(_ view: RevocationView, user: String, provider: String?, subject: String?,
                                        issuedAt: Int64?, now: Int64) -> RevocationVerdict {
        var verdict = RevocationVerdict.allowed
        EdgeAuthenticator.forEachUserName(user: user, provider: provider, subject: subject) { name in
            if name != user { verdict = view.check(tokenID: nil, sessionID: nil, subject: name, issuedAt: issuedAt, now: now) }
            if case .allowed = verdict { return true } else { return false }
        }
        return verdict
    }

    /// Ends a session in the session store (set by the wiring while `sessions:` is on), so a
    /// session access token revoked by `revoke_on_success` ends its session, not only itself.
    private let sessionEnderValue = LockedValue<(@Sendable (String) -> Void)?>(nil)
    var sessionEnder: (@Sendable (String) -> Void)? {
        get { sessionEnderValue.withLock { $0 } }
        set { sessionEnderValue.withLock { $0 = newValue } }
    }

    public func revokePresented(identity: VerifiedIdentity, userID: String, completion: @escaping @Sendable (Bool) -> Void) {
        let until = Int64(identity.expiresAt.rounded(.up)) + 300
        let revocation: Revocation
        if identity.provider == EdgeAuthenticator.sessionProviderName, let sid = identity.sessionID {
            // A session access token: its session ends (every access token it issued, and its
            // refresh token), not only the token presented.
            revocation = .session(id: sid, until: Int64(Date().timeIntervalSince1970) + maxCredentialLifetime)
            sessionEnder?(sid)
        } else if let jti = identity.tokenID {
            revocation = .token(id: jti, until: until)
        } else if let sid = identity.sessionID {
            revocation = .session(id: sid, until: until)
        } else if let hash = identity.credentialHash {
            revocation = .token(id: hash, until: until)
        } else {
            completion(false)
            return
        }
        store.revoke(revocation) { result in
            if case .success = result { completion(true) } else { completion(false) }
        }
    }

    // MARK: Admin

    func revoke(_ request: AdminRevocation, completion: @escaping @Sendable (Result<Void, AdminError>) -> Void) {
        let now = Int64(Date().timeIntervalSince1970)
        let revocation: Revocation
        switch request {
        case .token(let id, let until): revocation = .token(id: id, until: until ?? now + maxCredentialLifetime)
        case .session(let id, let until): revocation = .session(id: id, until: until ?? now + maxCredentialLifetime)
        case .subject(let subject, let before): revocation = .subject(subject, before: before, until: nil)
        }
        store.revoke(revocation) { result in completion(result.mapError(Self.adminError)) }
    }

    /// A store failure as the admin API answers it: 400 for an unusable revocation, else 503.
    static func adminError(_ error: StoreError) -> AdminError {
        if case .invalid(let why) = error { return AdminError(status: 400, message: why) }
        return AdminError(status: 503, message: error.description)
    }

    /// `DELETE /revocations`: the revocation the body names is undone on every instance
    /// (for a subject: its "sign out everywhere" cutoff, whatever its `before`).
    func undo(_ request: AdminRevocation, completion: @escaping @Sendable (Result<Bool, AdminError>) -> Void) {
        let target: RevocationTarget
        switch request {
        case .token(let id, _): target = .token(id)
        case .session(let id, _): target = .session(id)
        case .subject(let subject, _): target = .subject(subject)
        }
        store.undo(target) { result in completion(result.mapError(Self.adminError)) }
    }

    func list(subject: String, completion: @escaping @Sendable (Result<String, AdminError>) -> Void) {
        store.revocations(subject: subject) { result in
            switch result {
            case .success(let list):
                let items = list.map { revocation -> String in
                    switch revocation {
                    case .token(let id, let until): return "{\"jti\":\(JSONText.quoted(id)),\"until\":\(until)}"
                    case .session(let id, let until): return "{\"session\":\(JSONText.quoted(id)),\"until\":\(until)}"
                    case .subject(let s, let before, let until):
                        return "{\"subject\":\(JSONText.quoted(s)),\"before\":\(before)\(until.map { ",\"until\":\($0)" } ?? "")}"
                    }
                }
                completion(.success("{\"subject\":\(JSONText.quoted(subject)),\"revocations\":[\(items.joined(separator: ","))]}\n"))
            case .failure(let error):
                completion(.failure(AdminError(status: 503, message: error.description)))
            }
        }
    }

    static func redisConfiguration(_ settings: StoreSettings) throws -> RedisConfiguration {
        var configuration: RedisConfiguration
        if let url = settings.redisURL {
            configuration = try RedisConfiguration(url: url)
        } else {
            configuration = RedisConfiguration(topology: .standalone(try SocketAddress(parsing: "127.0.0.1:6379")))
        }
        if let master = settings.sentinelMaster {
            configuration.topology = .sentinel(masterName: master, sentinels: settings.sentinelAddresses)
        }
        if !settings.clusterNodes.isEmpty { configuration.topology = .cluster(seeds: settings.clusterNodes) }
        if let tls = settings.redisTLS { configuration.tls = tls }
        if let password = settings.redisPassword { configuration.password = password }
        if let username = settings.redisUsername { configuration.username = username }
        if let password = settings.sentinelPassword { configuration.sentinelPassword = password }
        return configuration
    }

    /// The configured store: Redis (standalone, through Sentinel, or a Cluster) or embedded.
    static func makeStore(_ settings: StoreSettings, loops: [EventLoop], logger: Logger) throws -> any RevocationStore {
        let policy = RevocationPolicy(maxStaleness: settings.maxStaleness, denyWhenUnavailable: settings.denyWhenUnavailable)
        guard settings.usesRedis else {
            guard let directory = settings.stateDirectory else {
                logger.notice("revocations are kept in memory only and will not survive a restart (set store.state_dir, or store.redis)")
                return EmbeddedRevocationStore(loops: loops, policy: policy)
            }
            do {
                let journal = try RevocationJournal(directory: directory)
                let store = try EmbeddedRevocationStore(loops: loops, policy: policy, journal: journal, warn: { warning in
                    logger.warning("\(warning)")
                }, journalState: { failure in
                    if let failure {
                        logger.error("revocations cannot be persisted: new ones are enforced here but not acknowledged",
                                     metadata: ["reason": "\(failure)"])
                    } else {
                        logger.notice("revocations are persisted again", metadata: ["file": "\(journal.path)"])
                    }
                })
                logger.info("revocations restored", metadata: ["file": "\(journal.path)", "entries": "\(store.restoredCount)"])
                return store
            } catch {
                throw Gateway.StartupError(description: "state_dir: \(error)")
            }
        }
        let configuration = try redisConfiguration(settings)
        let target = settings.clusterNodes.isEmpty
            ? settings.redisURL.map(RedisConfiguration.redacted) ?? "sentinel \(settings.sentinelMaster ?? "")"
            : "cluster \(settings.clusterNodes.map(\.description).joined(separator: ","))"
        return RedisRevocationStore(configuration: configuration, loops: loops, policy: policy) { event in
            switch event {
            case .synchronized(let entries):
                logger.info("revocation store synchronized", metadata: ["redis": "\(target)", "entries": "\(entries)"])
            case .degraded(let reason):
                logger.warning("revocation store degraded: serving the last synchronized view", metadata: ["redis": "\(target)", "reason": "\(reason)"])
            case .unreachable(let reason):
                logger.error("revocation store unreachable", metadata: ["redis": "\(target)", "reason": "\(reason)"])
            case .stale:
                logger.error("revocation view is stale beyond revocation.max_staleness; on_unavailable applies", metadata: ["redis": "\(target)"])
            case .restoredAfterSwitch(let count):
                logger.warning("the new Redis master lacked revocations this instance enforced: written to it again",
                               metadata: ["redis": "\(target)", "revocations": "\(count)"])
            case .logGap(let group):
                logger.warning("the revocation log trimmed entries this instance had not read: reading every revocation again",
                               metadata: ["redis": "\(target)", "stream": "\(RedisRevocationSchema.logKey(group: group))"])
            }
        }
    }
}

extension StoreRevocations: SessionRevocations {
    public func revoke(_ revocation: Revocation, completion: @escaping @Sendable (Result<Void, StoreError>) -> Void) {
        store.revoke(revocation, completion: completion)
    }
}
