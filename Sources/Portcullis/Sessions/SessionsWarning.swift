import PortcullisProxy
import PortcullisSessions

extension GatewayConfiguration {
    /// `check-config`'s warning when `sessions:` is on and no route accepts the session
    /// tokens it issues (every route `auth: none` or `accept_sessions: false`): the exchange
    /// would hand out access tokens no route takes.
    public var sessionsWarning: String? {
        guard let sessions else { return nil }
        let endpoints = Set(sessions.exchanges.map(\.path) + [sessions.refreshPath, sessions.logoutPath, sessions.sessionsPath])
        let accepting = proxy.routes.contains { route in
            route.auth != .none && !endpoints.contains(route.pathPrefix)
                && (route.providers?.contains(SessionSettings.providerName) ?? true)
        }
        return accepting ? nil : "sessions: is on but no route accepts session tokens (every route is auth: none or "
            + "accept_sessions: false): the access tokens the exchange issues would be refused everywhere"
    }
}
