/// Verifies NextAuth v4 and Auth.js v5 session JWEs (rule book §1).
///
/// - v4 (`nextauth`): `A256GCM` only, key = HKDF-SHA-256(secret, salt "",
///   info "NextAuth.js Generated Encryption Key", 32). One secret.
/// - v5 (`authjs`): `A256CBC-HS512` (64-byte key) or `A256GCM` (32), key =
///   HKDF-SHA-256(secret, salt = cookie name, info "Auth.js Generated
///   Encryption Key (<name>)"); `kid` = RFC 7638 thumbprint; several secrets.
///
/// All keys are derived at construction, per secret and per accepted cookie
/// name (`__Secure-<name>` and `<name>`), never per request.
final class SessionCookieProvider: Sendable {
    struct DerivedKey: Sendable {
        let keyID: [UInt8]
        let decryptor: any ContentDecryptor
    }

    let policy: ProviderPolicy
    /// Accepted cookie names, the `__Secure-` form first.
    let cookieNames: [String]
    /// Keys per cookie name (same order as `cookieNames`), secrets in order.
    private let keys: [[DerivedKey]]

    static let v4Name = "next-auth.session-token"
    static let v5Name = "authjs.session-token"

    init(policy: ProviderPolicy, configuration: ProviderConfiguration) throws(AuthConfigurationError) {
        self.policy = policy
        let name = configuration.name
        let isV4 = configuration.kind == .nextauth
        let base = configuration.cookieName ?? (isV4 ? SessionCookieProvider.v4Name : SessionCookieProvider.v5Name)
        let unprefixed = base.hasPrefix("__Secure-") ? String(base.dropFirst("__Secure-".count)) : base
        cookieNames = ["__Secure-" + unprefixed, unprefixed]
        var secrets = configuration.secrets
        if let secret = configuration.secret, !secrets.contains(secret) { secrets.append(secret) }
        guard !secrets.isEmpty else { throw .missingSetting(provider: name, setting: "secret") }
        if isV4 { secrets = [secrets[0]] }
        // No minimum length here: NextAuth accepts any secret string and the
        // key is HKDF-derived, so short secrets still yield full-size keys.
        guard secrets.allSatisfy({ !$0.isEmpty }) else {
            throw .invalidSetting(provider: name, setting: "secret", reason: "must not be empty")
        }
        do {
            if isV4 {
                let key = try hkdfSHA256(secret: Array(secrets[0].utf8), salt: [],
                                         info: Array("NextAuth.js Generated Encryption Key".utf8), length: 32)
                let derived = DerivedKey(keyID: [], decryptor: try AESGCMDecryptor(key: key))
                keys = cookieNames.map { _ in [derived] }
            } else {
                var perName = [[DerivedKey]]()
                for cookieName in cookieNames {
                    var list = [DerivedKey]()
                    for secret in secrets {
                        for encryption in [ContentEncryption.a256cbcHS512, .a256gcm] {
                            let key = try SessionCookieProvider.authjsKey(secret: secret, salt: cookieName, encryption: encryption)
                            let decryptor: any ContentDecryptor = encryption == .a256gcm
                                ? try AESGCMDecryptor(key: key) : try AESCBCHMACDecryptor(key: key)
                            list.append(DerivedKey(keyID: Array(SessionCookieProvider.thumbprint(key).utf8), decryptor: decryptor))
                        }
                    }
                    perName.append(list)
                }
                keys = perName
            }
        } catch {
            throw .key(provider: name, error)
        }
    }

    static func authjsKey(secret: String, salt: String, encryption: ContentEncryption) throws(KeyLoadingError) -> [UInt8] {
        try hkdfSHA256(secret: Array(secret.utf8), salt: Array(salt.utf8),
                       info: Array("Auth.js Generated Encryption Key (\(salt))".utf8), length: encryption.keyLength)
    }

    /// RFC 7638 thumbprint of `{"k":…,"kty":"oct"}`, SHA-512 for 64-byte keys
    /// and SHA-256 for 32-byte keys (jose `calculateJwkThumbprint`, `sha${bits}`).
    static func thumbprint(_ key: [UInt8]) -> String {
        let json = "{\"k\":\"\(Base64URL.encode(key))\",\"kty\":\"oct\"}"
        return Base64URL.encode(digestBytes(key.count == 64 ? .sha512 : .sha256, Array(json.utf8)))
    }

    var isV4: Bool { policy.kind == .nextauth }

    /// Decrypts and checks a session JWE presented under `cookieNames[nameIndex]`
    /// (for a Bearer JWE every name is tried by the caller).
    func verify(_ bytes: UnsafeRawBufferPointer, nameIndex: Int, now: Double, source: VerifiedIdentity.Source) -> Result<VerifiedIdentity, AuthFailure> {
        func fail(_ reason: AuthFailure.Reason) -> Result<VerifiedIdentity, AuthFailure> {
            .failure(AuthFailure(reason, provider: policy.name))
        }
        guard let segments = CompactSegments(bytes), segments.count == 5 else { return fail(.malformed) }
        let jwe: SessionJWE
        switch SessionJWE.parse(bytes, segments: segments) {
        case .success(let value): jwe = value
        case .failure(let reason): return fail(reason)
        }
        // v4 writes A256GCM only; v5 writes A256CBC-HS512 and reads A256GCM too.
        if isV4 && jwe.encryption != .a256gcm { return fail(.algorithmNotAllowed) }
        // A `kid` that names none of our secrets' keys: sealed under another secret (or one
        // rotated out). That is a cookie that cannot be decrypted, not a signing key to fetch.
        if isV4 && jwe.keyID != nil { return fail(.decryptionFailed) }

        let candidates = keys[nameIndex]
        let key: DerivedKey?
        if isV4 {
            key = candidates.first
        } else if let kid = jwe.keyID {
            key = candidates.first { $0.decryptor.encryption == jwe.encryption && $0.keyID == kid }
        } else {
            key = candidates.first { $0.decryptor.encryption == jwe.encryption }  // the first secret
        }
        guard let key else { return fail(.decryptionFailed) }

        let encryption = jwe.encryption
        guard let ivLength = Base64URL.decodedLength(jwe.iv.count), ivLength == encryption.ivLength,
              let tagLength = Base64URL.decodedLength(jwe.tag.count), tagLength == encryption.tagLength,
              let ciphertextLength = Base64URL.decodedLength(jwe.ciphertext.count), ciphertextLength > 0 else {
            return fail(.malformed)
        }
        var ciphertext = [UInt8](repeating: 0, count: ciphertextLength)
        let plaintext = withUnsafeTemporaryAllocation(byteCount: 64, alignment: 8) { scratch -> [UInt8]? in
            let iv = UnsafeMutableRawBufferPointer(rebasing: scratch[0..<16])
            let tag = UnsafeMutableRawBufferPointer(rebasing: scratch[16..<48])
            guard Base64URL.decode(UnsafeRawBufferPointer(rebasing: bytes[jwe.iv]), into: iv) == ivLength,
                  Base64URL.decode(UnsafeRawBufferPointer(rebasing: bytes[jwe.tag]), into: tag) == tagLength,
                  ciphertext.withUnsafeMutableBytes({ Base64URL.decode(UnsafeRawBufferPointer(rebasing: bytes[jwe.ciphertext]), into: $0) })
                    == ciphertextLength else { return nil }
            return ciphertext.withUnsafeBytes { c in
                key.decryptor.decrypt(aad: UnsafeRawBufferPointer(rebasing: bytes[jwe.headerSegment]),
                                      iv: UnsafeRawBufferPointer(rebasing: iv[0..<ivLength]), ciphertext: c,
                                      tag: UnsafeRawBufferPointer(rebasing: tag[0..<tagLength]))
            }
        }
        guard let plaintext else { return fail(.decryptionFailed) }

        let document: JSONDocument
        do { document = try JSONDocument.parsingObject(plaintext) } catch { return fail(.badJSON) }
        let claims = ClaimValidation(document: document, claims: 0, policy: policy)
        let times: (expiresAt: Double, issuedAt: Double?)
        switch claims.checkTimes(now: now) {
        case .success(let value): times = value
        case .failure(let reason): return fail(reason)
        }
        if let reason = claims.checkIssuer() ?? claims.checkAudience() { return fail(reason) }
        let subject: String
        switch claims.subject() {
        case .success(let value): subject = value
        case .failure(let reason): return fail(reason)
        }
        if let reason = claims.checkRequiredClaims() { return fail(reason) }
        let forwarded = claims.forwardedClaims()
        return .success(VerifiedIdentity(
            provider: policy.name, subject: subject, issuer: claims.issuer(),
            expiresAt: times.expiresAt, issuedAt: times.issuedAt, tokenID: claims.optionalString(.jti),
            sessionID: claims.optionalString(.sid), claimList: forwarded.claims, listClaims: forwarded.lists,
            // A session cookie carries no jti: it is always revoked by this hash
            // (computed on a cache miss only, then cached with the identity).
            credentialHash: CredentialHash.hex(of: bytes), source: source))
    }
}
