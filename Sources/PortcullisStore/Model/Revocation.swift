/// What to revoke. Every case carries `until` (epoch seconds): after it the entry is
/// useless (the credential has expired anyway) and is pruned everywhere.
public enum Revocation: Sendable, Equatable {
    /// One token by its `jti`, kept until `until` (the token's own exp, epoch seconds).
    case token(id: String, until: Int64)
    /// One session / device id, kept until `until`.
    case session(id: String, until: Int64)
    /// Every credential of `subject` issued (iat) before `before` ("sign out everywhere"); kept until `until` (nil → a configured maximum credential lifetime).
    case subject(String, before: Int64, until: Int64?)

    /// The epoch second after which this entry can be forgotten.
    public func expiry(maxCredentialLifetime: Int64) -> Int64 {
        switch self {
        case .token(_, let until), .session(_, let until): return until
        case .subject(_, let before, let until):
            // A credential issued before `before` lives at most `maxCredentialLifetime`.
            return until ?? before.addingReportingOverflow(maxCredentialLifetime).partialValue
        }
    }

    /// The same revocation with `until` made explicit.
    public func resolved(maxCredentialLifetime: Int64) -> Revocation {
        if case .subject(let s, let before, nil) = self {
            return .subject(s, before: before, until: expiry(maxCredentialLifetime: maxCredentialLifetime))
        }
        return self
    }
}

/// What an undo names: the entry of one `jti`, of one session, or a subject's
/// "sign out everywhere" cutoff (whatever its `before`).
public enum RevocationTarget: Sendable, Equatable {
    case token(String)
    case session(String)
    case subject(String)
}

extension Revocation {
    /// The entry this revocation writes (and an undo of it removes).
    public var target: RevocationTarget {
        switch self {
        case .token(let id, _): return .token(id)
        case .session(let id, _): return .session(id)
        case .subject(let s, _, _): return .subject(s)
        }
    }
}

/// The answer of a revocation check on the hot path.
public enum RevocationVerdict: Sendable, Equatable {
    case allowed
    case revoked
    /// The shared store has been unreachable for longer than `maxStaleness` and the
    /// policy is to deny (the gateway answers 503).
    case unavailable
}

/// How fresh the store's view is.
public enum StoreHealth: Sendable, Equatable {
    case ok
    /// The backend is unreachable; the last synchronized view is still used. `sinceSeconds`: how long.
    case degraded(sinceSeconds: Double)
    /// Past `maxStaleness` (or never synchronized): the policy applies.
    case unavailable
}

/// The degraded-mode policy, as users read it in the configuration
/// (`revocation: {max_staleness: 30s, on_unavailable: deny}`).
public struct RevocationPolicy: Sendable, Equatable {
    /// Seconds the last synchronized view is trusted after the backend became unreachable.
    public var maxStaleness: Double
    /// After `maxStaleness`: `.unavailable` (true, the default) or `.allowed` (false).
    /// Known revocations are enforced either way.
    public var denyWhenUnavailable: Bool
    /// Seconds; how long a "sign out everywhere" entry without `until` is kept.
    public var maxCredentialLifetime: Int64

    public init(maxStaleness: Double = 30, denyWhenUnavailable: Bool = true, maxCredentialLifetime: Int64 = 30 * 24 * 3600) {
        self.maxStaleness = maxStaleness
        self.denyWhenUnavailable = denyWhenUnavailable
        self.maxCredentialLifetime = maxCredentialLifetime
    }
}

/// Why a store operation failed.
public enum StoreError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The shared backend is unreachable. For `revoke`, the revocation is already
    /// enforced by this instance and is written to the backend when it returns.
    case unavailable(String)
    /// The revocation itself is unusable (an empty id, …).
    case invalid(String)

    public var description: String {
        switch self {
        case .unavailable(let why): return "revocation store unavailable: \(why)"
        case .invalid(let why): return "invalid revocation: \(why)"
        }
    }
}

/// A store's state changes, reported once each (for logs and metrics, never per request).
public enum StoreEvent: Sendable, Equatable {
    /// The view matches the backend (first load, or recovery after an outage).
    case synchronized(entries: Int)
    /// The backend became unreachable; the last view is used for `maxStaleness`.
    case degraded(reason: String)
    /// `maxStaleness` passed while degraded: the unavailable policy now applies.
    case stale
    /// The backend could not be reached before it was ever synchronized (start-up
    /// with Redis down, a refused TLS certificate); once until it synchronizes.
    case unreachable(reason: String)
    /// After a switch to another master, revocations the new master lacked were written to it
    /// again (a failover had lost them).
    case restoredAfterSwitch(count: Int)
    /// A stream of the revocation log trimmed entries this instance had not read (it was
    /// away longer than the log keeps): every key is read again.
    case logGap(group: Int)
}
