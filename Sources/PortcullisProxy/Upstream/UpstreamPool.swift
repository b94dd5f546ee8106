import CoreMetrics
import PortcullisCore
import PortcullisHTTP
import PortcullisIO
import PortcullisTLS

/// Keep-alive connections to one upstream, for one loop. Each loop has its own
/// pool (as Envoy's per-worker pools), so taking and returning an idle connection
/// never crosses queues; the limits a user writes are totals for the upstream:
///
/// - `max_connections` is a budget of slots in the shared `UpstreamTarget`, claimed
///   when a loop opens a connection (never when it reuses an idle one) and returned
///   when the connection closes.
/// - At the budget, requests wait in a FIFO of `max_pending` places, also shared; a
///   freed slot goes to the loop of the oldest waiter, and a loop with an idle
///   connection closes it when another loop has requests waiting, so which requests
///   get a 503 never depends on the loop a client landed on.
/// - Idle connections are reused last-in first-out (the warmest socket first).
/// - A waiting request gives up after the connect timeout with 503.
///
/// Threading: confined to `loop.queue` (the budget is the target's, under its lock).
final class UpstreamPool: @unchecked Sendable {
    // @unchecked Sendable: confined to the loop queue (see type comment).

    let configuration: UpstreamConfiguration
    /// `host[:port]` of the upstream URL, made once: the Host for `host_header: upstream`
    /// and for HTTP/1.0 requests without one (read per request, so never rebuilt).
    let authority: String
    let sendsUpstreamHost: Bool
    /// The upstream's `request_headers` as head lines (`name: value\r\n`), made once.
    let fixedHeaderLines: [UInt8]
    /// Addresses, TLS context and reachability, shared with the other loops' pools.
    let target: UpstreamTarget
    let loop: EventLoop
    let limits: HTTPLimits
    /// Limits for responses: the head limits of requests, but no body cap (bodies stream).
    let responseLimits: HTTPLimits
    let connectTimeoutNanoseconds: UInt64
    let responseTimeoutNanoseconds: UInt64
    let idleTimeoutNanoseconds: UInt64
    /// Idle connections; every change is counted in the target (`UpstreamTarget.idleChanged`).
    private var idle: [UpstreamConnection] = []
    private var waiters: [Exchange] = []
    /// Open connections, connecting ones included.
    private(set) var openCount = 0

    /// `portcullis_upstream_response_seconds{upstream}` (nil: metrics are off).
    let latency: CoreMetrics.Timer?
    /// A reload removed (or replaced) this upstream: requests already holding the pool
    /// finish, then their connections close instead of waiting idle. On `loop.queue`.
    private(set) var retired = false

    init(target: UpstreamTarget, loop: EventLoop, loopCount: Int, limits: HTTPLimits,
         latency: CoreMetrics.Timer? = nil) {
        self.target = target
        self.latency = latency
        let configuration = target.configuration
        self.configuration = configuration
        authority = configuration.url.authority
        sendsUpstreamHost = configuration.hostHeader == .upstream
        fixedHeaderLines = Array(configuration.requestHeaders.map { "\($0.name): \($0.value)\r\n" }.joined().utf8)
        self.loop = loop
        self.limits = limits
        var responseLimits = limits
        responseLimits.maxBodyBytes = Int.max
        self.responseLimits = responseLimits
        connectTimeoutNanoseconds = UInt64(configuration.connectTimeout * 1e9)
        responseTimeoutNanoseconds = UInt64(configuration.responseTimeout * 1e9)
        idleTimeoutNanoseconds = UInt64(configuration.idleTimeout * 1e9)
    }

    /// Requests refused with 503 because no connection and no queue room was left (for metrics).
    var exhaustedCount = 0
    /// Connections closed because the upstream sent bytes no request asked for (for metrics).
    var unexpectedBytesCount = 0

    /// A connection of this pool is closed for bytes past what its framing declared.
    func unexpectedBytes(_ count: Int, reason: String) {
        unexpectedBytesCount += 1
        target.reportUnexpectedBytes(count, reason: reason, now: loop.lastNow)
    }

    var idleCount: Int { idle.count }
    var waitingCount: Int { waiters.count }

    /// Hands `exchange` a connection now, queues it, or answers 503 through it.
    /// `fresh` skips idle connections (used for the retry after a stale one).
    func acquire(for exchange: Exchange, fresh: Bool = false) {
        // An idle connection is reused only when no request waits anywhere: a waiter is
        // older, and this connection's slot is its (the loop holding it trims it for them).
        while !fresh, !idle.isEmpty, target.takeIdle() {
            let connection = idle.removeLast()
            // One that spoke while idle (its bytes not read yet) would answer with them.
            if connection.hasUnreadInput {
                unexpectedBytes(0, reason: "a response while idle")
                connection.close()
                continue
            }
            connection.reuse()
            exchange.attach(connection)
            return
        }
        if fresh, let stale = idle.first {
            stale.close()  // make room for the retry: its slot returns to the budget (or a waiter)
        }
        if target.claimSlot() {
            openConnection(for: exchange)
            return
        }
        if target.claimWaiter(loop: loop.index) {
            waiters.append(exchange)
            exchange.markQueued(until: loop.lastNow &+ connectTimeoutNanoseconds)
            // Idle here but older requests wait: the oldest one gets this loop's connection
            // now (trimming on the other loops covers only theirs).
            if !idle.isEmpty { handIdleToOldestWaiter() }
            return
        }
        exchange.poolExhausted()
    }

    /// A slot freed elsewhere was handed to this loop: the oldest waiter gets a new
    /// connection, or (nobody left) the slot goes back.
    func slotGranted() {
        if let waiter = nextWaiter() {
            openConnection(for: waiter)
        } else {
            target.releaseSlot()
        }
    }

    /// One idle connection of this loop goes to the oldest waiter anywhere: reused for it
    /// here, or closed so that its slot passes to that waiter's loop.
    private func handIdleToOldestWaiter() {
        while let connection = idle.last, connection.hasUnreadInput {
            idle.removeLast()
            target.idleChanged(by: -1)
            unexpectedBytes(0, reason: "a response while idle")
            connection.close()  // its slot goes to the oldest waiter
        }
        guard let connection = idle.last else { return }
        switch target.takeOldestWaiter(ifOn: loop.index) {
        case .here:
            guard let waiter = nextWaiter() else { return }
            idle.removeLast()
            target.idleChanged(by: -1)
            connection.reuse()
            waiter.attach(connection)
        case .elsewhere:
            idle.removeLast()
            target.idleChanged(by: -1)
            connection.close()
        case .none:
            break
        }
    }

    /// Another loop has requests waiting and no slot: an idle connection here gives its slot.
    func trimIdleForWaiters() {
        guard !idle.isEmpty, target.hasWaiters else { return }
        let connection = idle.removeFirst()
        target.idleChanged(by: -1)
        connection.close()
    }

    private func openConnection(for exchange: Exchange) {
        let (addresses, resolutionError) = target.addressesForConnection()
        guard !addresses.isEmpty else {
            let reason = resolutionError?.description ?? "cannot resolve \(configuration.url.host)"
            target.reportFailure(reason)
            target.resolveSoon()
            target.releaseSlot()
            exchange.upstreamFailed(.unresolved(reason))
            return
        }
        connect(exchange, addresses, attempt: 0)
    }

    /// Connects to `addresses[attempt]`; a failure moves on to the next address.
    private func connect(_ exchange: Exchange, _ addresses: [SocketAddress], attempt: Int) {
        switch Connector.start(to: addresses[attempt], on: loop) {
        case .failed(let error):
            connectAttemptFailed(exchange, addresses, attempt: attempt, error: error)
        case .connected(let socket):
            attach(exchange, socket, addresses, attempt: attempt, inProgress: false)
        case .inProgress(let socket):
            attach(exchange, socket, addresses, attempt: attempt, inProgress: true)
        }
    }

    private func attach(_ exchange: Exchange, _ socket: StreamSocket, _ addresses: [SocketAddress],
                        attempt: Int, inProgress: Bool) {
        if let tls = target.tls {
            do {
                try TLSSession.secureClient(socket, context: tls, serverName: configuration.url.host)
            } catch {
                socket.close()
                target.reportFailure(error.description)
                target.releaseSlot()
                exchange.upstreamFailed(.tlsFailed(error.description))
                return
            }
        }
        openCount += 1
        let connection = UpstreamConnection(pool: self, socket: socket, addresses: addresses, attempt: attempt)
        exchange.attach(connection)
        connection.connect(inProgress: inProgress)
    }

    /// A connect to one address failed (refused, timed out): the next address (the
    /// slot passes on), or the request fails, the slot is returned and the addresses
    /// are looked up again.
    func connectAttemptFailed(_ exchange: Exchange?, _ addresses: [SocketAddress], attempt: Int, error: IOError) {
        if let exchange, exchange.isActive, attempt + 1 < addresses.count {
            connect(exchange, addresses, attempt: attempt + 1)
            return
        }
        target.reportFailure("\(addresses[attempt]): \(error)")
        target.resolveSoon()
        target.releaseSlot()
        exchange?.upstreamFailed(error.errno == 110 ? .connectTimeout : .connectFailed(error))
    }

    /// An exchange ended; keep the connection if it can serve another request.
    func release(_ connection: UpstreamConnection, reusable: Bool) {
        guard reusable, connection.state == .active, !retired else {
            connection.close()
            return
        }
        // Reading may have been paused for the exchange that just ended (its client was
        // backed up when the response's last bytes arrived, and the exchange let go of the
        // connection before its client drained, so no resume reaches it): the next exchange
        // must read its response, and an idle connection must hear the upstream close it.
        connection.socket.resumeReading()
        // The oldest waiting request anywhere gets it: here by reuse, elsewhere by
        // closing this connection so its slot passes to that loop (first come, first
        // served whichever loop a client landed on).
        switch target.takeOldestWaiter(ifOn: loop.index) {
        case .here:
            if let waiter = nextWaiter() {
                connection.reuse()
                waiter.attach(connection)
                return
            }
        case .elsewhere:
            connection.close()
            return
        case .none:
            break
        }
        connection.becameIdle(idleDeadline: loop.lastNow &+ idleTimeoutNanoseconds)
        idle.append(connection)
        target.idleChanged(by: 1)
    }

    func connectionClosed(_ connection: UpstreamConnection) {
        openCount -= 1
        if let i = idle.firstIndex(where: { $0 === connection }) {
            idle.remove(at: i)
            target.idleChanged(by: -1)
        }
        if connection.holdsSlot { target.releaseSlot() }
    }

    func cancelWaiter(_ exchange: Exchange) {
        if let i = waiters.firstIndex(where: { $0 === exchange }) {
            waiters.remove(at: i)
            target.leaveQueue(loop: loop.index)
        }
    }

    /// The oldest waiter still active. Cancelled exchanges left the shared queue when
    /// they ended (`cancelWaiter`); the one returned must leave it too, unless its slot
    /// was granted through `slotGranted` (the grant already took its entry).
    private func nextWaiter() -> Exchange? {
        while !waiters.isEmpty {
            let waiter = waiters.removeFirst()
            if waiter.phase == .waitingForConnection { return waiter }
        }
        return nil
    }

    /// A reload dropped this pool: idle connections close now, busy ones when their
    /// request ends; queued requests are still served. On `loop.queue`.
    func retire() {
        retired = true
        closeIdle()
    }

    /// Closes idle connections (shutdown).
    func closeIdle() {
        let connections = idle
        idle.removeAll()
        target.idleChanged(by: -connections.count)
        for connection in connections { connection.close() }
    }
}
