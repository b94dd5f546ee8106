import Foundation
import PortcullisAuth
import PortcullisCore
import PortcullisProxy

extension SessionEndpoint {
    /// `POST` the exchange path: a verified ID token (the route's body credential) becomes a
    /// session and its pair; the lookup hook names the user when configured.
    func exchange(_ endpoint: SessionSettings.Exchange, _ request: RequestView, body: UnsafeRawBufferPointer, grant: AuthGrant?, reply: LocalReply,
                  now: Int64) -> LocalResponse? {
        let service = self.service
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
            ? SessionService.verifiedClaims(request, body: body, fields: [endpoint.idTokenField, "id_token"],
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
    }
}
