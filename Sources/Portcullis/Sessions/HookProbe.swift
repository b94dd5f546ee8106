import Dispatch
import PortcullisCore
import PortcullisSessions

/// `check-config --probe`: the session lookup hook tried once, as the exchange would reach it
/// (see `SessionLookup.probe`). Blocking: a command's, never a loop's.
public enum HookProbe {
    /// Nil when there is no hook or it was reached; else what could not be reached and why.
    public static func run(_ configuration: GatewayConfiguration) -> String? {
        guard let hook = configuration.sessions?.lookup,
              let lookup = GatewayRuntime.sessionLookup(configuration, assertionKeys: nil) else { return nil }
        let done = DispatchSemaphore(value: 0)
        let outcome = LockedValue<String?>(nil)
        lookup.probe { failure in
            outcome.withLock { $0 = failure }
            done.signal()
        }
        if done.wait(timeout: .now() + hook.timeout + 1) == .timedOut {
            return "sessions.user.lookup: upstreams.\(hook.upstream) did not answer \(hook.path) within \(Int(hook.timeout)) s"
        }
        return outcome.withLock { $0 }.map { "sessions.user.lookup: upstreams.\(hook.upstream) cannot be reached: \($0)" }
    }
}
