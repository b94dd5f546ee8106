import PortcullisIO

/// How to reach Redis and how patient to be. A `Sendable` value with defaults;
/// `init(url:)` reads the `redis://[user][:password]@host:port/db` form.
public struct RedisConfiguration: Sendable, Equatable {
    /// Where the server is: one address, or a master found through Sentinel.
    public enum Topology: Sendable, Equatable {
        case standalone(SocketAddress)
        /// A host name, resolved off the loops (HostResolver) on every connect: managed
        /// Redis services move their address on failover.
        case standaloneHost(String, port: UInt16)
        /// Ask each sentinel in turn for `masterName` (`SENTINEL get-master-addr-by-name`),
        /// and ask again after a disconnect, a `+switch-master` event or a `-READONLY` reply.
        case sentinel(masterName: String, sentinels: [SocketAddress])
        /// A Redis Cluster reached through any of these nodes: `RedisClient` routes each
        /// command by its key's slot (`RedisCommandKey`) over a `RedisClusterClient`; a
        /// subscriber takes the next seed on every connect (classic pub/sub reaches every node).
        case cluster(seeds: [SocketAddress])
    }

    /// With Sentinel or Cluster a failover can promote a replica that lacks a write the
    /// master acknowledged: stores that promise durability confirm with `WAIT 1` (and `ROLE`).
    public var canFailOver: Bool {
        switch topology {
        case .sentinel, .cluster: return true
        case .standalone, .standaloneHost: return false
        }
    }

    public var topology: Topology
    /// ACL user (Redis 6+); nil means `AUTH <password>` (the `default` user).
    public var username: String?
    public var password: String?
    /// `SELECT` after connecting when not 0.
    public var database: Int
    /// Password for the sentinels themselves (`requirepass` in sentinel.conf), if any.
    public var sentinelPassword: String?
    /// Seconds a command may wait for its reply.
    public var commandTimeout: Double
    /// Seconds for TCP connect plus the AUTH/SELECT handshake (and each sentinel query).
    public var connectTimeout: Double
    /// After a command times out, drop the connection and reconnect: a reply that
    /// never came means the server or the path is stuck, and everything pipelined
    /// behind it would wait too. Default true.
    public var reconnectOnTimeout: Bool
    public var backoff: ReconnectBackoff
    /// TLS (`rediss://`) to the server, and to the sentinels when they are used.
    public var tls: TLS?

    /// How a TLS connection to Redis is verified: against the system store or
    /// `caFile`, for `serverName` (default: the host of the URL or the address).
    public struct TLS: Sendable, Equatable {
        public var caFile: String?
        public var serverName: String?
        public init(caFile: String? = nil, serverName: String? = nil) {
            self.caFile = caFile
            self.serverName = serverName
        }
    }

    public init(topology: Topology, username: String? = nil, password: String? = nil, database: Int = 0,
                sentinelPassword: String? = nil, commandTimeout: Double = 2, connectTimeout: Double = 1,
                reconnectOnTimeout: Bool = true, backoff: ReconnectBackoff = ReconnectBackoff()) {
        self.topology = topology
        self.username = username
        self.password = password
        self.database = database
        self.sentinelPassword = sentinelPassword
        self.commandTimeout = commandTimeout
        self.connectTimeout = connectTimeout
        self.reconnectOnTimeout = reconnectOnTimeout
        self.backoff = backoff
    }

    /// The commands sent on every new data connection before it is used.
    var handshake: [[String]] {
        var commands: [[String]] = []
        if let password {
            if let username { commands.append(["AUTH", username, password]) } else { commands.append(["AUTH", password]) }
        }
        if database != 0 { commands.append(["SELECT", String(database)]) }
        return commands
    }
}

/// Capped exponential backoff with jitter between reconnect attempts:
/// attempt n waits `min(maximum, initial * multiplier^n)`, minus up to `jitter`
/// of that (a fraction in 0...1), so many gateways do not reconnect in lock-step.
public struct ReconnectBackoff: Sendable, Equatable {
    public var initial: Double
    public var maximum: Double
    public var multiplier: Double
    public var jitter: Double

    public init(initial: Double = 0.05, maximum: Double = 5, multiplier: Double = 2, jitter: Double = 0.3) {
        self.initial = initial
        self.maximum = maximum
        self.multiplier = multiplier
        self.jitter = jitter
    }

    /// Seconds to wait before attempt `attempt` (0-based); `random` is in 0..<1.
    public func delay(attempt: Int, random: Double = Double.random(in: 0..<1)) -> Double {
        var d = initial
        var i = 0
        while i < attempt && d < maximum { d *= multiplier; i += 1 }
        d = min(d, maximum)
        return d * (1 - jitter * random)
    }
}
