import PortcullisAuth
import PortcullisIO
import PortcullisStore
import PortcullisSessions

/// The sessions' revocation path over the real embedded revocation store, on one loop, as
/// the wiring module's `StoreRevocations` does it (the user's session id and subject; the
/// other names of a user are that module's rule and are tested there, end to end).
final class EmbeddedSessionRevocations: SessionRevocations {
    let loop = EventLoop(index: 0)
    let store: EmbeddedRevocationStore

    init() {
        store = EmbeddedRevocationStore(loops: [loop])
        store.start()
    }

    func check(loopIndex: Int, sessionID: String?, user: String, provider: String?, subject: String?,
               issuedAt: Int64?, now: Int64) -> RevocationVerdict {
        store.view(loopIndex: 0).check(tokenID: nil, sessionID: sessionID, subject: user, issuedAt: issuedAt, now: now)
    }

    func revokePresented(identity: VerifiedIdentity, userID: String, completion: @escaping @Sendable (Bool) -> Void) {
        guard let id = identity.tokenID ?? identity.credentialHash else { return completion(false) }
        store.revoke(.token(id: id, until: Int64(identity.expiresAt.rounded(.up)) + 300)) { completion((try? $0.get()) != nil) }
    }

    func revoke(_ revocation: Revocation, completion: @escaping @Sendable (Result<Void, StoreError>) -> Void) {
        store.revoke(revocation, completion: completion)
    }
}
