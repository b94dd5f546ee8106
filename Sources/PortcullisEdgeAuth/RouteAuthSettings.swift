import PortcullisAuth

/// What an `auth: optional` route does with a session cookie that fails verification.
public enum InvalidCredentialAction: String, Sendable, Equatable {
    case refuse
    /// Forward without identity (identity headers still stripped): a browser with a stale
    /// cookie still reaches the page, and the app's own sign-out.
    case anonymous
}

/// A set of HTTP statuses, as classes (`2xx`) and single codes.
public struct StatusSet: Sendable, Equatable {
    /// Status classes by their first digit (2 for 2xx).
    public var classes: Set<Int> = []
    public var codes: Set<Int> = []
    public init() {}
    public var isEmpty: Bool { classes.isEmpty && codes.isEmpty }
    public func contains(_ status: Int) -> Bool { codes.contains(status) || classes.contains(status / 100) }
}

/// What happens to a request on `auth: required` without a credential.
public enum UnauthenticatedAction: Sendable, Equatable {
    /// 401 with `WWW-Authenticate: Bearer realm="…"` (APIs; the default).
    case challenge
    /// 302 to a sign-in URL with the original path in `callbackUrl`, as
    /// NextAuth's middleware does (browser routes). Only for GET and HEAD
    /// requests; others still get the 401.
    case redirect(String)
}

/// A rule one claim must satisfy on a route (403 `insufficient_scope` otherwise).
public struct RouteClaimRule: Sendable, Equatable {
    public var claim: String
    public var requirement: ClaimRequirement
    public init(claim: String, requirement: ClaimRequirement) {
        self.claim = claim
        self.requirement = requirement
    }
}

/// The authentication side of one route, by the route's position in `routes`.
public struct RouteAuthSettings: Sendable {
    public var requiredClaims: [RouteClaimRule] = []
    /// Methods that pass without authentication (e.g. CORS preflight `OPTIONS`).
    public var bypassMethods: Set<String> = []
    public var onUnauthenticated: UnauthenticatedAction = .challenge
    /// Keep the client's `Authorization` header for the upstream (default true).
    public var forwardAuthorization = true
    /// Keep the session cookies for the upstream (default true).
    public var forwardSessionCookie = true
    /// Logout routes: the upstream statuses after which the credential presented is revoked
    /// (`revoke_on_success: true` is 2xx; a list such as `[2xx, 302, 303]` takes NextAuth's
    /// sign-out form, which answers with a redirect). Empty: never.
    public var revokeOnStatuses: StatusSet = StatusSet()
    /// `on_invalid` on `auth: optional` routes: an invalid, expired or revoked session
    /// cookie is refused (401, the default) or the request passes as anonymous.
    public var onInvalid: InvalidCredentialAction = .refuse
    /// The refusal body's shape on this route (nil: `identity.error_body`).
    public var errorBody: ErrorBodyTemplate?
    /// `credential: {json_field, providers, max_body}`: the route's credential is a member
    /// of its JSON request body, not the `Authorization` header or a cookie (nil: the head).
    public var bodyCredential: BodyCredentialSettings?
    /// A token endpoint (the sessions exchange): a refused or missing credential is an
    /// RFC 6749 §5.2 error, `400 invalid_grant` / `400 invalid_request` without a
    /// `WWW-Authenticate` challenge, not a resource route's 401 (RFC 6750).
    public var refusesAsGrant = false
    public init() {}
}

/// Where a body-carried credential is found and who may have issued it.
public struct BodyCredentialSettings: Sendable {
    /// The top-level JSON member holding the token (`token`, `idToken`, `refreshToken`).
    public var field: String
    /// Providers accepted for the body credential (nil: the route's `providers`).
    public var providers: [String]?
    /// The most body bytes read before deciding (`max_body`, default 64 KiB); beyond: 413.
    public var maxBodyBytes: Int
    /// A second member name read when `field` is absent (the session exchange's `id_token`).
    public var alternateField: String?
    /// Without the member, the `Authorization: Bearer` token is the credential (the session
    /// exchange takes the ID token either way).
    public var bearerFallback = false
    public init(field: String, providers: [String]? = nil, maxBodyBytes: Int = 64 * 1024) {
        self.field = field
        self.providers = providers
        self.maxBodyBytes = maxBodyBytes
    }
}

/// How verified identity reaches upstreams.
public struct IdentitySettings: Sendable {
    /// Prefix the user id with the provider name (`google:1175…`).
    public var prefixProvider = false
    /// `identity.assertion`: a signed JWS for upstreams on every authenticated request (nil: none).
    public var assertion: AssertionSettings?
    /// `identity.error_body`: the refusal body's shape on every route (default `oauth`).
    public var errorBody = ErrorBodyTemplate.oauth
    public init() {}
}
