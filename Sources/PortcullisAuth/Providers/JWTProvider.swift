import PortcullisCore
/// A provider that verifies compact JWS bearer tokens (google, apple,
/// firebase, hs256, oidc) with its policy and its current key set.
///
/// Threading: `policy` is immutable. The key set is an immutable snapshot
/// behind a lock held only to copy the reference (and bump the generation
/// on rotation); verification itself runs without any lock.
final class JWTProvider: Sendable {
    struct KeyState {
        var keys: KeySet
        var generation: UInt64
    }

    let policy: ProviderPolicy
    private let state: LockedValue<KeyState>

    init(policy: ProviderPolicy, keys: KeySet) {
        self.policy = policy
        self.state = LockedValue(KeyState(keys: keys, generation: 1))
    }

    var name: String { policy.name }

    var keySnapshot: (keys: KeySet, generation: UInt64) {
        state.withLock { ($0.keys, $0.generation) }
    }

    var generation: UInt64 { state.withLock { $0.generation } }

    /// Swaps in a new key set and returns the new generation; verified-token
    /// cache entries of older generations stop matching.
    @discardableResult
    func replaceKeys(_ keys: KeySet) -> UInt64 {
        state.withLock {
            $0.keys = keys
            $0.generation &+= 1
            return $0.generation
        }
    }

    /// The checks that select this provider for a token, before any
    /// signature work: algorithm, `typ`, `iss`. A failure here means "not
    /// this provider's token".
    func accepts(_ token: JWSToken) -> AuthFailure.Reason? {
        guard policy.algorithmBits & token.algorithm.bit != 0 else { return .algorithmNotAllowed }
        guard token.typeAccepted(policy.acceptedTypes) else { return .typeNotAccepted }
        return ClaimValidation(document: token.document, claims: token.payload, policy: policy, index: token.claims).checkIssuer()
    }

    /// Full verification of a token that `accepts` admitted. `bytes` is the
    /// whole credential (the identity carries its hash).
    func verify(_ token: JWSToken, bytes: UnsafeRawBufferPointer, now: Double, nonceHex: [UInt8]?) -> Result<(VerifiedIdentity, UInt64), AuthFailure> {
        func fail(_ reason: AuthFailure.Reason) -> Result<(VerifiedIdentity, UInt64), AuthFailure> {
            .failure(AuthFailure(reason, provider: policy.name))
        }
        let document = token.document
        if policy.requireKeyID && token.keyID == nil { return fail(.missingKeyID) }
        let (keys, generation) = keySnapshot
        if keys.isEmpty { return fail(.keysUnavailable) }

        let lookup: VerificationKey?
        if let kidIndex = token.keyID {
            let kid = document[kidIndex]
            if kid.flag {
                lookup = document.stringBytes(kidIndex).flatMap { bytes in bytes.withUnsafeBytes { keys.key(forKeyID: $0, algorithm: token.algorithm) } }
            } else {
                lookup = document.withBytes {
                    keys.key(forKeyID: UnsafeRawBufferPointer(UnsafeBufferPointer(rebasing: $0[Int(kid.start)..<Int(kid.end)])), algorithm: token.algorithm)
                }
            }
        } else {
            lookup = keys.key(forKeyID: nil, algorithm: token.algorithm)
        }
        guard let key = lookup else { return fail(.unknownKey) }
        // The key's own algorithm must be the token's: RS→HS confusion and
        // `none` cannot reach a verifier.
        guard key.algorithm == token.algorithm else { return fail(.algorithmNotAllowed) }

        let signatureText = UnsafeRawBufferPointer(rebasing: bytes[token.signature])
        guard let signatureLength = Base64URL.decodedLength(signatureText.count),
              signatureLength == key.verifier.maxSignatureLength else { return fail(.signatureInvalid) }
        // Sized by the key (an RSA-8192 signature is 1,024 bytes); on the stack.
        let check = withUnsafeTemporaryAllocation(byteCount: signatureLength, alignment: 8) { buffer -> SignatureCheck in
            guard Base64URL.decode(signatureText, into: buffer) == signatureLength else { return .malformed }
            return key.verify(signingInput: UnsafeRawBufferPointer(rebasing: bytes[token.signingInput]),
                              signature: UnsafeRawBufferPointer(rebasing: buffer[0..<signatureLength]))
        }
        switch check {
        case .valid: break
        case .invalid, .malformed: return fail(.signatureInvalid)
        case .internalError: return fail(.internalError)
        }

        let claims = ClaimValidation(document: document, claims: token.payload, policy: policy, index: token.claims)
        let times: (expiresAt: Double, issuedAt: Double?)
        switch claims.checkTimes(now: now) {
        case .success(let value): times = value
        case .failure(let reason): return fail(reason)
        }
        if let reason = claims.checkAudience() { return fail(reason) }
        let subject: String
        switch claims.subject() {
        case .success(let value): subject = value
        case .failure(let reason): return fail(reason)
        }
        if let reason = claims.checkNonce(expectedHex: nonceHex) { return fail(reason) }
        if let reason = claims.checkRequiredClaims() { return fail(reason) }

        let forwarded = claims.forwardedClaims()
        let tokenID = claims.optionalString(.jti)
        // Built in place in the result: a named local would be copied into it (eight fields retained and released).
        return .success((VerifiedIdentity(
            provider: policy.name, subject: subject, issuer: claims.issuer(),
            expiresAt: times.expiresAt, issuedAt: times.issuedAt, tokenID: tokenID,
            sessionID: claims.optionalString(.sid), claimList: forwarded.claims, listClaims: forwarded.lists,
            // A token with a `jti` is revoked by it; the hash (a SHA-256 per miss) names only tokens
            // without one, by the signing input, which no form of the signature changes.
            credentialHash: tokenID == nil ? CredentialHash.hex(of: UnsafeRawBufferPointer(rebasing: bytes[token.signingInput])) : nil,
            legacyCredentialHash: tokenID == nil ? CredentialHash.hex(of: bytes) : nil, source: .bearer), generation))
    }
}
