import Dispatch
import PortcullisIO

/// A Redis Cluster client on one event loop, routing each command by its key's slot to the
/// master that serves it, over one `RedisClient` per master (pipelined, reconnecting, AUTH
/// and TLS as configured in `base`).
///
/// - The slot map comes from `CLUSTER SLOTS`, asked of a known node or a seed at start,
///   after a `MOVED`, and after a node's connection fails (a failover promotes a replica);
///   a map any client of the process read for the same seeds is taken before the next
///   command (`ClusterMapBoard`), so one `MOVED` updates every loop.
/// - `MOVED`: the command goes to the named node at once and the map is refreshed;
///   `ASK` (a slot being migrated): `ASKING` then the command, on the named node, once;
///   `TRYAGAIN` and `CLUSTERDOWN` (a migration's multi-key moment, a failover in progress):
///   retried after a short pause. At most `maxRedirects` hops, then the error.
/// - A command that timed out or whose connection dropped is not retried (it may have run);
///   the caller decides.
///
/// Every command names its key; commands of several keys must share a slot (hash tags).
/// Threading: as `RedisClient`: public methods from any thread; state and completions on
/// `loop.queue`.
public final class RedisClusterClient: @unchecked Sendable {
    // @unchecked Sendable: mutable state is confined to `loop.queue`.
    public typealias Completion = RedisClient.Completion

    public let loop: EventLoop
    /// Password, user, TLS and timeouts for every node (`topology` is ignored).
    public let base: RedisConfiguration
    let seeds: [SocketAddress]
    public static let maxRedirects = 5

    private var topology: ClusterTopology?
    /// The map this process's clients of the same cluster share, and the generation of it
    /// this client last took or posted.
    private let board: ClusterMapBoard
    private var boardGeneration = 0
    /// For each master of `topology` (same index): its address, parsed once per map, and its
    /// client once a command went there; a command finds its connection by its slot's index,
    /// without formatting or parsing an address (measured: the per-command string work was
    /// about 2 % of a rate-limited gateway's CPU on a cluster).
    private var masterAddresses: [SocketAddress?] = []
    private var masterClients: [RedisClient?] = []
    /// By address (`SocketAddress.description`).
    private var clients: [String: RedisClient] = [:]
    private var refreshing = false
    private var waitingForMap: [(Result<Void, RedisError>) -> Void] = []
    private var isShutdown = false
    /// Every node connection's state changes (a reconnection may reach a promoted replica).
    private var onNodeState: (@Sendable (RedisConnectionState) -> Void)?

    public init(seeds: [SocketAddress], base: RedisConfiguration, loop: EventLoop) {
        precondition(!seeds.isEmpty)
        self.seeds = seeds
        self.base = base
        self.loop = loop
        board = ClusterMapBoard.shared(seeds: seeds)
        LoopMark.mark(loop)
    }

    /// Reads the slot map (asynchronously); commands sent before it is known wait for it.
    public func start() {
        loop.execute { [self] in refreshTopology() }
    }

    public func shutdown() {
        loop.execute { [self] in
            isShutdown = true
            for client in clients.values { client.shutdown() }
            clients = [:]
            let waiting = waitingForMap
            waitingForMap = []
            for run in waiting { run(.failure(.shutdown)) }
        }
    }

    /// Sets the handler for every node connection's state changes (on `loop.queue`): a
    /// `.connected` after the first may be a promoted replica or a restarted node, which may
    /// lack acknowledged writes (what `RedisRevocationStore` re-writes after a switch).
    public func observeState(_ handler: @escaping @Sendable (RedisConnectionState) -> Void) {
        loop.execute { [self] in onNodeState = handler }
    }

    /// The index of the master serving `slot` in the slot map in use; nil off `loop.queue`
    /// (the map is confined to it) or before the map is known.
    public func master(ofSlot slot: Int) -> Int? {
        guard loop.isCurrent else { return nil }
        takePostedMap()
        guard let topology else { return nil }
        return topology.masterIndex(forSlot: slot)
    }

    /// The slot map in use (tests, diagnostics). On `loop.queue` only.
    public var currentTopology: ClusterTopology? { topology }

    // MARK: Commands

    /// Sends `arguments` to the master serving `key`'s slot.
    public func send(_ arguments: [String], key: String, timeout: Double? = nil, completion: @escaping Completion) {
        send(.strings(arguments), key: key, timeout: timeout, completion: completion)
    }

    func send(_ arguments: CommandArguments, key: String, timeout: Double?, completion: @escaping Completion) {
        let slot = HashSlot.of(key)
        if loop.isCurrent { return route(arguments, slot: slot, timeout: timeout, hops: 0, asking: nil, completion: completion) }
        loop.execute { [self] in route(arguments, slot: slot, timeout: timeout, hops: 0, asking: nil, completion: completion) }
    }

    /// Sends each command to its key's master (commands for one master go out in one write,
    /// at the end of the loop's pass); `completion` gets one result per command, in order.
    public func pipeline(_ commands: [(key: String, arguments: [String])], timeout: Double? = nil,
                         completion: @escaping @Sendable ([Result<RedisReply, RedisError>]) -> Void) {
        guard !commands.isEmpty else { return completion([]) }
        let run: @Sendable () -> Void = { [self] in
            let collector = PipelineResults(count: commands.count, completion: completion)
            for (index, command) in commands.enumerated() {
                route(.strings(command.arguments), slot: HashSlot.of(command.key), timeout: timeout, hops: 0, asking: nil) { result in
                    collector.set(index, result)
                }
            }
        }
        if loop.isCurrent { run() } else { loop.execute(run) }
    }

    /// On `loop.queue`: sends to the slot's master (or, for an `ASK`, to `asking`).
    private func route(_ arguments: CommandArguments, slot: Int, timeout: Double?, hops: Int, asking: SocketAddress?,
                       completion: @escaping Completion) {
        if isShutdown { return completion(.failure(.shutdown)) }
        takePostedMap()
        let target: SocketAddress
        let client: RedisClient
        if let asking {
            target = asking
            client = self.client(for: asking)
        } else if let topology {
            guard let index = topology.masterIndex(forSlot: slot), let address = masterAddresses[index] else {
                return completion(.failure(.server("CLUSTERDOWN Hash slot not served")))
            }
            target = address
            if let known = masterClients[index] {
                client = known
            } else {
                client = self.client(for: address)
                masterClients[index] = client
            }
            if client.isDown, hops == 0 {
                // The master's connection is down (its node may have failed over since the map
                // was read): read the map again and send where it says then, once. Nothing was
                // sent, so nothing can run twice; a map that still names this node sends it there
                // and fails as before.
                return routeOnNewMap(arguments, slot: slot, timeout: timeout, hops: 1, completion: completion)
            }
        } else {
            return routeOnNewMap(arguments, slot: slot, timeout: timeout, hops: hops, completion: completion)
        }
        let handle: Completion = { [self] result in
            guard case .failure(let error) = result else { return completion(result) }
            switch error {
            case .server(let text):
                if let redirect = ClusterRedirect(error: text), hops < Self.maxRedirects,
                   let address = address(redirect, answeredBy: target) {
                    if redirect.kind == .moved {
                        refreshTopology()
                        return route(arguments, slot: slot, timeout: timeout, hops: hops + 1, asking: address, completion: completion)
                    }
                    return askThenSend(arguments, slot: slot, to: address, timeout: timeout, hops: hops + 1, completion: completion)
                }
                if (text.hasPrefix("TRYAGAIN") || text.hasPrefix("CLUSTERDOWN")), hops < Self.maxRedirects {
                    if text.hasPrefix("CLUSTERDOWN") { refreshTopology() }
                    loop.queue.asyncAfter(deadline: .now() + .milliseconds(25 << hops)) { [self] in
                        route(arguments, slot: slot, timeout: timeout, hops: hops + 1, asking: nil, completion: completion)
                    }
                    return
                }
                completion(result)
            case .disconnected, .timeout:
                // The node may have failed over: read the map again for the next command.
                refreshTopology()
                completion(result)
            default:
                completion(result)
            }
        }
        client.sendOnLoop(arguments, timeout: timeout, completion: handle)
    }

    /// Routes the command once the slot map has been read (again).
    private func routeOnNewMap(_ arguments: CommandArguments, slot: Int, timeout: Double?, hops: Int,
                               completion: @escaping Completion) {
        whenMapRead { [self] result in
            switch result {
            case .failure(let error): completion(.failure(error))
            case .success: route(arguments, slot: slot, timeout: timeout, hops: hops, asking: nil, completion: completion)
            }
        }
    }

    /// Reads the slot map (again, unless a read is under way) and runs `then` once it is read
    /// or could not be. On `loop.queue`.
    private func whenMapRead(_ then: @escaping (Result<Void, RedisError>) -> Void) {
        waitingForMap.append(then)
        if !refreshing { refreshTopology() }
    }

    /// `ASKING` then the command on `address`, one after the other on its connection (the
    /// flag lasts one command).
    private func askThenSend(_ arguments: CommandArguments, slot: Int, to address: SocketAddress, timeout: Double?, hops: Int,
                             completion: @escaping Completion) {
        let node = client(for: address)
        node.sendOnLoop(.strings(["ASKING"]), timeout: timeout) { _ in }
        node.sendOnLoop(arguments, timeout: timeout) { [self] result in
            if case .failure(.server(let text)) = result, ClusterRedirect(error: text) != nil, hops < Self.maxRedirects {
                return route(arguments, slot: slot, timeout: timeout, hops: hops + 1, asking: nil, completion: completion)
            }
            completion(result)
        }
    }

    // MARK: Scanning

    /// One `SCAN` step over every master in turn (the masters of the map when the scan
    /// began). A node that fails fails the step: the caller starts again rather than
    /// trust a partial read.
    func scan(from cursor: RedisScanCursor, match pattern: String, count: Int,
              completion: @escaping @Sendable (Result<(next: RedisScanCursor?, keys: [String]), RedisError>) -> Void) {
        loop.execute { [self] in
            guard !isShutdown else { return completion(.failure(.shutdown)) }
            guard let nodes = cursor.nodes ?? topology.map({ $0.masters.compactMap(address) }) else {
                return whenMapRead { [self] result in
                    switch result {
                    case .failure(let error): completion(.failure(error))
                    case .success: scan(from: cursor, match: pattern, count: count, completion: completion)
                    }
                }
            }
            guard cursor.index < nodes.count else { return completion(.success((nil, []))) }
            client(for: nodes[cursor.index]).sendOnLoop(.strings(["SCAN", cursor.cursor, "MATCH", pattern, "COUNT", "\(count)"]),
                                                        timeout: nil) { result in
                completion(result.flatMap { reply in
                    guard let (next, keys) = RedisScanCursor.parse(reply) else { return .failure(.protocolViolation("SCAN")) }
                    var following = RedisScanCursor(nodes: nodes, index: cursor.index, cursor: next)
                    if next == "0" { following.index += 1; following.cursor = "0" }
                    return .success((following.index < nodes.count ? following : nil, keys))
                })
            }
        }
    }

    // MARK: Topology

    /// Asks known masters, then the seeds, for `CLUSTER SLOTS`; coalesced.
    private func refreshTopology() {
        guard !refreshing, !isShutdown else { return }
        refreshing = true
        var candidates = (topology?.masters ?? []).compactMap(address)
        for seed in seeds where !candidates.contains(seed) { candidates.append(seed) }
        ask(candidates, index: 0, lastError: nil)
    }

    private func ask(_ candidates: [SocketAddress], index: Int, lastError: RedisError?) {
        guard index < candidates.count, !isShutdown else {
            refreshing = false
            let waiting = waitingForMap
            waitingForMap = []
            for run in waiting { run(.failure(isShutdown ? .shutdown : (lastError ?? .disconnected(reason: "no cluster node answered")))) }
            return
        }
        client(for: candidates[index]).sendOnLoop(["CLUSTER", "SLOTS"]) { [self] result in
            switch result {
            case .success(let reply):
                guard let map = ClusterTopology(clusterSlots: reply), !map.masters.isEmpty else {
                    return ask(candidates, index: index + 1, lastError: .protocolViolation("CLUSTER SLOTS"))
                }
                install(map)
                boardGeneration = board.post(map)
                refreshing = false
                let waiting = waitingForMap
                waitingForMap = []
                for run in waiting { run(.success(())) }
            case .failure(let error):
                ask(candidates, index: index + 1, lastError: error)
            }
        }
    }

    /// Uses `map` from now on (on `loop.queue`).
    private func install(_ map: ClusterTopology) {
        topology = map
        masterAddresses = map.masters.map(address)
        masterClients = Array(repeating: nil, count: map.masters.count)
        let live = Set(masterAddresses.compactMap { $0?.description })
        let seedNames = Set(seeds.map(\.description))
        // Connections to nodes that serve nothing now (a demoted master) are closed.
        for (name, client) in clients where !live.contains(name) && !seedNames.contains(name) {
            client.shutdown()
            clients[name] = nil
        }
    }

    /// Takes the map another client of the process posted since this one last looked (one
    /// atomic load when nothing changed). On `loop.queue`.
    @inline(__always)
    private func takePostedMap() {
        guard board.generation != boardGeneration else { return }
        let (generation, map) = board.current()
        boardGeneration = generation
        if let map, map != topology { install(map) }  // the same map read by another loop changes nothing
    }

    private func client(for address: SocketAddress) -> RedisClient {
        if let client = clients[address.description] { return client }
        var configuration = base
        configuration.topology = .standalone(address)
        let client = RedisClient(configuration: configuration, loop: loop) { [weak self] state in
            self?.onNodeState?(state)
        }
        client.startOnLoop()
        clients[address.description] = client
        return client
    }

    /// A node's address (its announced host, which must be an IP address; nil otherwise).
    private func address(_ node: ClusterTopology.Node) -> SocketAddress? { node.address() }

    /// A redirect's address; without an announced host, the host of the node that answered.
    private func address(_ redirect: ClusterRedirect, answeredBy: SocketAddress) -> SocketAddress? {
        ClusterTopology.Node(host: redirect.host, port: redirect.port, id: nil).address(fallbackHost: answeredBy.host)
    }
}
