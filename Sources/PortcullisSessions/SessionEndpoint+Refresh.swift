import Foundation
import PortcullisAuth
import PortcullisCore
import PortcullisProxy

extension SessionEndpoint {
    /// `POST` the refresh path: a refresh token (JSON or RFC 6749 form body) rotates by
    /// `Rotation.decide`, after the session's revocation verdict.
    func refresh(_ request: RequestView, body: UnsafeRawBufferPointer, grant: AuthGrant?, reply: LocalReply,
                 now: Int64) -> LocalResponse? {
        let service = self.service
        guard request.method == .post else { return methodNotAllowed("POST") }
        let presented: String
        switch SessionService.refreshToken(request, body: body) {
        case .success(let token?): presented = token
        case .success(nil): return service.oauthError(400, "invalid_request", "The request body has no refresh_token member")
        case .failure(.unsupportedGrant):
            return service.oauthError(400, "unsupported_grant_type", "This endpoint takes grant_type=refresh_token only")
        case .failure: return service.oauthError(400, "invalid_request", "The request body is neither a JSON object with a string "
                                                 + "refresh_token member nor a form with one refresh_token parameter")
        }
        guard let (id, counter) = service.parseRefreshToken(presented) else {
            service.counters.count("refresh_invalid")
            return service.oauthError(400, "invalid_grant", "The refresh token is invalid")
        }
        let settings = service.settings
        let loop = request.loop
        // The verdict comes before the rotation: a refresh refused for an unavailable
        // revocation store has rotated nothing, so the client's retry with the same token
        // is no reuse. Revoked meanwhile (the session by the admin API or a logout, or its
        // user signed out everywhere under any of their names after it began): ended.
        service.store.record(id: id) { lookup in
            let found: SessionRecord
            switch lookup {
            case .found(let record): found = record
            case .missing: return rotate(known: nil)
            case .failed:
                service.counters.count("refresh_unavailable")
                return reply.send(service.oauthError(503, "temporarily_unavailable", "The session store is unavailable"))
            }
            loop.execute {
                switch service.revocations.check(loopIndex: loop.index, sessionID: found.id, user: found.user, provider: found.provider,
                                                 subject: found.subject, issuedAt: found.createdAt, now: now) {
                case .allowed:
                    rotate(known: found)
                case .revoked:
                    service.counters.count("refresh_revoked")
                    service.store.end(id: found.id, user: nil) { _ in
                        reply.send(service.oauthError(400, "invalid_grant", "The session has been revoked"))
                    }
                case .unavailable:
                    reply.send(service.oauthError(503, "temporarily_unavailable", "The revocation store is unavailable"))
                }
            }
        }
        @Sendable func rotate(known: SessionRecord?) {
            service.store.rotate(id: id, counter: counter, now: now, grace: Int64(settings.reuseGrace),
                                 idleTimeout: Int64(settings.idleTimeout), known: known, next: { current in
                var next = current
                next.counter = current.counter + 1
                next.lastUsedAt = now
                next.rotatedAt = now
                if let (token, expires) = service.accessToken(next, now: now) {
                    next.accessToken = token
                    next.accessExpiresAt = expires
                }
                return next
            }) { outcome in
                switch outcome {
                case .rotated(let record):
                    service.counters.count("refreshed")
                    reply.send(service.pair(record, now: now))
                case .current(let record):
                    service.counters.count("refresh_within_grace")
                    reply.send(service.pair(record, now: now))
                case .reused(let record):
                    service.counters.count("reuse_detected")
                    service.logger.warning("refresh token reused: the session is ended", metadata: [
                        "session": "\(record.id)", "user": "\(record.user)", "provider": "\(record.provider)"])
                    service.endEverywhere(record, now: now) { _ in
                        reply.send(service.oauthError(400, "invalid_grant", "The refresh token was already used; the session is ended"))
                    }
                case .failed:
                    service.counters.count("refresh_unavailable")
                    reply.send(service.oauthError(503, "temporarily_unavailable", "The session store is unavailable"))
                case .expired:
                    service.counters.count("refresh_expired")
                    reply.send(service.oauthError(400, "invalid_grant", "The refresh token expired"))
                case .unknown:
                    // A refresh token the gateway issued whose session is gone: refused for good.
                    // The session id is revoked too, so a record that reappears (a failover
                    // promoting a replica that still had it) is not accepted again.
                    service.counters.count("refresh_unknown")
                    service.revokeSession(id, accessExpiresAt: now + Int64(settings.refreshLifetime), now: now) { _ in
                        reply.send(service.oauthError(400, "invalid_grant", "The session has ended"))
                    }
                }
            }
        }
        return nil
    }
}
