/// Checks a claim set against a provider's policy (RFC 7519 §4.1, OIDC Core
/// §3.1.3.7, and the per-provider rules of the rule book). Works on the
/// parsed document directly: no claim is copied unless it ends up in the
/// identity.
struct ClaimValidation {
    let document: JSONDocument
    let claims: Int
    let policy: ProviderPolicy
    let index: ClaimIndex

    init(document: JSONDocument, claims: Int, policy: ProviderPolicy, index: ClaimIndex? = nil) {
        self.document = document
        self.claims = claims
        self.policy = policy
        self.index = index ?? ClaimIndex(document, object: claims)
    }

    /// A claim's value token: indexed names without a scan, others by lookup.
    @inline(__always)
    func member(_ name: ClaimIndex.Name) -> Int? { index[name] }

    func member(_ claim: ProviderPolicy.ClaimPath) -> Int? {
        if let indexed = claim.indexed { return index[indexed] }
        if let direct = document.member(claims, claim.bytes) { return direct }
        guard !claim.path.isEmpty else { return nil }
        // A dotted path into nested objects (`firebase.sign_in_provider`).
        var current = claims
        for segment in claim.path {
            guard let next = document.member(current, segment) else { return nil }
            current = next
        }
        return current
    }

    /// `exp` (required), `nbf`, `iat`, lifetime and `auth_time`.
    func checkTimes(now: Double) -> Result<(expiresAt: Double, issuedAt: Double?), AuthFailure.Reason> {
        let leeway = policy.leeway
        guard let expIndex = member(.exp) else { return .failure(.missingExpiry) }
        guard let exp = document.number(expIndex), exp.isFinite else { return .failure(.claimInvalid) }
        if now >= exp + leeway { return .failure(.expired) }

        if let nbfIndex = member(.nbf) {
            guard let nbf = document.number(nbfIndex), nbf.isFinite else { return .failure(.claimInvalid) }
            if now < nbf - leeway { return .failure(.notYetValid) }
        }

        var issuedAt: Double?
        if let iatIndex = member(.iat) {
            guard let iat = document.number(iatIndex), iat.isFinite else { return .failure(.claimInvalid) }
            if now < iat - leeway { return .failure(.issuedInFuture) }
            issuedAt = iat
        } else if policy.requireIssuedAt {
            return .failure(.claimInvalid)
        }

        if let maxLifetime = policy.maxLifetime {
            // GAL: exp must be less than now + max; the jose-style bound on exp - iat for app tokens.
            if exp - now > maxLifetime + leeway { return .failure(.lifetimeTooLong) }
            if let issuedAt, exp - issuedAt > maxLifetime + leeway { return .failure(.lifetimeTooLong) }
        }

        if policy.checkAuthTime {
            guard let authIndex = member(.authTime),
                  let authTime = document.number(authIndex), authTime.isFinite else { return .failure(.claimInvalid) }
            if authTime > now + leeway { return .failure(.issuedInFuture) }
        }
        // Without `iat`, a subject revocation ("sign out everywhere") judges the credential as
        // issued at `exp` minus the provider's maximum lifetime: the earliest it can have been
        // issued, so one issued before the revocation is refused, and one issued after it is
        // refused only while its `exp` is within that lifetime of the revocation (`max_lifetime`
        // set to the app's real token lifetime makes this exact). Never "every future token".
        return .success((exp, issuedAt ?? policy.maxLifetime.map { exp - $0 }))
    }

    /// `iss` against the exact set (when the policy has one).
    func checkIssuer() -> AuthFailure.Reason? {
        guard !policy.issuers.isEmpty else { return nil }
        guard let index = member(.iss) else { return .issuerNotAccepted }
        return policy.issuers.contains { document.stringEquals(index, $0) } ? nil : .issuerNotAccepted
    }

    /// `aud` (string or array) must contain one of the configured audiences;
    /// `azp`, when present and the policy checks it, must be one of them too.
    func checkAudience() -> AuthFailure.Reason? {
        guard !policy.audiences.isEmpty else { return nil }
        guard let index = member(.aud) else { return .audienceNotAccepted }
        var matched = false
        switch document[index].kind {
        case .string:
            matched = policy.audiences.contains { document.stringEquals(index, $0) }
        case .array:
            var allStrings = true
            document.forEachElement(index) { element in
                guard document[element].kind == .string else { allStrings = false; return false }
                if !matched { matched = policy.audiences.contains { document.stringEquals(element, $0) } }
                return true
            }
            if !allStrings { return .claimInvalid }
        default:
            return .claimInvalid
        }
        guard matched else { return .audienceNotAccepted }
        if policy.checkAuthorizedParty, let azp = member(.azp) {
            guard policy.audiences.contains(where: { document.stringEquals(azp, $0) }) else { return .authorizedPartyNotAccepted }
        }
        return nil
    }

    /// `sub`: a non-empty string within the provider's length limit.
    func subject() -> Result<String, AuthFailure.Reason> {
        if let claim = policy.userIdClaim {
            // `user_id_claim`: a string, or an integer as its decimal text (`"userId": 42`).
            guard let index = member(claim) else { return .failure(.subjectInvalid) }
            let value: String?
            switch document[index].kind {
            case .string: value = document.string(index)
            case .number:
                let token = document[index]
                let text = document.withBytes { String(decoding: $0[Int(token.start)..<Int(token.end)], as: UTF8.self) }
                value = text.utf8.allSatisfy { $0 >= 48 && $0 <= 57 || $0 == UInt8(ascii: "-") } ? text : nil
            default: value = nil
            }
            guard let value, !value.isEmpty, value.utf8.count <= policy.subjectMaxLength else { return .failure(.subjectInvalid) }
            return .success(value)
        }
        guard let index = member(.sub), let sub = document.string(index),
              !sub.isEmpty, sub.utf8.count <= policy.subjectMaxLength else { return .failure(.subjectInvalid) }
        return .success(sub)
    }

    /// Google `hd` and configured required claims.
    func checkRequiredClaims() -> AuthFailure.Reason? {
        if let domain = policy.hostedDomain {
            guard let index = member(.hd), document.stringEquals(index, domain) else {
                return .hostedDomainMismatch
            }
        }
        for required in policy.requiredClaims {
            guard let index = member(required.claim), document[index].kind != .null else {
                return .requiredClaimMismatch
            }
            switch required.requirement {
            case .present:
                continue
            case .equals:
                guard document.stringEquals(index, required.valueBytes[0]) else { return .requiredClaimMismatch }
            case .oneOf:
                var matched = false
                if document[index].kind == .array {
                    document.forEachElement(index) { element in
                        matched = required.valueBytes.contains { document.stringEquals(element, $0) }
                        return !matched
                    }
                } else {
                    matched = required.valueBytes.contains { document.stringEquals(index, $0) }
                }
                guard matched else { return .requiredClaimMismatch }
            case .equalsBool(let expected):
                guard booleanClaim(index) == expected else { return .requiredClaimMismatch }
            }
        }
        return nil
    }

    /// A boolean claim; Apple's `"true"`/`"false"` strings count when the
    /// policy is lenient.
    func booleanClaim(_ index: Int) -> Bool? {
        if let value = document.bool(index) { return value }
        guard policy.lenientBooleans else { return nil }
        if document.stringEquals(index, Array("true".utf8)) { return true }
        if document.stringEquals(index, Array("false".utf8)) { return false }
        return nil
    }

    /// Apple nonce: when the client supplied a raw nonce the token's `nonce`
    /// must equal hex(SHA-256(raw)); a missing claim fails only when
    /// `nonce_supported` is true.
    func checkNonce(expectedHex: [UInt8]?) -> AuthFailure.Reason? {
        guard let expectedHex else { return nil }
        guard let index = member(.nonce) else {
            if let supported = member(.nonceSupported), booleanClaim(supported) == true {
                return .nonceMismatch
            }
            return nil
        }
        return document.stringEquals(index, expectedHex) ? nil : .nonceMismatch
    }

    /// Selected claims as strings for the identity; arrays of strings also
    /// element by element.
    func forwardedClaims() -> (claims: [IdentityClaim], lists: [String: [String]]) {
        var result = [IdentityClaim]()
        var lists = [String: [String]]()
        for claim in policy.forwardedClaims {
            guard let index = member(claim) else { continue }
            switch document[index].kind {
            case .string:
                guard let value = document.string(index) else { continue }
                result.append(IdentityClaim(name: claim.name, value: value))
            case .bool: result.append(IdentityClaim(name: claim.name, value: document[index].flag ? "true" : "false"))
            case .number:
                let token = document[index]
                result.append(IdentityClaim(name: claim.name, value: document.withBytes { String(decoding: $0[Int(token.start)..<Int(token.end)], as: UTF8.self) }))
            case .array:
                var elements = [String]()
                var allStrings = true
                document.forEachElement(index) { element in
                    guard let text = document.string(element) else { allStrings = false; return false }
                    elements.append(text)
                    return true
                }
                guard allStrings else { continue }
                lists[claim.name] = elements
                result.append(IdentityClaim(name: claim.name, value: elements.joined(separator: ",")))
            default: continue
            }
        }
        return (result, lists)
    }

    /// `iss` for the identity: the policy's own string when it is one of
    /// the accepted issuers (always, once `checkIssuer` passed), else the
    /// claim decoded.
    func issuer() -> String? {
        guard let index = member(.iss) else { return nil }
        for (offset, accepted) in policy.issuers.enumerated() where document.stringEquals(index, accepted) {
            return policy.issuerNames[offset]
        }
        return document.string(index)
    }

    /// The optional string claims the identity carries.
    func optionalString(_ name: ClaimIndex.Name) -> String? {
        member(name).flatMap { document.string($0) }
    }
}
