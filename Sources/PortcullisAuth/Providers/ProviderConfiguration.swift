/// Everything needed to build one provider's verifier, filled by the YAML
/// configuration loader in another module. Unset optionals take the rule
/// book's per-kind defaults (`ProviderPolicy`).
public struct ProviderConfiguration: Sendable {
    public enum Kind: String, Sendable {
        case hs256, google, apple, firebase, oidc, nextauth, authjs
        /// Firebase session cookies (Admin SDK `createSessionCookie`), a JWS in the `__session`
        /// cookie, issuer `https://session.firebase.google.com/<project>`.
        case firebaseSession = "firebase_session"

        /// Kinds whose credential travels in a session cookie.
        public var readsCookies: Bool { self == .nextauth || self == .authjs || self == .firebaseSession }
    }

    /// The cookie Firebase Hosting forwards to the app, and so the default of `firebase_session`.
    public static let firebaseSessionCookie = "__session"

    public var name: String
    public var kind: Kind
    /// hs256 / nextauth / authjs secret (UTF-8 bytes are the key material).
    public var secret: String?
    /// authjs rotation list (`AUTH_SECRET_1..3`, then `AUTH_SECRET`); nextauth uses the first.
    public var secrets: [String]
    /// Accepted `aud` values (Google iOS + web client IDs, Apple bundle + Services IDs, ...).
    public var audiences: [String]
    /// Expected `iss` (oidc; optional for hs256). Presets fix google/apple/firebase issuers.
    public var issuer: String?
    /// Firebase project ID: the audience and the issuer suffix.
    public var projectID: String?
    /// oidc allow-list, e.g. ["RS256","ES256","EdDSA"]; hs256 may list HS384/HS512.
    public var algorithms: [String]
    /// Claims that must hold (403 `insufficient_scope` when they do not).
    public var requiredClaims: [String: ClaimRequirement]
    /// nil → provider default (google 300, nextauth/authjs 15, hs256 15, firebase 5, apple 60, oidc 60).
    public var leewaySeconds: Int?
    /// nextauth/authjs cookie name override; both it and its `__Secure-` form are accepted.
    public var cookieName: String?
    /// Google `hd` that must match exactly.
    public var hostedDomain: String?
    /// Maximum `exp - iat` (and `exp - now`); nil → default (google 86400, hs256 30 days).
    public var maxLifetimeSeconds: Int?
    /// Claims copied into `VerifiedIdentity.claims` (names or dotted paths).
    public var forwardedClaims: [String]
    /// The claim (or dotted path) holding the user id; nil → `sub`. A string, or an
    /// integer (written in decimal), non-empty and within the provider's length limit.
    public var userIdClaim: String?
    /// hs256: a `kid` the secret is bound to (tokens with another kid are refused).
    public var keyID: String?
    /// hs256 / oidc: accepted `typ` values (case-insensitive); nil → absent or "JWT".
    public var acceptedTypes: [String]?

    public init(name: String, kind: Kind) {
        self.name = name
        self.kind = kind
        self.secret = nil
        self.secrets = []
        self.audiences = []
        self.issuer = nil
        self.projectID = nil
        self.algorithms = []
        self.requiredClaims = [:]
        self.leewaySeconds = nil
        self.cookieName = nil
        self.hostedDomain = nil
        self.maxLifetimeSeconds = nil
        self.forwardedClaims = ["email", "email_verified", "name", "picture", "hd", "azp"]
        self.keyID = nil
        self.acceptedTypes = nil
        self.userIdClaim = nil
    }
}

/// A condition on one claim.
public enum ClaimRequirement: Sendable, Equatable {
    /// The claim is a string equal to this value.
    case equals(String)
    /// The claim is this boolean. For Apple, the strings "true"/"false" count too.
    case equalsBool(Bool)
    /// The claim is a string in this set, or an array containing one of them.
    case oneOf([String])
    /// The claim is present (any value but null).
    case present
}
