import PortcullisIO

/// The master that serves one hash slot of a Redis Cluster, asked on every connection attempt
/// (`CLUSTER SLOTS`, of the last owner found, then of each seed in turn): where a sharded
/// subscription (`SSUBSCRIBE`) of a channel in that slot must connect. A failover or a slot
/// migration closes the subscription (the server drops the node's connection or pushes a
/// `sunsubscribe`); the reconnection asks again and finds the new owner.
///
/// Threading: used on one loop queue.
final class ClusterSlotOwner: AddressResolver {
    let slot: Int
    private let seeds: [SocketAddress]
    private let handshake: [[String]]
    private let timeout: Double
    private let tls: RedisTLSClient?
    /// The owner found last: asked first next time (it knows a failover's outcome soonest).
    private var lastOwner: SocketAddress?

    init(slot: Int, seeds: [SocketAddress], handshake: [[String]], timeout: Double, tls: RedisTLSClient?) {
        precondition(!seeds.isEmpty, "a cluster needs at least one seed node")
        self.slot = slot
        self.seeds = seeds
        self.handshake = handshake
        self.timeout = timeout
        self.tls = tls
    }

    func resolve(on loop: EventLoop, completion: @escaping (Result<SocketAddress, RedisError>) -> Void) {
        var candidates = lastOwner.map { [$0] } ?? []
        for seed in seeds where !candidates.contains(seed) { candidates.append(seed) }
        ask(candidates, index: 0, on: loop, lastError: nil, completion: completion)
    }

    private func ask(_ candidates: [SocketAddress], index: Int, on loop: EventLoop, lastError: RedisError?,
                     completion: @escaping (Result<SocketAddress, RedisError>) -> Void) {
        guard index < candidates.count else {
            let why = lastError.map { ": last error \($0)" } ?? ""
            return completion(.failure(.disconnected(reason: "no cluster node named the master of slot \(slot)\(why)")))
        }
        let node = candidates[index]
        let conn = RedisConnection(address: node, loop: loop, reconnectOnTimeout: false, tls: tls)
        conn.onClose = { [self] error in ask(candidates, index: index + 1, on: loop, lastError: error, completion: completion) }
        conn.connect(timeout: timeout) { [self] in
            for command in handshake { conn.enqueue(.strings(command), timeout: timeout) { _ in } }
            conn.enqueue(.strings(["CLUSTER", "SLOTS"]), timeout: timeout) { [self] result in
                switch result {
                case .success(let reply):
                    guard let map = ClusterTopology(clusterSlots: reply) else {
                        return conn.close(.protocolViolation("CLUSTER SLOTS from \(node)"))
                    }
                    guard let owner = map.master(forSlot: slot)?.address(fallbackHost: node.host) else {
                        return conn.close(.server("CLUSTERDOWN \(node) names no reachable master for slot \(slot)"))
                    }
                    conn.onClose = nil
                    conn.close(.shutdown)
                    lastOwner = owner
                    completion(.success(owner))
                case .failure(let error):
                    conn.close(error)
                }
            }
            conn.flush()
        }
    }
}
