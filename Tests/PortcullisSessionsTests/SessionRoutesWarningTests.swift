import PortcullisProxy
import PortcullisSessions
import Testing

/// `SessionSettings.warningWhenNoRouteAccepts`: check-config warns when the exchange would
/// issue access tokens that no route takes.
struct SessionRoutesWarningTests {
    let settings = SessionSettings(issuer: "https://api.example.test", accept: ["google"],
                                   refreshSecret: "session-refresh-secret-0123456789abcdef")

    func route(_ path: String, _ auth: AuthMode, providers: [String]? = nil) -> RouteConfiguration {
        RouteConfiguration(pathPrefix: path, upstream: "app", auth: auth, providers: providers)
    }

    @Test func warnsOnlyWhenNoRouteBesidesTheEndpointsAcceptsSessionTokens() {
        // Every route open, or the only protected ones are the session endpoints themselves.
        #expect(settings.warningWhenNoRouteAccepts([route("/", .none)]) != nil)
        #expect(settings.warningWhenNoRouteAccepts([route("/", .none), route(settings.refreshPath, .required)]) != nil)
        // Protected routes that list providers without `session` (accept_sessions: false).
        #expect(settings.warningWhenNoRouteAccepts([route("/api", .required, providers: ["google"])]) != nil)
        // A protected route without a list accepts every provider, sessions included; so does
        // one whose list names `session`, required or optional.
        #expect(settings.warningWhenNoRouteAccepts([route("/", .none), route("/api", .required)]) == nil)
        #expect(settings.warningWhenNoRouteAccepts([route("/api", .optional, providers: ["google", SessionSettings.providerName])]) == nil)
    }
}
