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

    func upstreamAnswered(status: Int) {
        guard statuses.contains(status) else { return }
        let provider = identity.provider
        let logger = self.logger
        revocations.revokePresented(identity: identity, userID: userID) { ok in
            if ok {
                logger.info("credential revoked after logout", metadata: ["provider": "\(provider)"])
            } else {
                logger.error("could not revoke the credential after logout", metadata: ["provider": "\(provider)"])
            }
        }
    }
}
