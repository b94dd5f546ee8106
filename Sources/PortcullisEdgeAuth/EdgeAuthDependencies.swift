import PortcullisAuth
import PortcullisIO

/// The revocation check on the request path, and revocation of a presented
/// credential (logout routes). Implemented over the embedded or Redis store.
public protocol RevocationChecking: AnyObject, Sendable {
    /// Called on the loop queue `loopIndex`; must not block or allocate needlessly.
    func check(loopIndex: Int, identity: VerifiedIdentity, userID: String, now: Int64) -> RevocationDecision
    /// Revokes the credential that produced `identity` (its `jti`, else its
    /// `sid`, else its hash) for every instance.
    func revokePresented(identity: VerifiedIdentity, userID: String, completion: @escaping @Sendable (Bool) -> Void)
}

public enum RevocationDecision: Sendable, Equatable { case allowed, revoked, unavailable }

/// Refetches a provider's keys when a token names an unknown `kid`.
public protocol KeyRefetching: AnyObject, Sendable {
    /// Starts or joins a refetch. Returns false when none can happen now (inline
    /// keys, or refetched too recently); otherwise `completion` runs once, later,
    /// after the new keys (if any) are installed in the verifier.
    func refetchForUnknownKey(provider: String, loop: EventLoop, completion: @escaping @Sendable () -> Void) -> Bool
}
