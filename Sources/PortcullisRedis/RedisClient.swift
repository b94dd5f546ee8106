import Dispatch
import PortcullisIO

/// A non-blocking Redis client on one event loop: pipelining (any number of
/// commands in flight, replies matched in order), per-command timeouts, reconnect
/// with capped backoff and jitter, AUTH (password or ACL user), SELECT, and with a
/// Sentinel topology: master discovery and re-discovery after a disconnect, a
/// `+switch-master` event, or a `-READONLY` reply.
///
/// Threading: the public methods may be called from any thread. All state lives
/// on `loop.queue`, where every completion and `onStateChange` runs. `send` and
/// `pipeline` called on `loop.queue` itself with the connection up write into it
/// at once (no hop; the write goes out at the end of the loop's pass, see
/// `RedisConnection.send`); from any other thread, or while connecting or
/// disconnected, they hop onto the queue first. Either way a completion never
/// runs inside the call. No call ever blocks the loop.
///
/// While the first connection is being made, commands wait (up to their timeout);
/// while the client is `.disconnected` they fail at once with `.disconnected`, so
/// callers never pile up behind a dead server.
public final class RedisClient: @unchecked Sendable {
    // @unchecked Sendable: mutable state is confined to `loop.queue` (see type comment).
    public typealias Completion = @Sendable (Result<RedisReply, RedisError>) -> Void

    public let loop: EventLoop
    public let configuration: RedisConfiguration
    private let supervisor: ConnectionSupervisor
    /// With a `.cluster` topology, every command goes through this (routed by
    /// `RedisCommandKey`); the supervisor above is then never started.
    let cluster: RedisClusterClient?
    private var switchWatcher: RedisSubscriber?
    private var onStateChange: (@Sendable (RedisConnectionState) -> Void)?

    /// Commands waiting for the first connection, by id (their timeout removes them).
    private var waiting: [(id: Int, run: (Result<RedisConnection, RedisError>) -> Void)] = []
    private var nextWaitingID = 0
    private var isShutdown = false

    /// - Parameter onStateChange: called on `loop.queue` once per state change.
    public init(configuration: RedisConfiguration, loop: EventLoop,
                onStateChange: (@Sendable (RedisConnectionState) -> Void)? = nil) {
        self.loop = loop
        self.configuration = configuration
        self.onStateChange = onStateChange
        LoopMark.mark(loop)
        if case .cluster(let seeds) = configuration.topology {
            cluster = RedisClusterClient(seeds: seeds, base: configuration, loop: loop)
        } else {
            cluster = nil
        }
        let (resolver, options) = configuration.supervisorSetup()
        supervisor = ConnectionSupervisor(
            loop: loop, resolver: resolver, options: options)
        supervisor.onStateChange = { [weak self] state in self?.stateChanged(state) }
        supervisor.onReady = { [weak self] conn in self?.connectionReady(conn) }
        if case .sentinel(let name, let sentinels) = configuration.topology {
            switchWatcher = RedisSubscriber.sentinelWatcher(
                sentinels: sentinels, password: configuration.sentinelPassword,
                configuration: configuration, loop: loop
            ) { [weak self] event in
                guard let self, event.masterName == name else { return }
                if self.supervisor.connection?.address != event.newAddress {
                    self.supervisor.reconnectNow(reason: "sentinel: +switch-master to \(event.newAddress)")
                }
            }
        }
    }

    /// Connects (asynchronously). Commands sent before the connection is ready wait for it.
    public func start() {
        if let cluster { return cluster.start() }
        loop.execute { [self] in
            guard !isShutdown else { return }
            supervisor.start()
            switchWatcher?.startOnLoop()
        }
    }

    /// `start()` for an owner on `loop.queue` (the cluster client): connecting begins now,
    /// so a command sent right after waits for the connection instead of failing.
    func startOnLoop() {
        loop.assertInLoop()
        guard !isShutdown else { return }
        supervisor.start()
        switchWatcher?.startOnLoop()
    }

    /// Closes the connection; commands in flight fail with `.shutdown`.
    public func shutdown() {
        if let cluster { return cluster.shutdown() }
        loop.execute { [self] in
            guard !isShutdown else { return }
            isShutdown = true
            switchWatcher?.shutdownOnLoop()
            supervisor.shutdown()
            failWaiting(.shutdown)
            onStateChange = nil
        }
    }

    /// The address of the server in use, if connected. Only meaningful on `loop.queue`.
    public var connectedAddress: SocketAddress? { supervisor.connection?.address }

    // MARK: Commands

    /// Sends one command, e.g. `["SET", "k", "v", "EX", "60"]`.
    /// - Parameter timeout: seconds; nil → `configuration.commandTimeout`.
    public func send(_ arguments: [String], timeout: Double? = nil, completion: @escaping Completion) {
        send(.strings(arguments), timeout: timeout, completion: completion)
    }

    /// Sends one command whose arguments are raw bytes (binary-safe values).
    public func send(bytes arguments: [[UInt8]], timeout: Double? = nil, completion: @escaping Completion) {
        send(.bytes(arguments), timeout: timeout, completion: completion)
    }

    /// Directly when called on the loop with a connection, else through the loop's queue.
    private func send(_ arguments: CommandArguments, timeout: Double?, completion: @escaping Completion) {
        if let cluster {
            return cluster.send(arguments, key: RedisCommandKey.key(of: arguments) ?? "", timeout: timeout, completion: completion)
        }
        if let conn = connectionIfOnLoop {
            return conn.send(arguments, timeout: timeout ?? configuration.commandTimeout, handler: replyHandler(completion))
        }
        loop.execute { [self] in sendOnLoop(arguments, timeout: timeout, completion: completion) }
    }

    /// Sends several commands in one write; `completion` gets one result per command, in order.
    public func pipeline(_ commands: [[String]], timeout: Double? = nil,
                         completion: @escaping @Sendable ([Result<RedisReply, RedisError>]) -> Void) {
        if let cluster { return cluster.pipeline(RedisCommandKey.routed(commands), timeout: timeout, completion: completion) }
        if !commands.isEmpty, let conn = connectionIfOnLoop {
            return enqueuePipeline(commands, on: conn, timeout: timeout, completion: completion)
        }
        loop.execute { [self] in
            guard !commands.isEmpty else { return completion([]) }
            withConnection(timeout: timeout) { [self] result in
                switch result {
                case .failure(let error):
                    completion(Array(repeating: .failure(error), count: commands.count))
                case .success(let conn):
                    enqueuePipeline(commands, on: conn, timeout: timeout, completion: completion)
                }
            }
        }
    }

    private func enqueuePipeline(_ commands: [[String]], on conn: RedisConnection, timeout: Double?,
                                 completion: @escaping @Sendable ([Result<RedisReply, RedisError>]) -> Void) {
        let collector = PipelineResults(count: commands.count, completion: completion)
        let seconds = timeout ?? configuration.commandTimeout
        for (i, command) in commands.enumerated() {
            conn.enqueue(.strings(command), timeout: seconds) { [self] r in
                noteReadOnly(r)
                collector.set(i, r)
            }
        }
        conn.scheduleFlush()
    }

    /// The ready connection when called on `loop.queue` (so a command can be
    /// written without a hop), else nil. Only the current queue is read off the loop.
    private var connectionIfOnLoop: RedisConnection? {
        guard loop.isCurrent, !isShutdown else { return nil }
        return supervisor.connection
    }

    /// The completion as the connection's handler; wrapped only when a `-READONLY`
    /// reply must be noticed (Sentinel), so a standalone command allocates no wrapper.
    private func replyHandler(_ completion: @escaping Completion) -> ReplyHandler {
        guard case .sentinel = configuration.topology else { return completion }
        return { [self] r in noteReadOnly(r); completion(r) }
    }

    /// `send` for callers already on `loop.queue` (no hop).
    public func sendOnLoop(_ arguments: [String], timeout: Double? = nil, completion: @escaping Completion) {
        sendOnLoop(.strings(arguments), timeout: timeout, completion: completion)
    }

    func sendOnLoop(_ arguments: CommandArguments, timeout: Double?, completion: @escaping Completion) {
        if let cluster { return send(arguments, timeout: timeout, completion: completion) }
        let seconds = timeout ?? configuration.commandTimeout
        if let conn = supervisor.connection {
            conn.send(arguments, timeout: seconds, handler: replyHandler(completion))
            return
        }
        withConnection(timeout: timeout) { [self] result in
            switch result {
            case .failure(let error): completion(.failure(error))
            case .success(let conn): conn.send(arguments, timeout: seconds, handler: replyHandler(completion))
            }
        }
    }

    /// One step of a scan of every key matching `pattern`: on a cluster, of every master in
    /// turn. Start from `.start`; `next` is nil once every key was offered (a key may come
    /// twice, as with `SCAN`).
    public func scan(from cursor: RedisScanCursor, match pattern: String, count: Int,
                     completion: @escaping @Sendable (Result<(next: RedisScanCursor?, keys: [String]), RedisError>) -> Void) {
        if let cluster { return cluster.scan(from: cursor, match: pattern, count: count, completion: completion) }
        send(["SCAN", cursor.cursor, "MATCH", pattern, "COUNT", "\(count)"]) { result in
            completion(result.flatMap { reply in
                guard let (next, keys) = RedisScanCursor.parse(reply) else { return .failure(.protocolViolation("SCAN")) }
                return .success((next == "0" ? nil : RedisScanCursor(nodes: nil, index: 0, cursor: next), keys))
            })
        }
    }

    // MARK: Connection

    /// Whether the connection is down now (its last reported state): a command sent now
    /// fails at once, unsent. On `loop.queue`.
    var isDown: Bool {
        if case .disconnected = supervisor.reported { return true }
        return false
    }

    private func withConnection(timeout: Double?, _ run: @escaping (Result<RedisConnection, RedisError>) -> Void) {
        if isShutdown { return run(.failure(.shutdown)) }
        if let conn = supervisor.connection { return run(.success(conn)) }
        if case .disconnected(let error) = supervisor.reported { return run(.failure(Self.asDisconnected(error))) }
        if !supervisor.isRunning { return run(.failure(.disconnected(reason: "client not started"))) }
        let id = nextWaitingID
        nextWaitingID += 1
        waiting.append((id, run))
        let seconds = timeout ?? configuration.commandTimeout
        loop.queue.asyncAfter(deadline: .now() + .nanoseconds(Int(seconds * 1e9))) { [weak self] in
            guard let self, let i = self.waiting.firstIndex(where: { $0.id == id }) else { return }
            let entry = self.waiting.remove(at: i)
            entry.run(.failure(.timeout))
        }
    }

    /// Replaces the state handler (for owners that can only set it once they exist).
    /// Runs on `loop.queue`, like the handler itself.
    public func observeState(_ handler: @escaping @Sendable (RedisConnectionState) -> Void) {
        if let cluster { return cluster.observeState(handler) }
        loop.execute { [self] in onStateChange = handler }
    }

    private func connectionReady(_ conn: RedisConnection) {
        let ready = waiting
        waiting = []
        for entry in ready { entry.run(.success(conn)) }
    }

    private func stateChanged(_ state: RedisConnectionState) {
        if case .disconnected(let error) = state { failWaiting(Self.asDisconnected(error)) }
        onStateChange?(state)
    }

    private func failWaiting(_ error: RedisError) {
        let failed = waiting
        waiting = []
        for entry in failed { entry.run(.failure(error)) }
    }

    /// Commands that never reached a server fail as `.disconnected`, whatever the
    /// connection error was (a refused AUTH is the connection's problem, not theirs).
    private static func asDisconnected(_ error: RedisError) -> RedisError {
        if case .disconnected = error { return error }
        return .disconnected(reason: error.description)
    }

    /// A replica answered a write: the master moved. Ask the sentinels again.
    private func noteReadOnly(_ result: Result<RedisReply, RedisError>) {
        if case .failure(let error) = result, error.isReadOnlyReplica, case .sentinel = configuration.topology {
            supervisor.reconnectNow(reason: "-READONLY from \(supervisor.connection?.address.description ?? "server")")
        }
    }
}

/// Collects a pipeline's replies by index and completes once with all of them:
/// one allocation per pipeline instead of two captured boxes and a final `map`.
/// Confined to the client's loop queue, like the handlers that fill it.
final class PipelineResults: @unchecked Sendable {
    // @unchecked Sendable: created and filled on one loop's queue (every reply handler runs there).
    private var results: [Result<RedisReply, RedisError>]
    private var remaining: Int
    private let completion: @Sendable ([Result<RedisReply, RedisError>]) -> Void

    init(count: Int, completion: @escaping @Sendable ([Result<RedisReply, RedisError>]) -> Void) {
        results = Array(repeating: .failure(.timeout), count: count)
        remaining = count
        self.completion = completion
    }

    func set(_ index: Int, _ result: Result<RedisReply, RedisError>) {
        results[index] = result
        remaining -= 1
        if remaining == 0 { completion(results) }
    }
}

/// Where a scan stands (`RedisClient.scan`): on a cluster, the masters it reads in turn, the
/// one being read and its `SCAN` cursor.
public struct RedisScanCursor: Sendable {
    var nodes: [SocketAddress]?
    var index = 0
    var cursor = "0"
    public static let start = RedisScanCursor()

    /// `SCAN`'s reply: the next cursor and the keys.
    static func parse(_ reply: RedisReply) -> (String, [String])? {
        guard let parts = reply.array, parts.count == 2, let next = parts[0].string,
              let keys = parts[1].array?.compactMap(\.string) else { return nil }
        return (next, keys)
    }
}
