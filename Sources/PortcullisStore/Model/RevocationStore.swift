import PortcullisIO

/// Revocation storage behind one interface: `EmbeddedRevocationStore` (one process,
/// the default) or `RedisRevocationStore` (shared by every gateway instance).
///
/// Reads never touch the store itself: each event loop reads its `RevocationView`, a
/// window on the one revocation table of the process (`ViewReplicas`), which the store
/// changes in place while the loops read it, so the hot path takes no lock.
public protocol RevocationStore: AnyObject, Sendable {
    /// The view owned by loop `index`: read and updated only on that loop's queue, no locks on the read path.
    func view(loopIndex: Int) -> RevocationView
    func revoke(_ revocation: Revocation, completion: @escaping @Sendable (Result<Void, StoreError>) -> Void)
    /// Undoes a revocation on every instance: the entry is gone from the views (and the
    /// journal or Redis) when `completion` says `.success`; its value says whether there
    /// was one. Not acknowledged (`.failure`) when it cannot be made durable everywhere.
    func undo(_ target: RevocationTarget, completion: @escaping @Sendable (Result<Bool, StoreError>) -> Void)
    func revocations(subject: String, completion: @escaping @Sendable (Result<[Revocation], StoreError>) -> Void)
    var health: StoreHealth { get }
    /// Limits the store applies (e.g. how long an id without its own expiry is kept).
    var policy: RevocationPolicy { get }
    /// Applies a new policy in place (a reload that changed `revocation:`): the views answer
    /// by it from their next check; what the store holds is kept.
    func update(policy: RevocationPolicy)
    func start()
    func shutdown()
}

extension Revocation {
    /// Rejects revocations no backend could store.
    func validate() -> StoreError? {
        switch self {
        case .token(let id, _) where id.isEmpty: return .invalid("empty jti")
        case .session(let id, _) where id.isEmpty: return .invalid("empty session id")
        case .subject(let s, _, _) where s.isEmpty: return .invalid("empty subject")
        default: return nil
        }
    }
}
