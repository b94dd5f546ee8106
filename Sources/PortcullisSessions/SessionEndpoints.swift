import Foundation
import PortcullisAuth
import PortcullisCore
import PortcullisProxy

/// Which session endpoint a route is.
public enum SessionRouteKind: Sendable { case exchange, refresh, logout, sessions }

/// One session endpoint, answered by the gateway after the route's authentication (see
/// `SessionService`). `kind` says which.
public final class SessionEndpoint: RouteHandler, @unchecked Sendable {
    // @unchecked Sendable: immutable.
    let kind: SessionRouteKind
    let service: SessionService
    public var bodyLimit: Int { 64 * 1024 }
    /// A device's name (`device_name`, else the User-Agent) is kept to this many characters.
    static let maxDeviceNameLength = 64

    public init(_ kind: SessionRouteKind, service: SessionService) {
        self.kind = kind
        self.service = service
    }

    /// On an app's own refresh path (`sessions.paths.refresh` equal to an `auth: none` route's
    /// path, merged at load: see `ConfigurationLoader.addSessionRoutes`), a refresh token
    /// that is not the gateway's (no `rt1.` prefix) goes to the app as before, so the clients
    /// signed in before the move keep refreshing until they sign in again. Asked only on
    /// such a route (it has an upstream).
    public func forwardsInstead(_ request: RequestView, body: UnsafeRawBufferPointer) -> Bool {
        guard kind == .refresh else { return false }
        switch SessionService.refreshToken(request, body: body) {
        case .success(let token?): return !token.hasPrefix(SessionService.refreshTokenPrefix)
        case .success(nil), .failure: return true  // whatever the app made of it before
        }
    }

    public func handle(_ request: RequestView, body: UnsafeRawBufferPointer, grant: AuthGrant?, reply: LocalReply) -> LocalResponse? {
        let service = self.service
        if service.settings.requireTLS && !reply.secure {
            return service.oauthError(403, "invalid_request", "Session endpoints answer over HTTPS only")
        }
        let now = Int64(WallClock.nowSeconds())
        switch kind {
        case .exchange:
            guard request.method == .post else { return methodNotAllowed("POST") }
            guard let identity = grant?.identity as? VerifiedIdentity else {
                return service.oauthError(400, "invalid_grant", "The ID token was not verified")
            }
            // A client that sent a nonce with its sign-in sends it again: the ID token must carry
            // it, raw (Google) or as its SHA-256 hex (Apple, Firebase), or it is a replay.
            switch SessionService.member(body, ["nonce"]) {
            case .success(let nonce?):
                let claimed = identity.claim("nonce")
                guard let claimed, HMACSHA256.equal(claimed.utf8, nonce.utf8)
                        || HMACSHA256.equal(claimed.utf8, SHA256Hex.of(Array(nonce.utf8)).utf8) else {
                    service.counters.count("nonce_mismatch")
                    return service.oauthError(400, "invalid_grant", claimed == nil ? "The ID token carries no nonce"
                                                                                     : "The ID token's nonce does not match")
                }
            case .success(nil), .failure:
                // No nonce sent (or a body the credential was not in: the Bearer form).
                if service.settings.requireNonce {
                    service.counters.count("nonce_mismatch")
                    return service.oauthError(400, "invalid_grant", identity.claim("nonce") == nil
                        ? "The ID token carries no nonce, and this exchange requires one"
                        : "The request has no nonce member, and this exchange requires the sign-in's nonce")
                }
            }
            var device = ""
            request.values(of: "user-agent") { device = String(decoding: $0, as: UTF8.self) }
            if case .success(let name?) = SessionService.member(body, [service.settings.deviceField]) { device = name }
            let provider = identity.provider
            let deviceName = String(device.prefix(Self.maxDeviceNameLength))  // per-user state stays bounded
            let subject = identity.subject
            let idTokenIssuedAt = identity.issuedAt.map { Int64($0) }
            let loop = request.loop
            @Sendable func create(user: String, claims: String, answer: [String: JSONValue]? = nil) {
                // Signed out everywhere after this ID token was issued, under any of the user's
                // names (the session's user, the provider's sub bare or prefixed): no new session.
                loop.execute {
                    switch service.revocations.check(loopIndex: loop.index, sessionID: nil, user: user, provider: provider,
                                                     subject: subject, issuedAt: idTokenIssuedAt, now: now) {
                    case .allowed:
                        replayOrStore(user: user, claims: claims, answer: answer)
                    case .revoked:
                        service.counters.count("exchange_revoked")
                        reply.send(service.oauthError(400, "invalid_grant", "The user signed out everywhere after this ID token was issued"))
                    case .unavailable:
                        reply.send(service.oauthError(503, "temporarily_unavailable", "The revocation store is unavailable"))
                    }
                }
            }
            // One ID token begins at most one session: exchanged again (a retry, or a replay) it
            // gets that session's current pair, so replaying it grows neither the sessions nor the
            // revocations (an eviction past the cap revokes). Under `require_nonce` a replay is
            // refused instead. A replayer then shares the chain with the client, and the first
            // refresh of the two makes the other's a reuse that ends the session.
            let idTokenKey = provider + ":" + (identity.tokenID ?? identity.credentialHash ?? "")
            @Sendable func replayOrStore(user: String, claims: String, answer: [String: JSONValue]?) {
                guard identity.tokenID != nil || identity.credentialHash != nil else {
                    return store(user: user, claims: claims, answer: answer)
                }
                service.store.list(user: user, now: now) { records in
                    guard let existing = records.first(where: { $0.idToken == idTokenKey }) else {
                        return store(user: user, claims: claims, answer: answer)
                    }
                    if service.settings.requireNonce {
                        service.counters.count("exchange_replayed")
                        return reply.send(service.oauthError(400, "invalid_grant", "This ID token was already exchanged; sign in again"))
                    }
                    service.counters.count("exchange_repeated")
                    reply.send(service.pair(existing, now: now, idClaims: typed, lookupAnswer: answer))
                }
            }
            @Sendable func store(user: String, claims: String, answer: [String: JSONValue]?) {
                let expires = now + Int64(service.settings.refreshLifetime)
                var record = SessionRecord(id: Self.sessionID(), user: user, provider: provider, device: deviceName,
                                           createdAt: now, lastUsedAt: now, expiresAt: expires, counter: 1, rotatedAt: now,
                                           accessToken: "", accessExpiresAt: 0, claims: claims, subject: subject,
                                           idToken: idTokenKey)
                guard let (token, tokenExpires) = service.accessToken(record, now: now) else {
                    return reply.send(service.oauthError(500, "server_error", "The access token could not be signed"))
                }
                record.accessToken = token
                record.accessExpiresAt = tokenExpires
                let created = record
                service.store.create(created, maxPerUser: service.settings.maxPerUser) { ok, evicted in
                    service.counters.count(ok ? "created" : "store_failed")
                    for old in evicted {
                        // Past the cap the least recently used sessions end, their access tokens too.
                        service.counters.count("evicted")
                        service.endEverywhere(old, now: now) { _ in }
                    }
                    reply.send(ok ? service.pair(created, now: now, idClaims: typed, lookupAnswer: answer)
                                  : service.oauthError(503, "temporarily_unavailable", "The session store is unavailable"))
                }
            }
            let carrying = !service.settings.carryClaims.isEmpty
            let typed = carrying || service.lookup != nil || service.settings.response != nil
                ? SessionService.verifiedClaims(request, body: body, fields: [service.settings.idTokenField, "id_token"],
                                                identity: identity)
                : nil
            let carried = SessionService.carried(service.settings.carryClaims, from: typed)
            guard let lookup = service.lookup else {
                create(user: provider + ":" + identity.subject, claims: SessionService.mergeClaims(carried: carried, lookup: ""))
                return nil
            }
            lookup.resolve(identity, typed: typed) { outcome in
                switch outcome {
                case .user(let user, let claims, let answer):
                    create(user: user, claims: SessionService.mergeClaims(carried: carried, lookup: claims), answer: answer)
                case .refused(let status):
                    service.counters.count("lookup_refused")
                    reply.send(service.oauthError(403, "access_denied", "The app refused this sign-in (\(status))"))
                case .unavailable(let reason):
                    service.counters.count("lookup_failed")
                    service.logger.error("session lookup failed", metadata: ["provider": "\(provider)", "reason": "\(reason)"])
                    reply.send(service.oauthError(503, "temporarily_unavailable", "The app could not be asked who this user is"))
                }
            }
            return nil

        case .refresh:
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

        case .logout:
            guard request.method == .post else { return methodNotAllowed("POST") }
            guard let identity = grant?.identity as? VerifiedIdentity, let sid = identity.sessionID else {
                return service.oauthError(400, "invalid_request", "A session access token is required")
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

        case .sessions:
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

    /// `{"sessions": [{id, device, provider, created_at, last_used_at, current}]}`; the admin
    /// API's list (no current session) adds the user.
    public static func listJSON(_ records: [SessionRecord], current: String?) -> String {
        let items = records.map { r in
            "{\"id\":\(JSONText.quoted(r.id)),\"device\":\(JSONText.quoted(r.device)),\"provider\":\(JSONText.quoted(r.provider)),"
                + "\"created_at\":\(r.createdAt),\"last_used_at\":\(r.lastUsedAt)"
                + (current.map { ",\"current\":\(r.id == $0)" } ?? ",\"user\":\(JSONText.quoted(r.user))") + "}"
        }
        return "{\"sessions\":[\(items.joined(separator: ","))]}"
    }

    /// In the endpoints' refusal shape, as every other answer of theirs.
    private func methodNotAllowed(_ allowed: String) -> LocalResponse {
        var response = service.oauthError(405, "invalid_request", "Method not allowed (allowed: \(allowed))")
        response.headers.append(("allow", allowed))
        return response
    }

    /// 128 random bits, hex.
    static func sessionID() -> String {
        var random = SystemRandomNumberGenerator()
        let words = (random.next() as UInt64, random.next() as UInt64)
        func hex(_ v: UInt64) -> String { let s = String(v, radix: 16); return String(repeating: "0", count: 16 - s.count) + s }
        return hex(words.0) + hex(words.1)
    }
}
