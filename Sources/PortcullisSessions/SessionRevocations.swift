import PortcullisAuth
import PortcullisStore

/// What sessions need of the revocation path (the wiring module's `StoreRevocations`): a
/// session's verdict at the exchange and at refresh, and revoking a session id so its
/// access tokens are refused everywhere before they expire.
public protocol SessionRevocations: AnyObject, Sendable {
    /// The session id's verdict, and its user's "sign out everywhere" cutoff under every name
    /// the user has (the session's user, the ID provider's subject bare and prefixed) against
    /// `issuedAt`. On the loop of `loopIndex`.
    func check(loopIndex: Int, sessionID: String?, user: String, provider: String?, subject: String?,
               issuedAt: Int64?, now: Int64) -> RevocationVerdict
    /// Revokes the credential presented (its `jti`, session or hash), as a route's
    /// `revoke_on_success` does: a logout at the edge with a token the gateway did not issue.
    func revokePresented(identity: VerifiedIdentity, userID: String, completion: @escaping @Sendable (Bool) -> Void)
    /// Files a revocation (acknowledged as the store acknowledges it).
    func revoke(_ revocation: Revocation, completion: @escaping @Sendable (Result<Void, StoreError>) -> Void)
}
