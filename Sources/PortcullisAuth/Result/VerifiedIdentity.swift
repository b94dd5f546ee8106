/// Who a verified credential says the caller is.
public struct VerifiedIdentity: Sendable, Equatable {
    /// How the credential arrived.
    public enum Source: String, Sendable { case bearer, sessionCookie }

    /// The configured provider name that verified it.
    public var provider: String
    /// `sub`.
    public var subject: String
    /// `iss`, when the token has one (NextAuth cookies do not).
    public var issuer: String?
    /// `exp`, seconds since the epoch.
    public var expiresAt: Double
    /// `iat`, when present.
    public var issuedAt: Double?
    /// `jti`, when present.
    public var tokenID: String?
    /// `sid`, when present (OIDC session ID).
    public var sessionID: String?
    /// Selected claims rendered as strings (strings as is, booleans
    /// `true`/`false`, numbers in JSON form). Which claims: `ProviderConfiguration.forwardedClaims`.
    public var claims: [String: String]
    /// Forwarded claims that are arrays of strings, element by element (in
    /// `claims` they appear joined with ","), for route claim rules.
    public var listClaims: [String: [String]]
    /// Hex SHA-256 (first 128 bits) of the credential as presented: a stable
    /// name for revoking a token that carries no `jti`. Bearer JWTs with a
    /// `jti` leave it nil (they are revoked by `jti`); session cookies always have it.
    public var credentialHash: String?
    public var source: Source

    public init(provider: String, subject: String, issuer: String?, expiresAt: Double, issuedAt: Double?,
                tokenID: String?, sessionID: String?, claims: [String: String], listClaims: [String: [String]] = [:],
                credentialHash: String? = nil, source: Source) {
        self.provider = provider
        self.subject = subject
        self.issuer = issuer
        self.expiresAt = expiresAt
        self.issuedAt = issuedAt
        self.tokenID = tokenID
        self.sessionID = sessionID
        self.claims = claims
        self.listClaims = listClaims
        self.credentialHash = credentialHash
        self.source = source
    }
}

/// The outcome of verifying one credential: never a bare boolean.
public enum VerificationResult: Sendable, Equatable {
    case verified(VerifiedIdentity)
    case failed(AuthFailure)

    public var identity: VerifiedIdentity? {
        if case .verified(let identity) = self { return identity }
        return nil
    }

    public var failure: AuthFailure? {
        if case .failed(let failure) = self { return failure }
        return nil
    }
}
