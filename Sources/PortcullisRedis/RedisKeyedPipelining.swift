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
}

extension RedisClient: RedisKeyedPipelining {
    public func pipeline(keyed commands: [(key: String, arguments: [String])], timeout: Double?,
                         completion: @escaping @Sendable ([Result<RedisReply, RedisError>]) -> Void) {
        if let cluster { return cluster.pipeline(commands, timeout: timeout, completion: completion) }
        pipeline(commands.map(\.arguments), timeout: timeout, completion: completion)
    }

    public var routesBySlot: Bool { cluster != nil }
}

extension RedisClusterClient: RedisKeyedPipelining {
    public func pipeline(keyed commands: [(key: String, arguments: [String])], timeout: Double?,
                         completion: @escaping @Sendable ([Result<RedisReply, RedisError>]) -> Void) {
        pipeline(commands, timeout: timeout, completion: completion)
    }

    public var routesBySlot: Bool { true }
}
