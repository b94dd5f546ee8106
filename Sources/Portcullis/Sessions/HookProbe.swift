/// `check-config --probe`: the session lookup hook tried once, as the exchange would reach it
/// (`SessionLookup.probeWaiting`). Blocking: a command's, never a loop's.
public enum HookProbe {
    /// Nil when there is no hook or it was reached; else what could not be reached and why.
    public static func run(_ configuration: GatewayConfiguration) -> String? {
        guard let hook = configuration.sessions?.lookup,
              let lookup = GatewayRuntime.sessionLookup(configuration, assertionKeys: nil) else { return nil }
        return lookup.probeWaiting(upstream: hook.upstream)
    }
}
