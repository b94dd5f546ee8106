import PortcullisAuth
import PortcullisEdgeAuth

/// `sessions:` — mobile sign-in at the edge (#27): an app's client exchanges a verified ID
/// token (Google, Apple, Firebase) for a session of the gateway's own: a short-lived access
/// JWT signed by the gateway, accepted on every route by the built-in `session` provider,
/// and an opaque refresh token rotated on every use, with reuse detection.
///
/// ```yaml
/// sessions:
///   issuer: "https://api.example.com"
///   accept: [google, apple]
///   id_token_field: idToken            # also read: id_token
///   user: {provider_subject: true}     # user id "<provider>:<sub>"
///   access_token: {lifetime: 15m, signing_keys: [/etc/portcullis/session-es256.pem]}
///   refresh_token: {lifetime: 90d, idle_timeout: 30d, reuse_grace: 10s, secret: "${SESSION_SECRET}"}
///   paths: {exchange: /auth/session, refresh: /auth/refresh, logout: /auth/logout, sessions: /auth/sessions}
///   require_tls: true
/// ```
///
/// `paths.exchange` may also list several exchange endpoints, each with its own member and
/// providers (an app that signs in with Google at one path and Apple at another):
/// `exchange: [{path: /api/auth/mobile/google, id_token_field: idToken, accept: [google]},
/// {path: /api/auth/mobile/apple, id_token_field: identityToken, accept: [apple]}]`; an entry's
/// `accept` defaults to `sessions.accept` (and must be part of it), its `id_token_field` to
/// `sessions.id_token_field`.
public struct SessionSettings: Sendable {
    /// The built-in provider that accepts the gateway's access tokens.
    public static let providerName = EdgeAuthenticator.sessionProviderName

    /// `iss` of the access tokens (and their `aud`).
    public var issuer: String
    /// Providers whose ID tokens may be exchanged.
    public var accept: [String]
    /// The JSON member holding the ID token (`id_token` is read too): the default of every
    /// exchange endpoint.
    public var idTokenField = "idToken"
    public var accessLifetime: Double = 15 * 60
    /// ES256 private keys (PEM files); the first signs. Empty: one generated at start (one
    /// instance only: its tokens end with the process; refresh tokens survive).
    public var signingKeyFiles: [String] = []
    public var refreshLifetime: Double = 90 * 86_400
    /// A refresh token unused this long ends its session.
    public var idleTimeout: Double = 30 * 86_400
    /// The previous refresh token, presented within this long after a rotation, gets the
    /// current pair (racing refreshes converge); any other reuse ends the session.
    public var reuseGrace: Double = 10
    /// The MAC key of the refresh tokens (at least 32 bytes), the same on every instance.
    public var refreshSecret: String
    /// The exchange endpoints (at least one): `paths.exchange`.
    public var exchanges: [Exchange]
    /// One exchange endpoint: its path, the body member with the ID token, the providers
    /// whose ID tokens it takes.
    public struct Exchange: Sendable, Equatable {
        public var path: String
        public var idTokenField: String
        public var accept: [String]
        public init(path: String, idTokenField: String, accept: [String]) {
            self.path = path
            self.idTokenField = idTokenField
            self.accept = accept
        }
    }
    public var refreshPath = "/auth/refresh"
    public var logoutPath = "/auth/logout"
    public var sessionsPath = "/auth/sessions"
    /// The session endpoints answer on TLS listeners only (a plain request: 403).
    public var requireTLS = true
    /// The exchange demands the client's `nonce` and an ID token carrying it (OIDC's replay
    /// protection: a token captured without its sign-in's nonce is refused); off by default,
    /// so clients that send none keep working.
    public var requireNonce = false
    /// The most sessions one user keeps; a new sign-in past it ends the least recently used
    /// (a replayed ID token cannot grow the store without bound).
    public var maxPerUser = 50
    /// `error_body`: the session endpoints' refusal shape (default: `identity.error_body`);
    /// whichever it is, the RFC 6749 code is in it (`ErrorBodyTemplate.carryingCode`).
    public var errorBody: ErrorBodyTemplate?
    /// `device_field`: the exchange body's member naming the device (default `device_name`;
    /// FolioMind's client sends `device_id`), else the User-Agent.
    public var deviceField = "device_name"
    /// `logout_status`: 204 (no body, the default) or 200 (`{"status":"logged_out"}`).
    public var logoutStatus = 204
    /// `old_refresh_tokens: forward` (the default): when the refresh path is also an app's
    /// `auth: none` route, refresh tokens the gateway did not issue go to that route as
    /// before; `refuse`: such a route is refused at start, as any path clash.
    public var forwardsOldRefreshTokens = true
    /// `response`: the exchange's and the refresh's answer in the shape the app's clients
    /// decode (nil: the default pair). See `SessionResponseTemplate`.
    public var response: SessionResponseTemplate?
    /// `carry_claims`: top-level claims of the ID token put into every access token of the
    /// session, with their JSON types (`email`, `email_verified`, `name`, …), so claim headers
    /// and `require_claims` rules match session tokens as they matched the ID token. A claim
    /// the lookup hook names too is the hook's.
    public var carryClaims: [String] = []
    /// Claims of the access token itself, never carried.
    public static let registeredClaims: Set<String> = ["iss", "aud", "sub", "sid", "iat", "exp", "nbf", "jti", "idp", "idp_sub",
                                                       "nonce", "azp", "at_hash", "c_hash", "auth_time"]
    /// `user: {lookup: {upstream, path}}`: the app maps a verified identity to its own user
    /// id (and claims) at the exchange; nil: the user id is "<provider>:<sub>".
    public var lookup: Lookup?
    public struct Lookup: Sendable, Equatable {
        public var upstream: String
        public var path: String
        /// How long the app may take to answer.
        public var timeout: Double = 5
        public init(upstream: String, path: String, timeout: Double = 5) {
            self.upstream = upstream
            self.path = path
            self.timeout = timeout
        }
    }

    public init(issuer: String, accept: [String], refreshSecret: String) {
        self.issuer = issuer
        self.accept = accept
        self.refreshSecret = refreshSecret
        self.exchanges = [Exchange(path: "/auth/session", idTokenField: "idToken", accept: accept)]
    }
}
