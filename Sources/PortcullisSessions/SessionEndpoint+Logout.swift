import Foundation
import PortcullisAuth
import PortcullisCore
import PortcullisProxy

extension SessionEndpoint {
    /// `POST` the logout path with a session access token: the session ends, its access tokens
    /// are revoked. With any other credential a route accepts (the app's own token, from a
    /// client signed in before its sign-in moved to the edge), that credential is revoked, as
    /// the app's `revoke_on_success` logout route did: an old client's sign-out still holds.
    func logout(_ request: RequestView, body: UnsafeRawBufferPointer, grant: AuthGrant?, reply: LocalReply,
                now: Int64) -> LocalResponse? {
        let service = self.service
        guard request.method == .post else { return methodNotAllowed("POST") }
        guard let identity = grant?.identity as? VerifiedIdentity else {
            return service.oauthError(400, "invalid_request", "A session access token is required")
        }
        guard identity.provider == SessionSettings.providerName, let sid = identity.sessionID else {
            // A Bearer token only: a browser's cookie would let any page log its user out
            // with a cross-site POST (the web app's own sign-out route keeps that job).
            guard identity.source == .bearer else {
                return service.oauthError(400, "invalid_request", "A Bearer token is required")
            }
            service.revocations.revokePresented(identity: identity, userID: identity.subject) { ok in
                if ok { service.counters.count("logged_out_other_credential") }
                reply.send(ok ? service.loggedOut()
                              : service.oauthError(503, "temporarily_unavailable", "The revocation store is unavailable"))
            }
            return nil
        }
        let tokenExpires = Int64(identity.expiresAt.rounded(.up))
        service.store.end(id: sid, user: identity.subject) { outcome in
            let accessExpires: Int64
            switch outcome {
            case .failed:
                // Nothing acknowledged: the session is as it was, and a retry ends it.
                return reply.send(service.oauthError(503, "temporarily_unavailable", "The session store is unavailable"))
            case .ended(let record):
                service.counters.count("logged_out")
                accessExpires = record.accessExpiresAt
            case .notFound:
                // Ended already (another device, a reuse, or this logout's earlier try whose
                // revocation failed): its access tokens are revoked again all the same.
                accessExpires = tokenExpires
            }
            service.revokeSession(sid, accessExpiresAt: max(accessExpires, tokenExpires), now: now) { ok in
                reply.send(ok ? service.loggedOut()
                              : service.oauthError(503, "temporarily_unavailable", "The revocation store is unavailable"))
            }
        }
        return nil
    }
}
