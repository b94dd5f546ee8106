import PortcullisAuth

/// `identity.assertion`: what the gateway signs for upstreams so an app can check that a
/// request came through the gateway (as Google IAP's `x-goog-iap-jwt-assertion`,
/// Cloudflare Access's `Cf-Access-Jwt-Assertion` and Pomerium's `X-Pomerium-Jwt-Assertion`).
public struct AssertionSettings: Sendable {
    /// The request header carrying the compact JWS.
    public var header = "X-Portcullis-Assertion"
    /// `iss` of every assertion.
    public var issuer: String
    /// `exp - iat`, seconds.
    public var lifetime: Double = 60
    /// ES256 (default), EdDSA, RS256 or HS256.
    public var algorithm: JWSAlgorithm = .es256
    /// PEM private keys: the first signs, every one is published. Empty (and not HS256):
    /// a key pair is generated at start (shared through Redis with `store.redis`).
    public var signingKeys: [String] = []
    /// HS256 only: the shared secret (never published).
    public var secret: String?

    public init(issuer: String) {
        self.issuer = issuer
    }

    public static let supportedAlgorithms: [JWSAlgorithm] = [.es256, .edDSA, .rs256, .hs256]
}
