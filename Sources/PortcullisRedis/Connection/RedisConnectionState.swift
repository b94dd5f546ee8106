import PortcullisIO

/// A Redis client's or subscriber's connection state, reported through the
/// `onStateChange` callback only when it changes: a server that stays down while
/// the client retries produces one `.disconnected`, not one per attempt.
public enum RedisConnectionState: Sendable, Equatable, CustomStringConvertible {
    /// First connection attempt in progress.
    case connecting
    /// Connected and authenticated (and, with Sentinel, confirmed master) at this address.
    case connected(SocketAddress)
    /// Lost or never reached; the client keeps retrying with backoff.
    case disconnected(RedisError)
    case shutdown

    public var description: String {
        switch self {
        case .connecting: return "connecting"
        case .connected(let a): return "connected to \(a)"
        case .disconnected(let e): return "disconnected: \(e)"
        case .shutdown: return "shut down"
        }
    }

    func sameKind(as other: RedisConnectionState) -> Bool {
        switch (self, other) {
        case (.connecting, .connecting), (.disconnected, .disconnected), (.shutdown, .shutdown): return true
        case (.connected(let a), .connected(let b)): return a == b
        default: return false
        }
    }
}
