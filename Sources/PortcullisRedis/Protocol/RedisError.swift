/// Why a Redis command or connection failed.
public enum RedisError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The command got no reply within its timeout.
    case timeout
    /// The connection is down (or went down with the command in flight); `reason` says why.
    case disconnected(reason: String)
    /// The server sent bytes that are not RESP, or a reply of an unexpected shape.
    case protocolViolation(String)
    /// The server answered with an error reply (`-ERR …`, `-WRONGPASS …`, `-READONLY …`).
    case server(String)
    /// A Redis URL or configuration value that cannot be used.
    case invalidConfiguration(String)
    /// `shutdown()` was called.
    case shutdown

    public var description: String {
        switch self {
        case .timeout: return "redis: command timed out"
        case .disconnected(let reason): return "redis: disconnected (\(reason))"
        case .protocolViolation(let text): return "redis: protocol error: \(text)"
        case .server(let text): return "redis: server error: \(text)"
        case .invalidConfiguration(let text): return "redis: invalid configuration: \(text)"
        case .shutdown: return "redis: client shut down"
        }
    }

    /// True for `-READONLY`: we are talking to a replica (a failover happened).
    var isReadOnlyReplica: Bool {
        if case .server(let text) = self { return text.hasPrefix("READONLY") }
        return false
    }
}
