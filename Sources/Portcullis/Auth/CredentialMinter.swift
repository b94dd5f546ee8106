import PortcullisAuth

/// Mints test credentials that a configured provider accepts: HS256 tokens
/// and NextAuth / Auth.js session cookies from the configured secret; RS256,
/// ES256 or EdDSA tokens for google / apple / firebase / oidc from a private
/// key the user holds (their local issuer's). For the demo, `portcullis mint`
/// and load tests, never for production sign-in.
public struct CredentialMinter {
    public enum MintError: Error, CustomStringConvertible {
        case needsPrivateKey(provider: String)
        case key(KeyLoadingError)
        public var description: String {
            switch self {
            case .needsPrivateKey(let provider):
                return "provider \(provider) verifies public-key signatures: pass --key PRIVATE_KEY.pem (and --kid KID)"
            case .key(let error): return "\(error)"
            }
        }
    }

    /// A minted credential and how a client presents it.
    public struct Credential: Sendable {
        public var token: String
        /// `Authorization: Bearer …` or `Cookie: name=…`.
        public var headerName: String
        public var headerValue: String
        public var tokenID: String
    }

    let provider: ProviderSettings
    let signingKey: SigningKey?
    let keyID: String?

    public init(provider: ProviderSettings, privateKeyPEM: String? = nil, keyID: String? = nil) throws(MintError) {
        self.provider = provider
        self.keyID = keyID ?? provider.configuration.keyID
        switch provider.configuration.kind {
        case .hs256, .nextauth, .authjs:
            signingKey = nil
        case .google, .apple, .firebase, .oidc, .firebaseSession:
            guard let pem = privateKeyPEM else { throw .needsPrivateKey(provider: provider.configuration.name) }
            do { signingKey = try SigningKey(privateKeyPEM: pem) } catch { throw .key(error) }
        }
    }

    /// One credential for `subject`, valid from `now` for `lifetime` seconds.
    /// `extra` claims replace the minted ones of the same name, or are added after them
    /// (`portcullis mint --claim`: the app's own claim shape).
    public func mint(subject: String, now: Int64, lifetime: Int64, tokenID: String,
                     email: String? = nil, extra: [(String, JSONValue)] = []) throws(MintError) -> Credential {
        let c = provider.configuration
        var claims: [(String, JSONValue)] = []
        switch c.kind {
        case .google:
            claims.append(("iss", .string("https://accounts.google.com")))
            claims.append(("aud", .string(c.audiences.first ?? "")))
            claims.append(("azp", .string(c.audiences.first ?? "")))
        case .apple:
            claims.append(("iss", .string("https://appleid.apple.com")))
            claims.append(("aud", .string(c.audiences.first ?? "")))
        case .firebase, .firebaseSession:
            let issuer = c.kind == .firebase ? "https://securetoken.google.com/" : "https://session.firebase.google.com/"
            claims.append(("iss", .string(issuer + (c.projectID ?? ""))))
            claims.append(("aud", .string(c.projectID ?? "")))
            claims.append(("auth_time", .integer(now)))
        case .oidc, .hs256:
            if let issuer = c.issuer { claims.append(("iss", .string(issuer))) }
            if let audience = c.audiences.first { claims.append(("aud", .string(audience))) }
        case .nextauth, .authjs:
            break
        }
        claims.append(("sub", .string(subject)))
        // An app JWT that names its user in another claim (user_id_claim: userId, account.id).
        if let userClaim = c.userIdClaim, userClaim != "sub" {
            let parts = userClaim.split(separator: ".").map(String.init)
            var value = JSONValue.string(subject)
            for part in parts.dropFirst().reversed() { value = .object([(part, value)]) }
            claims.append((parts.first ?? userClaim, value))
        }
        claims.append(("iat", .integer(now)))
        claims.append(("exp", .integer(now + lifetime)))
        claims.append(("jti", .string(tokenID)))
        if let email {
            claims.append(("email", .string(email)))
            claims.append(("email_verified", .bool(true)))
        }
        if let domain = c.hostedDomain { claims.append(("hd", .string(domain))) }
        for (name, value) in extra {
            if let at = claims.firstIndex(where: { $0.0 == name }) { claims[at].1 = value } else { claims.append((name, value)) }
        }
        let value = JSONValue.object(claims)
        do {
            switch c.kind {
            case .nextauth:
                let token = try SessionCookieMinter.nextAuth(secret: c.secret ?? c.secrets.first ?? "", claims: value)
                return Credential(token: token, headerName: "Cookie", headerValue: "\(provider.sessionCookieNames[0])=\(token)", tokenID: tokenID)
            case .authjs:
                let name = provider.sessionCookieNames[0]
                let token = try SessionCookieMinter.authjs(secret: c.secret ?? c.secrets.first ?? "", cookieName: name, claims: value)
                return Credential(token: token, headerName: "Cookie", headerValue: "\(name)=\(token)", tokenID: tokenID)
            case .hs256:
                let algorithm = c.algorithms.first.flatMap(JWSAlgorithm.init(rawValue:)) ?? .hs256
                let key = SigningKey(hmacSecret: Array((c.secret ?? c.secrets.first ?? "").utf8), algorithm: algorithm)
                let token = try TokenMinter.sign(claims: value, key: key, keyID: keyID)
                return Credential(token: token, headerName: "Authorization", headerValue: "Bearer \(token)", tokenID: tokenID)
            case .firebaseSession:
                let token = try TokenMinter.sign(claims: value, key: signingKey!, keyID: keyID)
                return Credential(token: token, headerName: "Cookie", headerValue: "\(provider.sessionCookieNames[0])=\(token)", tokenID: tokenID)
            case .google, .apple, .firebase, .oidc:
                let token = try TokenMinter.sign(claims: value, key: signingKey!, keyID: keyID)
                return Credential(token: token, headerName: "Authorization", headerValue: "Bearer \(token)", tokenID: tokenID)
            }
        } catch {
            throw .key(error)
        }
    }
}
