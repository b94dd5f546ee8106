import PortcullisProxy

extension SessionSettings {
    /// `check-config`'s warning when no route of `routes` accepts the session tokens these
    /// settings issue (every route `auth: none` or `accept_sessions: false`, the session
    /// endpoints aside): the exchange would hand out access tokens no route takes. Nil when one does.
    public func warningWhenNoRouteAccepts(_ routes: [RouteConfiguration]) -> String? {
        let endpoints = Set(exchanges.map(\.path) + [refreshPath, logoutPath, sessionsPath])
        let accepting = routes.contains { route in
            route.auth != .none && !endpoints.contains(route.pathPrefix)
                && (route.providers?.contains(SessionSettings.providerName) ?? true)
        }
        return accepting ? nil : "sessions: is on but no route accepts session tokens (every route is auth: none or "
            + "accept_sessions: false): the access tokens the exchange issues would be refused everywhere"
    }
}
