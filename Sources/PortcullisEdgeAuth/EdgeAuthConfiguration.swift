import PortcullisProxy

/// What the edge-auth policy is made from: the proxy's routes and identity headers, each
/// route's authentication settings, how identity reaches upstreams, and which providers
/// read session cookies under which names. The gateway's configuration loader fills it.
public struct EdgeAuthConfiguration: Sendable {
    /// Routes (by position), the realm, the identity and claim headers, the upstreams.
    public var proxy: ProxyConfiguration
    /// The authentication side of each route, by the route's position in `proxy.routes`.
    public var routeAuth: [RouteAuthSettings]
    public var identity: IdentitySettings
    /// The session cookie names of each provider that reads cookies (NextAuth, Auth.js,
    /// Firebase session cookies), in configuration order.
    public var sessionCookies: [(provider: String, names: [String])]

    public init(proxy: ProxyConfiguration, routeAuth: [RouteAuthSettings] = [], identity: IdentitySettings = IdentitySettings(),
                sessionCookies: [(provider: String, names: [String])] = []) {
        self.proxy = proxy
        self.routeAuth = routeAuth
        self.identity = identity
        self.sessionCookies = sessionCookies
    }

    /// The shape of a route's refusal bodies: its own `error_body`, else `identity.error_body`.
    public func errorBody(route index: Int) -> ErrorBodyTemplate {
        (index < routeAuth.count ? routeAuth[index].errorBody : nil) ?? identity.errorBody
    }
}
