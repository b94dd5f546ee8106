/// Sends commands that each name their key: a standalone or Sentinel client sends them in
/// one write to its server; a cluster client routes each to its slot's master. What a store
/// whose every command touches one key (the rate limits) is written against, so it runs on
/// all three.
public protocol RedisKeyedPipelining: AnyObject, Sendable {
    /// One result per command, in order.
    func pipeline(keyed commands: [(key: String, arguments: [String])], timeout: Double?,
                  completion: @escaping @Sendable ([Result<RedisReply, RedisError>]) -> Void)
    /// True when commands go to their key's slot (a cluster): a command that names several
    /// keys must name keys of one slot (Redis answers CROSSSLOT otherwise). False: every
    /// command goes to the one server, which takes any keys together.
    var routesBySlot: Bool { get }
    /// On a cluster: which master serves `slot` in this client's slot map (an index into the
    /// map's masters), so that commands for one master can be sent as one; nil when the map is
    /// not known yet, when called off the client's loop (the map is confined to it), or when
    /// the client has no slots. The map may be stale: a command built on it can meet a key
    /// that moved (`MOVED` for its routing key, or an error for another key it names).
    func master(ofSlot slot: Int) -> Int?
}

extension RedisClient: RedisKeyedPipelining {
    public func pipeline(keyed commands: [(key: String, arguments: [String])], timeout: Double?,
                         completion: @escaping @Sendable ([Result<RedisReply, RedisError>]) -> Void) {
        if let cluster { return cluster.pipeline(commands, timeout: timeout, completion: completion) }
        pipeline(commands.map(\.arguments), timeout: timeout, completion: completion)
    }

    public var routesBySlot: Bool { cluster != nil }

    public func master(ofSlot slot: Int) -> Int? { cluster?.master(ofSlot: slot) }
}

extension RedisClusterClient: RedisKeyedPipelining {
    public func pipeline(keyed commands: [(key: String, arguments: [String])], timeout: Double?,
                         completion: @escaping @Sendable ([Result<RedisReply, RedisError>]) -> Void) {
        pipeline(commands, timeout: timeout, completion: completion)
    }

    public var routesBySlot: Bool { true }
}
