import Foundation
import Logging
import PortcullisAuth
import PortcullisCore
import PortcullisEdgeAuth
import PortcullisIO
import PortcullisKeys
import PortcullisTLS
import PortcullisProxy
import PortcullisStore
import PortcullisOutbound

/// The session endpoints (#27) and what they share: the signing key of the access tokens,
/// the refresh tokens' MAC key, the session store and the revocation path (ending a session
/// revokes its `sid`, so its access tokens are refused on every instance, as any revocation).
///
/// Refresh tokens are `rt1.<session id>.<counter>.<MAC>`: the MAC (HMAC-SHA-256 of the rest,
/// with `refresh_token.secret`) proves the gateway issued it, so nothing is stored per token;
/// the session keeps its current counter. Errors follow RFC 6749 §5.2 (`400 invalid_grant`,
/// `400 invalid_request`) in the configured `error_body` shape. Tokens never appear in logs.
public final class SessionService: @unchecked Sendable {
    // @unchecked Sendable: every member is immutable after init (the store and revocations
    // are thread-safe).
    public let settings: SessionSettings
    public let store: any SessionStore
    let revocations: any SessionRevocations
    let signer: SigningKey
    let keyID: String
    let refreshTokens: RefreshTokenFormat
    let errorBody: ErrorBodyTemplate
    let logger: Logger
    /// Counted outcomes (`portcullis_sessions_total{event}`), shared with the service a reload
    /// replaces (a counter never goes back).
    public let counters: SessionCounters

    public struct Failure: Error, CustomStringConvertible { public let description: String }

    /// The configured (or generated) keys, the first signs; `keyPaths` names each one's file
    /// ("" for a generated key).
    let signingKeys: [SigningKey]
    let keyPaths: [String]
    /// Keys that signed before a reload replaced them: they still verify (and are published)
    /// until the last token they signed has expired, then they are gone.
    public let retiringKeys: [RetiringKey]
    /// The lookup hook (nil: the user id is "<provider>:<sub>").
    let lookup: SessionLookup?

    public struct RetiringKey: Sendable { public let key: SigningKey; public let path: String; public let until: Int64 }

    public init(settings: SessionSettings, store: any SessionStore, revocations: any SessionRevocations, errorBody: ErrorBodyTemplate,
         logger: Logger, previous: SessionService? = nil, now: Int64 = Int64(WallClock.nowSeconds()),
         counters: SessionCounters = SessionCounters(), lookup: SessionLookup? = nil) throws {
        self.counters = counters
        self.lookup = lookup
        self.settings = settings
        self.store = store
        self.revocations = revocations
        self.errorBody = errorBody
        self.logger = logger
        (signingKeys, keyPaths, retiringKeys) = try Self.keys(settings, previous: previous, now: now)
        signer = signingKeys[0]
        keyID = signingKeys[0].thumbprint
        refreshTokens = RefreshTokenFormat(secret: settings.refreshSecret)
    }

    /// The keys of a (re)load. Files are read again each time. A key a file no longer holds
    /// (the file was replaced: a rotation) keeps verifying, and stays in the JWKS, until the
    /// last access token it signed has expired (one access lifetime, plus a minute); a key
    /// whose file was removed from `signing_keys` stops verifying at once. A generated key
    /// (no `signing_keys`) is kept across reloads, and retires with the same overlap when
    /// files are configured.
    static func keys(_ settings: SessionSettings, previous: SessionService?, now: Int64) throws
        -> (keys: [SigningKey], paths: [String], retiring: [RetiringKey]) {
        if settings.signingKeyFiles.isEmpty {
            if let previous, previous.settings.signingKeyFiles.isEmpty { return (previous.signingKeys, previous.keyPaths, []) }
            return ([try SigningKey.generate(.es256)], [""], [])
        }
        let keys = try settings.signingKeyFiles.map { path in
            do { return try AssertionKeys.loadKey(path, algorithm: .es256, purpose: "session access tokens") } catch {
                throw Failure(description: "sessions.access_token.signing_keys: \(error)")
            }
        }
        let current = Set(keys.map(\.thumbprint))
        let configured = Set(settings.signingKeyFiles)
        var retiring: [RetiringKey] = []
        if let previous {
            let until = now + Int64(previous.settings.accessLifetime) + 60
            let replaced = zip(previous.signingKeys, previous.keyPaths).map { RetiringKey(key: $0, path: $1, until: until) }
            for old in previous.retiringKeys.filter({ $0.until > now }) + replaced
            where !current.contains(old.key.thumbprint) && (old.path.isEmpty || configured.contains(old.path))
                && !retiring.contains(where: { $0.key.thumbprint == old.key.thumbprint }) {
                retiring.append(old)
            }
        }
        return (keys, settings.signingKeyFiles, retiring)
    }

    /// Every key that verifies at `now`: the configured ones, then those still retiring.
    func verifyingKeys(now: Int64) -> [SigningKey] {
        signingKeys + retiringKeys.filter { $0.until > now }.map(\.key)
    }

    /// When the next retiring key stops verifying after `now` (nil: none is retiring).
    public func nextRetirement(after now: Int64) -> Int64? { retiringKeys.map(\.until).filter { $0 > now }.min() }

    /// The public keys verifying at `now`, as a JWKS document.
    public func jwks(now: Int64 = Int64(WallClock.nowSeconds())) -> [UInt8] {
        let list = verifyingKeys(now: now).compactMap { $0.publicJWK(keyID: $0.thumbprint) }
        return Array((JSONValue.object([("keys", .array(list))]).serialized + "\n").utf8)
    }

    /// The `session` provider's keys at `now`: what it verifies access tokens with.
    public func keySet(now: Int64 = Int64(WallClock.nowSeconds())) throws -> KeySet {
        let document = jwks(now: now)
        return try KeyDocumentFormat.detect(document).load(document)
    }

    // MARK: Tokens

    func refreshToken(session: String, counter: UInt64) -> String { refreshTokens.token(session: session, counter: counter) }

    /// The session id and counter of a refresh token whose MAC is the gateway's; nil otherwise.
    func parseRefreshToken(_ token: String) -> (session: String, counter: UInt64)? { refreshTokens.parse(token) }

    func accessToken(_ record: SessionRecord, now: Int64) -> (String, Int64)? {
        let expires = now + Int64(settings.accessLifetime)
        var members: [(String, JSONValue)] = [
            ("iss", .string(settings.issuer)), ("aud", .string(settings.issuer)), ("sub", .string(record.user)),
            ("sid", .string(record.id)), ("iat", .integer(now)), ("exp", .integer(expires)),
            ("jti", .string(JWTText.randomID())), ("idp", .string(record.provider)),
        ]
        // The ID provider's subject: a sign-out everywhere filed under it (bare or
        // "<idp>:<sub>") refuses this token too, whatever id the session's user has.
        if !record.subject.isEmpty { members.append(("idp_sub", .string(record.subject))) }
        // The app's own claims (lookup hook), never replacing the registered ones.
        if !record.claims.isEmpty, let object = try? JSONSerialization.jsonObject(with: Data(record.claims.utf8)) as? [String: Any] {
            let reserved = Set(members.map(\.0))
            for key in object.keys.sorted() where !reserved.contains(key) {
                if let value = JSONValue(foundation: object[key]!) { members.append((key, value)) }
            }
        }
        let claims = JSONValue.object(members)
        guard let token = try? TokenMinter.sign(claims: claims, key: signer, keyID: keyID) else { return nil }
        return (token, expires)
    }

    // MARK: Answers

    /// The answer of an exchange or a refresh: the default pair, or `sessions.response`'s
    /// shape. `idClaims` (the verified ID token's, typed) and `lookupAnswer` (the hook's
    /// answer) exist at the exchange only.
    func pair(_ record: SessionRecord, now: Int64, idClaims: [String: JSONValue]? = nil,
              lookupAnswer: [String: JSONValue]? = nil) -> LocalResponse {
        var token = record.accessToken
        var lifetime = record.accessExpiresAt - record.rotatedAt
        if token.isEmpty, let (fresh, expires) = accessToken(record, now: now) {  // after a restart
            token = fresh
            lifetime = expires - now
        }
        // `expires_in` is the token's lifetime as issued, so racing refreshes get byte-identical
        // answers (one within the grace is up to `reuse_grace` optimistic).
        let refresh = refreshToken(session: record.id, counter: record.counter)
        let body: String
        if let template = settings.response {
            let stored = record.claims.isEmpty ? [:]
                : (try? JSONSerialization.jsonObject(with: Data(record.claims.utf8)) as? [String: Any]) ?? [:]
            body = template.render { part in
                switch part {
                case .field("access_token"): return .string(token)
                case .field("refresh_token"): return .string(refresh)
                case .field("token_type"): return .string("Bearer")
                case .field("expires_in"): return .integer(max(0, lifetime))
                case .field("session_id"): return .string(record.id)
                case .field("user_id"): return .string(record.user)
                case .claim(let name): return stored[name].flatMap(JSONValue.init(foundation:)) ?? idClaims?[name]
                case .lookup(let name): return lookupAnswer?[name]
                default: return nil
                }
            } + "\n"
        } else {
            body = "{\"access_token\":\(JSONText.quoted(token)),\"token_type\":\"Bearer\",\"expires_in\":\(max(0, lifetime)),"
                + "\"refresh_token\":\(JSONText.quoted(refresh)),"
                + "\"session_id\":\(JSONText.quoted(record.id)),\"user_id\":\(JSONText.quoted(record.user))}"
        }
        return LocalResponse(status: 200, headers: [("cache-control", "no-store"), ("pragma", "no-cache")],
                             body: Array(body.utf8))
    }

    /// RFC 6749 §5.2, in the configured body shape.
    /// A logout's answer: `204` (the default), or `200 {"status":"logged_out"}` with
    /// `logout_status: 200` for a client that decodes a body (FolioMind's answered 200).
    /// What every refresh token the gateway issues begins with.
    static let refreshTokenPrefix = RefreshTokenFormat.prefix

    func loggedOut() -> LocalResponse {
        settings.logoutStatus == 200
            ? LocalResponse(status: 200, headers: [("cache-control", "no-store")],
                            body: Array("{\"status\":\"logged_out\"}\n".utf8))
            : LocalResponse(status: 204, headers: [("cache-control", "no-store")], body: [])
    }

    func oauthError(_ status: Int, _ code: String, _ description: String) -> LocalResponse {
        LocalResponse(status: status, headers: [("cache-control", "no-store")],
                      body: Array(errorBody.render(status: status, code: code, description: description).utf8))
    }

    /// Ends a session everywhere: the store, and its access tokens through the revocation
    /// path (until the last one it issued has expired).
    public func endEverywhere(_ record: SessionRecord, now: Int64, completion: @escaping @Sendable (Bool) -> Void) {
        revokeSession(record.id, accessExpiresAt: record.accessExpiresAt, now: now, completion: completion)
    }

    /// Revokes session `id`'s access tokens (the last one expires at `accessExpiresAt` at
    /// the latest) on every instance; true once the revocation store acknowledged it.
    func revokeSession(_ id: String, accessExpiresAt: Int64, now: Int64, completion: @escaping @Sendable (Bool) -> Void) {
        let until = max(accessExpiresAt, now + Int64(settings.accessLifetime)) + 60
        revocations.revoke(.session(id: id, until: until)) { result in
            if case .success = result { completion(true) } else { completion(false) }
        }
    }

    /// A JSON object body's string member, or why not.
    static func member(_ body: UnsafeRawBufferPointer, _ names: [String]) -> Result<String?, LocalResponseReason> {
        guard !body.isEmpty, let object = try? JSONSerialization.jsonObject(with: Data(body)) as? [String: Any] else {
            return .failure(.notJSON)
        }
        for name in names {
            if let value = object[name] {
                guard let text = value as? String else { return .failure(.notString(name)) }
                return .success(text)
            }
        }
        return .success(nil)
    }

    enum LocalResponseReason: Error { case notJSON, notString(String), unsupportedGrant(String) }

    /// The refresh token of a refresh request: a JSON body's `refresh_token` (or
    /// `refreshToken`), or RFC 6749 §6's form body (`grant_type=refresh_token&refresh_token=…`,
    /// `application/x-www-form-urlencoded`), whose `grant_type` must be `refresh_token`.
    static func refreshToken(_ request: RequestView, body: UnsafeRawBufferPointer) -> Result<String?, LocalResponseReason> {
        var form = false
        request.values(of: "content-type") { value in
            form = form || String(decoding: value, as: UTF8.self).lowercased().hasPrefix("application/x-www-form-urlencoded")
        }
        // A JSON object is read as JSON whatever its label (urllib, and some HTTP clients,
        // label every POST body a form).
        let json = body.first(where: { $0 != 0x20 && $0 != 0x09 && $0 != 0x0A && $0 != 0x0D }) == UInt8(ascii: "{")
        guard form && !json else { return member(body, ["refresh_token", "refreshToken"]) }
        var fields: [String: String] = [:]
        for pair in String(decoding: body, as: UTF8.self).split(separator: "&") {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            func decoded(_ text: Substring) -> String? { text.replacingOccurrences(of: "+", with: " ").removingPercentEncoding }
            guard let name = decoded(parts[0]), let value = parts.count == 2 ? decoded(parts[1]) : "" else { return .failure(.notJSON) }
            if fields[name] != nil { return .failure(.notString(name)) }  // a repeated parameter (RFC 6749 §3.2)
            fields[name] = value
        }
        if let grant = fields["grant_type"], grant != "refresh_token" { return .failure(.unsupportedGrant(grant)) }
        return .success(fields["refresh_token"])
    }

    /// The `carry_claims` the verified ID token has, typed as in it.
    static func carried(_ names: [String], from typed: [String: JSONValue]?) -> [(String, JSONValue)] {
        guard let typed else { return [] }
        return names.compactMap { name in typed[name].map { (name, $0) } }
    }

    /// The session's claims as stored (a JSON object's text, "" for none): the carried ID-token
    /// claims, then the lookup hook's (`lookup`, a JSON object's text), which win on a clash.
    static func mergeClaims(carried: [(String, JSONValue)], lookup: String) -> String {
        guard !carried.isEmpty else { return lookup }
        var members = carried
        if !lookup.isEmpty, let object = try? JSONSerialization.jsonObject(with: Data(lookup.utf8)) as? [String: Any] {
            for key in object.keys.sorted() {
                guard let value = JSONValue(foundation: object[key]!) else { continue }
                members.removeAll { $0.0 == key }
                members.append((key, value))
            }
        }
        return JSONValue.object(members).serialized
    }

    /// The verified ID token's claims with their JSON types: the token is found again where
    /// the exchange route read it (a body member of `fields`, else `Authorization: Bearer`)
    /// and used only when it is the one verified (its `jti`, else the hash of its signing
    /// input, matches the identity). nil when it cannot be found.
    static func verifiedClaims(_ request: RequestView, body: UnsafeRawBufferPointer, fields: [String],
                               identity: VerifiedIdentity) -> [String: JSONValue]? {
        var candidates: [String] = []
        if case .success(let token?) = member(body, fields) { candidates.append(token) }
        request.values(of: "authorization") { value in
            let text = String(decoding: value, as: UTF8.self)
            if text.count > 7, text.prefix(7).lowercased() == "bearer " { candidates.append(String(text.dropFirst(7))) }
        }
        for token in candidates {
            let parts = token.split(separator: ".", omittingEmptySubsequences: false)
            guard parts.count == 3, let payload = JWTText.bytes(base64URL: parts[1]),
                  let object = try? JSONSerialization.jsonObject(with: Data(payload)) as? [String: Any],
                  object["sub"] as? String == identity.subject else { continue }
            if let jti = identity.tokenID {
                guard object["jti"] as? String == jti else { continue }
            } else {
                let signingInput = Array(token.utf8.prefix(parts[0].utf8.count + 1 + parts[1].utf8.count))
                guard let hash = identity.credentialHash, SHA256Hex.of(signingInput).hasPrefix(hash) else { continue }
            }
            var typed: [String: JSONValue] = [:]
            for (name, value) in object { if let json = JSONValue(foundation: value) { typed[name] = json } }
            return typed
        }
        return nil
    }

}

/// `user: {lookup: {upstream, path}}`: at the exchange the gateway POSTs the verified
/// identity to the app (`{"provider", "subject", "email", "name", "claims"}`, with the
/// upstream's `request_headers`) and takes `{"user_id", "claims"}` from its 2xx answer: the
/// app's find-or-create stays in the app. A 4xx refuses the sign-in (403 `access_denied`);
/// anything else (an error, a timeout, a body without `user_id`) is 503.
public final class SessionLookup: @unchecked Sendable {
    // @unchecked Sendable: immutable.
    let client: HTTPGetClient
    let url: String
    let headers: [(name: String, value: String)]
    let loop: EventLoop
    /// `identity.assertion`'s header for this request (provider, subject), when configured.
    let assertion: (@Sendable (String, String) -> (header: String, token: String)?)?

    /// `answer`: the hook's whole answer, typed (for `{lookup.NAME}` in `sessions.response`).
    enum Outcome { case user(String, claims: String, answer: [String: JSONValue]), refused(Int), unavailable(String) }

    /// `clientCertificate`: the upstream's (`client_certificate`/`client_private_key`), so an
    /// app locked to the gateway's certificate (mutual TLS) can be asked.
    public init(url: String, caFile: String?, clientCertificate: ClientCertificateFiles? = nil,
         headers: [(name: String, value: String)], timeout: Double, loop: EventLoop,
         assertion: (@Sendable (String, String) -> (header: String, token: String)?)? = nil) {
        var options = HTTPFetchOptions.call(timeout: timeout, userAgent: "portcullis-sessions/1", caFile: caFile)
        options.clientCertificate = clientCertificate
        client = HTTPGetClient(options: options)
        self.url = url
        self.headers = headers
        self.loop = loop
        self.assertion = assertion
    }

    /// `typed`: the verified ID token's claims with their JSON types (`verifiedClaims`); the
    /// identity's forwarded claims are sent with those types (`email_verified: false` stays a
    /// JSON false), and `email` is sent only when the token says it is verified (else null,
    /// with `email_verified: false`): the app's find-or-create never links an account by an
    /// address nobody proved.
    func resolve(_ identity: VerifiedIdentity, typed: [String: JSONValue]?, completion: @escaping @Sendable (Outcome) -> Void) {
        var claims: [(String, JSONValue)] = identity.claims.sorted { $0.key < $1.key }.map { ($0.key, typed?[$0.key] ?? .string($0.value)) }
        claims.removeAll { $0.0 == "nonce" }
        let verified: Bool
        switch typed?["email_verified"] {
        case .bool(let value)?: verified = value
        case .string(let text)?: verified = text == "true"  // Apple sends "true"/"false"
        default: verified = identity.claim("email_verified") == "true"
        }
        let body = JSONValue.object([
            ("provider", .string(identity.provider)), ("subject", .string(identity.subject)),
            ("email", verified ? identity.claim("email").map(JSONValue.string) ?? .null : .null),
            ("email_verified", .bool(verified && identity.claim("email") != nil)),
            ("name", identity.claim("name").map(JSONValue.string) ?? .null),
            ("claims", .object(claims)),
        ]).serialized
        var headers = self.headers
        if let signed = assertion?(identity.provider, identity.subject) { headers.append((signed.header, signed.token)) }
        client.post(url, body: Array(body.utf8), headers: headers, on: loop) { result in
            switch result {
            case .failure(let error):
                completion(.unavailable("\(error)"))
            case .success(let response) where (200..<300).contains(response.status):
                guard let object = try? JSONSerialization.jsonObject(with: Data(response.body)) as? [String: Any],
                      let user = object["user_id"] as? String, !user.isEmpty, user.utf8.count <= 256 else {
                    return completion(.unavailable("the answer has no user_id string"))
                }
                var text = ""
                if let extra = object["claims"] as? [String: Any], !extra.isEmpty,
                   let data = try? JSONSerialization.data(withJSONObject: extra, options: [.sortedKeys]) {
                    text = String(decoding: data, as: UTF8.self)
                }
                var answer: [String: JSONValue] = [:]
                for (key, value) in object { if let typed = JSONValue(foundation: value) { answer[key] = typed } }
                completion(.user(user, claims: text, answer: answer))
            case .success(let response) where (400..<500).contains(response.status):
                completion(.refused(response.status))
            case .success(let response):
                completion(.unavailable("answered \(response.status)"))
            }
        }
    }
}

extension SessionLookup {
    /// `check-config --probe`: can the gateway reach the hook at all (TCP, TLS with the
    /// upstream's client certificate, an HTTP answer)? A `GET` of the hook's path, so the
    /// app's find-or-create never runs; any status but 404 counts as reached (a POST-only
    /// route answers 405, a locked one 401 or 403). Nil when reached; else the reason.
    /// `probe`, waited for (up to the hook's timeout and a second): for `check-config --probe`,
    /// a command's thread, never a loop's. Nil when reached; else why not, naming `upstream`.
    public func probeWaiting(upstream: String) -> String? {
        let done = DispatchSemaphore(value: 0)
        let outcome = LockedValue<String?>(nil)
        probe { failure in
            outcome.withLock { $0 = failure }
            done.signal()
        }
        let timeout = client.options.totalTimeout
        if done.wait(timeout: .now() + timeout + 1) == .timedOut {
            return "sessions.user.lookup: upstreams.\(upstream) did not answer \(url) within \(Int(timeout)) s"
        }
        return outcome.withLock { $0 }.map { "sessions.user.lookup: upstreams.\(upstream) cannot be reached: \($0)" }
    }

    public func probe(completion: @escaping @Sendable (String?) -> Void) {
        client.get(url, on: loop) { result in
            switch result {
            case .failure(let error): completion("\(error)")
            case .success(let response) where response.status == 404:
                completion("it answered 404 for \(self.url): is the path right?")
            case .success: completion(nil)
            }
        }
    }
}

/// Counted session events, read by `/metrics`.
public final class SessionCounters: @unchecked Sendable {
    public init() {}
    // @unchecked Sendable: guarded by `lock`.
    private let lock = NSLock()
    private var counts: [String: Int] = [:]
    public func count(_ event: String) { lock.lock(); counts[event, default: 0] += 1; lock.unlock() }
    public var snapshot: [String: Int] { lock.lock(); defer { lock.unlock() }; return counts }
}

extension JSONValue {
    /// A value `JSONSerialization` produced (booleans kept apart from numbers; object members
    /// sorted by name), or nil for anything else.
    public init?(foundation any: Any) {
        switch any {
        case let s as String: self = .string(s)
        case let n as NSNumber:
            if String(cString: n.objCType) == "c" { self = .bool(n.boolValue) }  // JSON true/false
            else if let exact = Int64(exactly: n.doubleValue), !"\(n)".contains(".") { self = .integer(exact) }
            else { self = .number(n.doubleValue) }
        case let a as [Any]: self = .array(a.compactMap { JSONValue(foundation: $0) })
        case let o as [String: Any]:
            self = .object(o.keys.sorted().compactMap { k in JSONValue(foundation: o[k]!).map { (k, $0) } })
        case is NSNull: self = .null
        default: return nil
        }
    }
}
