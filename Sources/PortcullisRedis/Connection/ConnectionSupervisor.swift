import Dispatch
import PortcullisIO
import PortcullisTLS

/// Keeps one `RedisConnection` alive: resolve the address (fixed or Sentinel),
/// connect, run the handshake (AUTH, SELECT, ROLE check), hand the ready connection
/// to its owner, and after a loss retry with capped exponential backoff and jitter.
/// State changes are reported once each.
///
/// Threading: confined to `loop.queue`, like everything it calls back.
final class ConnectionSupervisor: @unchecked Sendable {
    // @unchecked Sendable: confined to `loop.queue` (see type comment); the only
    // closures that leave it are hops back onto that queue.
    struct Options {
        var handshake: [[String]]
        /// Send `ROLE` and refuse a server that is not a master (Sentinel mode:
        /// a sentinel can briefly name a demoted master).
        var verifyMaster: Bool
        var connectTimeout: Double
        var reconnectOnTimeout: Bool
        var backoff: ReconnectBackoff
        var tls: RedisTLSClient? = nil
    }

    let loop: EventLoop
    let resolver: AddressResolver
    let options: Options

    /// The ready connection; nil while connecting or waiting to retry.
    private(set) var connection: RedisConnection?
    private(set) var reported: RedisConnectionState?

    var onReady: ((RedisConnection) -> Void)?
    var onStateChange: ((RedisConnectionState) -> Void)?
    /// Installed on each new connection before its handshake (pub/sub).
    var onPush: ((RedisReply) -> Void)?

    private var attemptConnection: RedisConnection?
    private var attempt = 0
    private var running = false
    /// Bumped whenever a pending resolve or retry becomes obsolete.
    private var generation = 0
    private var waitingToRetry = false
    private var plannedReconnect = false

    init(loop: EventLoop, resolver: AddressResolver, options: Options) {
        self.loop = loop
        self.resolver = resolver
        self.options = options
    }

    var isRunning: Bool { running }

    func start() {
        guard !running else { return }
        running = true
        report(.connecting)
        connectNow()
    }

    func shutdown() {
        guard running else { return }
        running = false
        generation &+= 1
        connection?.close(.shutdown)
        attemptConnection?.close(.shutdown)
        connection = nil
        attemptConnection = nil
        report(.shutdown)
    }

    /// Drops the current connection (if any) and connects again at once, without
    /// reporting `.disconnected`: used when the master moved (a `+switch-master`
    /// event, a `-READONLY` reply).
    func reconnectNow(reason: String) {
        guard running else { return }
        if let connection {
            plannedReconnect = true
            connection.close(.disconnected(reason: reason))
        } else if waitingToRetry {
            waitingToRetry = false
            attempt = 0
            connectNow()
        }
    }

    // MARK: Attempts

    private func connectNow() {
        generation &+= 1
        let current = generation
        resolver.resolve(on: loop) { [self] result in
            guard running, current == generation else { return }
            switch result {
            case .failure(let error): attemptFailed(error)
            case .success(let address): open(address)
            }
        }
    }

    private func open(_ address: SocketAddress) {
        let conn = RedisConnection(address: address, loop: loop, reconnectOnTimeout: options.reconnectOnTimeout, tls: options.tls)
        attemptConnection = conn
        conn.onPush = onPush
        conn.onClose = { [weak self, weak conn] error in
            guard let self, let conn else { return }
            self.closed(conn, error)
        }
        conn.connect(timeout: options.connectTimeout) { [self] in handshake(conn) }
    }

    private func handshake(_ conn: RedisConnection) {
        var commands = options.handshake
        if options.verifyMaster { commands.append(["ROLE"]) }
        if commands.isEmpty { return ready(conn) }
        var remaining = commands.count
        var failed = false
        for command in commands {
            let isRole = command == ["ROLE"]
            conn.enqueue(.strings(command), timeout: options.connectTimeout) { [self] result in
                guard !failed else { return }
                switch result {
                case .failure(let error):
                    failed = true
                    conn.close(error)
                case .success(let reply):
                    if isRole, reply.array?.first?.string != "master" {
                        failed = true
                        conn.close(.server("ROLE: \(conn.address) is not a master"))
                        return
                    }
                    remaining -= 1
                    if remaining == 0 { ready(conn) }
                }
            }
        }
        conn.flush()
    }

    private func ready(_ conn: RedisConnection) {
        attemptConnection = nil
        connection = conn
        attempt = 0
        report(.connected(conn.address))
        onReady?(conn)
    }

    private func closed(_ conn: RedisConnection, _ error: RedisError) {
        if conn === connection {
            connection = nil
            guard running else { return }
            if plannedReconnect {
                plannedReconnect = false
                attempt = 0
                connectNow()
            } else {
                report(.disconnected(error))
                scheduleRetry()
            }
        } else if conn === attemptConnection {
            attemptConnection = nil
            attemptFailed(error)
        }
    }

    private func attemptFailed(_ error: RedisError) {
        guard running else { return }
        plannedReconnect = false
        report(.disconnected(error))
        scheduleRetry()
    }

    private func scheduleRetry() {
        let delay = options.backoff.delay(attempt: attempt)
        attempt += 1
        generation &+= 1
        let current = generation
        waitingToRetry = true
        loop.queue.asyncAfter(deadline: .now() + .nanoseconds(Int(delay * 1e9))) { [self] in
            guard running, current == generation else { return }
            waitingToRetry = false
            connectNow()
        }
    }

    private func report(_ state: RedisConnectionState) {
        if let reported, reported.sameKind(as: state) { return }
        reported = state
        onStateChange?(state)
    }
}

extension RedisConfiguration {
    /// How the master is found (a fixed address, or through Sentinel, whose
    /// answer is then checked with ROLE) and the supervisor options that go
    /// with it; shared by the client and the subscriber.
    /// A TLS context that cannot be made (an unreadable CA file; the loader checks it
    /// first) turns into a resolver that fails every attempt with the reason.
    func supervisorSetup() -> (resolver: AddressResolver, options: ConnectionSupervisor.Options) {
        var client: RedisTLSClient?
        var tlsError: String?
        if let tls {
            do {
                let context = try TLSClientContext(caFile: tls.caFile)
                var name = tls.serverName
                if name == nil, case .standaloneHost(let host, _) = topology { name = host }
                client = RedisTLSClient(context: context, serverName: name)
            } catch {
                tlsError = "TLS: \(error)"
            }
        }
        var resolver: AddressResolver
        var verifyMaster = false
        switch topology {
        case .standalone(let address):
            resolver = FixedAddress(address)
        case .standaloneHost(let host, let port):
            resolver = ResolvedHost(host: host, port: port)
        case .sentinel(let name, let sentinels):
            resolver = SentinelDiscovery(masterName: name, sentinels: sentinels,
                                         password: sentinelPassword, timeout: connectTimeout, tls: client)
            verifyMaster = true
        case .cluster(let seeds):
            resolver = RotatingAddresses(seeds)
        }
        if let tlsError { resolver = FailingResolver(reason: tlsError) }
        return (resolver, .init(handshake: handshake, verifyMaster: verifyMaster, connectTimeout: connectTimeout,
                                reconnectOnTimeout: reconnectOnTimeout, backoff: backoff, tls: client))
    }
}
