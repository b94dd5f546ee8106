import Logging
import PortcullisAuth
import PortcullisProxy

/// Revokes the presented credential once the logout route's upstream answered with one of
/// the route's `revoke_on_success` statuses.
final class RevokeOnSuccess: UpstreamResponseObserver {
    let identity: VerifiedIdentity
    let userID: String
    let revocations: any RevocationChecking
    let statuses: StatusSet
    let logger: Logger

    init(identity: VerifiedIdentity, userID: String, revocations: any RevocationChecking, statuses: StatusSet, logger: Logger) {
        self.identity = identity
        self.userID = userID
        self.revocations = revocations
        self.statuses = statuses
        self.logger = logger
    }

    func upstreamAnswered(status: Int) { upstreamAnswered(status: status, spans: nil) }

    /// Sampled requests get the store call as a child span (`revocation store write`: how
    /// long the store took to acknowledge, and whether it did).
    func upstreamAnswered(status: Int, spans: ChildSpans?) {
        guard statuses.contains(status) else { return }
        let provider = identity.provider
        let logger = self.logger
        let start = spans == nil ? 0 : ChildSpans.nowNanos
        revocations.revokePresented(identity: identity, userID: userID) { ok in
            spans?.record(name: "revocation store write", client: true, startNanos: start, endNanos: ChildSpans.nowNanos,
                          attributes: [("portcullis.auth.provider", provider), ("portcullis.store.result", ok ? "acknowledged" : "failed")],
                          failed: !ok)
            if ok {
                logger.info("credential revoked after logout", metadata: ["provider": "\(provider)"])
            } else {
                logger.error("could not revoke the credential after logout", metadata: ["provider": "\(provider)"])
            }
        }
    }
}
