import PortcullisCore
import PortcullisHTTP
import PortcullisIO
import PortcullisTLS

/// Keep-alive connections to one upstream, for one loop. Each loop has its own
/// pool (as Envoy's per-worker pools), so taking and returning a connection never
/// crosses queues; the configured caps are split evenly across loops.
///
/// - Idle connections are reused last-in first-out (the warmest socket first).
/// - At the connection cap, requests wait in a bounded FIFO queue; past it: 503.
/// - A waiting request gives up after the connect timeout with 503.
///
/// Threading: confined to `loop.queue`.
final class UpstreamPool: @unchecked Sendable {
    // @unchecked Sendable: confined to the loop queue (see type comment).

    let configuration: UpstreamConfiguration
    /// Addresses, TLS context and reachability, shared with the other loops' pools.
    let target: UpstreamTarget
    /// The upstream's position in the configuration.
    let index: Int
    unowned let loop: EventLoop
    let limits: HTTPLimits
    /// Limits for responses: the head limits of requests, but no body cap (bodies stream).
    let responseLimits: HTTPLimits
    let maxConnections: Int
    let maxPending: Int
    let connectTimeoutNanoseconds: UInt64
    let responseTimeoutNanoseconds: UInt64
    let idleTimeoutNanoseconds: UInt64
    private var idle: [UpstreamConnection] = []
    private var waiters: [ClientConnection] = []
    /// Open connections, connecting ones included.
    private(set) var openCount = 0

    init(target: UpstreamTarget, index: Int, loop: EventLoop, loopCount: Int, limits: HTTPLimits) {
        self.target = target
        let configuration = target.configuration
        self.configuration = configuration
        self.index = index
        self.loop = loop
        self.limits = limits
        var responseLimits = limits
        responseLimits.maxBodyBytes = Int.max
        self.responseLimits = responseLimits
        maxConnections = max(1, (configuration.maxConnections + loopCount - 1) / loopCount)
        maxPending = max(0, (configuration.maxPending + loopCount - 1) / loopCount)
        connectTimeoutNanoseconds = UInt64(configuration.connectTimeout * 1e9)
        responseTimeoutNanoseconds = UInt64(configuration.responseTimeout * 1e9)
        idleTimeoutNanoseconds = UInt64(configuration.idleTimeout * 1e9)
    }

    /// Requests refused with 503 because no connection and no queue room was left (for metrics).
    var exhaustedCount = 0

    var idleCount: Int { idle.count }
    var waitingCount: Int { waiters.count }

    /// Hands `client` a connection now, queues it, or answers 503 through it.
    /// `fresh` skips idle connections (used for the retry after a stale one).
    func acquire(for client: ClientConnection, fresh: Bool = false) {
        if !fresh, let connection = idle.popLast() {
            connection.reuse()
            client.attach(connection)
            return
        }
        if fresh, openCount >= maxConnections, let stale = idle.first {
            stale.close()  // make room for the retry
        }
        if openCount < maxConnections {
            openConnection(for: client)
            return
        }
        if waiters.count < maxPending {
            waiters.append(client)
            client.markQueued()
            client.deadline = loop.lastNow &+ connectTimeoutNanoseconds
            return
        }
        client.poolExhausted()
    }

    private func openConnection(for client: ClientConnection) {
        let (addresses, resolutionError) = target.addressesForConnection()
        guard !addresses.isEmpty else {
            let reason = resolutionError?.description ?? "cannot resolve \(configuration.url.host)"
            target.reportFailure(reason)
            target.resolveSoon()
            client.upstreamFailed(.unresolved(reason))
            return
        }
        connect(client, addresses, attempt: 0)
    }

    /// Connects to `addresses[attempt]`; a failure moves on to the next address.
    private func connect(_ client: ClientConnection, _ addresses: [SocketAddress], attempt: Int) {
        switch Connector.start(to: addresses[attempt], on: loop) {
        case .failed(let error):
            connectAttemptFailed(client, addresses, attempt: attempt, error: error)
        case .connected(let socket):
            attach(client, socket, addresses, attempt: attempt, inProgress: false)
        case .inProgress(let socket):
            attach(client, socket, addresses, attempt: attempt, inProgress: true)
        }
    }

    private func attach(_ client: ClientConnection, _ socket: StreamSocket, _ addresses: [SocketAddress],
                        attempt: Int, inProgress: Bool) {
        if let tls = target.tls {
            do {
                try TLSSession.secureClient(socket, context: tls, serverName: configuration.url.host)
            } catch {
                socket.close()
                target.reportFailure(error.description)
                client.upstreamFailed(.tlsFailed(error.description))
                return
            }
        }
        openCount += 1
        let connection = UpstreamConnection(pool: self, socket: socket, addresses: addresses, attempt: attempt)
        client.attach(connection)
        connection.connect(inProgress: inProgress)
    }

    /// A connect to one address failed (refused, timed out): the next address, or
    /// the request fails and the addresses are looked up again.
    func connectAttemptFailed(_ client: ClientConnection?, _ addresses: [SocketAddress], attempt: Int, error: IOError) {
        if let client, !client.isClosed, attempt + 1 < addresses.count {
            connect(client, addresses, attempt: attempt + 1)
            return
        }
        target.reportFailure("\(addresses[attempt]): \(error)")
        target.resolveSoon()
        client?.upstreamFailed(error.errno == 110 ? .connectTimeout : .connectFailed(error))
    }

    /// An exchange ended; keep the connection if it can serve another request.
    func release(_ connection: UpstreamConnection, reusable: Bool) {
        guard reusable, connection.state == .active else {
            connection.close()
            return
        }
        if let waiter = nextWaiter() {
            connection.reuse()
            waiter.attach(connection)
            return
        }
        connection.becameIdle(idleDeadline: loop.lastNow &+ idleTimeoutNanoseconds)
        idle.append(connection)
    }

    func connectionClosed(_ connection: UpstreamConnection) {
        openCount -= 1
        if let i = idle.firstIndex(where: { $0 === connection }) { idle.remove(at: i) }
        if openCount < maxConnections, let waiter = nextWaiter() {
            acquire(for: waiter)
        }
    }

    func cancelWaiter(_ client: ClientConnection) {
        if let i = waiters.firstIndex(where: { $0 === client }) { waiters.remove(at: i) }
    }

    private func nextWaiter() -> ClientConnection? {
        while !waiters.isEmpty {
            let waiter = waiters.removeFirst()
            if !waiter.isClosed { return waiter }
        }
        return nil
    }

    /// Closes idle connections (shutdown).
    func closeIdle() {
        let connections = idle
        idle.removeAll()
        for connection in connections { connection.close() }
    }
}
