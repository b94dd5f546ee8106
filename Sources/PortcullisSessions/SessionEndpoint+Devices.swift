import Foundation
import PortcullisAuth
import PortcullisCore
import PortcullisProxy

extension SessionEndpoint {
    /// The device list (`GET`) and ending one of the user's own sessions (`DELETE …/{id}`).
    func sessions(_ request: RequestView, body: UnsafeRawBufferPointer, grant: AuthGrant?, reply: LocalReply,
                  now: Int64) -> LocalResponse? {
        let service = self.service
        guard let identity = grant?.identity as? VerifiedIdentity, let current = identity.sessionID else {
            return service.oauthError(400, "invalid_request", "A session access token is required")
        }
        let user = identity.subject
        let base = service.settings.sessionsPath
        if request.method == .get && request.path == base {
            service.store.list(user: user, now: now) { records in
                reply.send(LocalResponse(status: 200, headers: [("cache-control", "no-store")],
                                         body: Array(Self.listJSON(records, current: current).utf8)))
            }
            return nil
        }
        guard request.method == .delete, request.path.hasPrefix(base + "/") else {
            return methodNotAllowed(request.path == base ? "GET" : "DELETE")
        }
        let id = String(request.path.dropFirst(base.count + 1))
        guard id.count == 32, id.allSatisfy(\.isHexDigit) else { return service.oauthError(404, "invalid_request", "No such session") }
        service.store.end(id: id, user: user) { outcome in
            let record: SessionRecord
            switch outcome {
            case .ended(let ended): record = ended
            case .notFound: return reply.send(service.oauthError(404, "invalid_request", "No such session"))  // another user's is as unknown
            case .failed: return reply.send(service.oauthError(503, "temporarily_unavailable", "The session store is unavailable"))
            }
            service.counters.count("ended_by_user")
            service.endEverywhere(record, now: now) { ok in
                reply.send(ok ? service.loggedOut()
                              : service.oauthError(503, "temporarily_unavailable", "The revocation store is unavailable"))
            }
        }
        return nil
    }
}
