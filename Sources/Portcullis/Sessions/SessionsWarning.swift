extension GatewayConfiguration {
    /// `check-config`'s warning when `sessions:` is on and no route accepts its tokens
    /// (`SessionSettings.warningWhenNoRouteAccepts`).
    public var sessionsWarning: String? { sessions?.warningWhenNoRouteAccepts(proxy.routes) }
}
