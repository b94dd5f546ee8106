import CoreMetrics
import Dispatch
import Logging
import PortcullisCore
import PortcullisHTTP
import PortcullisIO
import PortcullisTLS

/// Assembles listeners, per-loop upstream pools and contexts, and runs the graceful
/// shutdown: stop accepting, let in-flight requests finish up to a deadline, close.
public final class ProxyServer: @unchecked Sendable {
    // @unchecked Sendable: `listeners` and `contexts` are written only during setup on
    // the caller's thread before `start()`; afterwards each context is read on its loop.
    public let group: EventLoopGroup
    public let configuration: ProxyConfiguration
    private let authenticator: any RequestAuthenticator
    private let logger: Logger
    private let accessLogFD: Int32?
    /// Counters and timers for `/metrics`; nil when metrics are off.
    public let metrics: ProxyMetrics?
    /// pools[loop][upstream]
    private var pools: [[UpstreamPool]] = []
    private var accessLogs: [AccessLog?] = []
    private var listeners: [Listener] = []
    private var contexts: [ListenerContext] = []
    /// For each listener, its address's contexts on every loop (the hand-off candidates).
    private var siblings: [[ListenerContext]] = []
    private let routes: RouteTable

    /// Upstreams shared by every loop's pools (addresses, TLS, reachability).
    public let targets: [UpstreamTarget]

    public init(group: EventLoopGroup, configuration: ProxyConfiguration,
                authenticator: any RequestAuthenticator, accessLogFD: Int32?, logger: Logger,
                metricsFactory: (any MetricsFactory)? = nil) throws(TLSFileError) {
        self.group = group
        self.configuration = configuration
        self.authenticator = authenticator
        self.logger = logger
        self.accessLogFD = accessLogFD
        metrics = metricsFactory.map { ProxyMetrics(loopCount: group.loops.count, configuration: configuration, factory: $0) }
        routes = RouteTable(configuration.routes, upstreamNames: configuration.upstreams.map(\.name))
        targets = try configuration.upstreams.map { upstream throws(TLSFileError) in
            try UpstreamTarget(configuration: upstream, logger: logger)
        }
        for loop in group.loops {
            pools.append(targets.enumerated().map { index, target in
                UpstreamPool(target: target, index: index, loop: loop, loopCount: group.loops.count, limits: configuration.limits)
            })
            accessLogs.append(accessLogFD.map { AccessLog(fd: $0, loop: loop) })
        }
        // The budget of each upstream is shared: a freed slot is handed to the loop whose
        // request waits longest, and loops with idle connections give them up for waiters.
        let pools = self.pools
        let loops = group.loops
        for (index, target) in targets.enumerated() {
            target.grantSlot = { loopIndex in
                let pool = pools[loopIndex][index]
                loops[loopIndex].execute { pool.slotGranted() }
            }
            target.trimIdle = { except in
                for loop in loops where loop.index != except {
                    let pool = pools[loop.index][index]
                    loop.execute { pool.trimIdleForWaiters() }
                }
            }
        }
    }

    /// Served by every gateway listener added after it is set (see `PublishedDocument`).
    public var published: (any PublishedDocument)?

    /// Binds `address` once; every loop listens on that socket (see `Listener`). Returns
    /// the bound port.
    @discardableResult
    /// `http2`: HTTP/2 settings when the listener offers it (ALPN `h2` on TLS; with `h2c`,
    /// prior knowledge on a plain listener).
    public func addListener(address: SocketAddress, mode: ListenerMode, tls: TLSServerEndpoint? = nil,
                            redirectsToHTTPS: Bool = false, http2: HTTP2Settings? = nil,
                            h2c: Bool = false) throws(IOError) -> UInt16 {
        var first: Listener?
        var added: [ListenerContext] = []
        // One entry per context added (also when a later loop's descriptor fails), same order.
        defer { siblings += repeatElement(added, count: added.count) }
        for loop in group.loops {
            let listener: Listener
            if let first {
                listener = try Listener(sharing: first, loop: loop)
            } else {
                listener = try Listener(address: address, loop: loop)
                first = listener
            }
            let isGateway: Bool
            if case .gateway = mode { isGateway = true } else { isGateway = false }
            let context = ListenerContext(loop: loop, mode: mode, configuration: configuration, routes: routes,
                                          pools: pools[loop.index], authenticator: authenticator,
                                          accessLog: isGateway ? accessLogs[loop.index] : nil,
                                          metrics: isGateway ? metrics : nil, tls: tls,
                                          redirectsToHTTPS: redirectsToHTTPS, published: isGateway ? published : nil,
                                          http2: isGateway ? http2 : nil, h2c: h2c, logger: logger)
            listeners.append(listener)
            contexts.append(context)
            added.append(context)
        }
        return first?.boundPort ?? 0
    }

    public func start() {
        for target in targets { target.startResolving() }
        for (index, (listener, context)) in zip(listeners, contexts).enumerated() {
            let logger = self.logger
            let address = listener.address.description
            let others = siblings[index].filter { $0 !== context }
            listener.loop.execute {
                listener.start({ socket, peer in context.accept(socket, peer: peer) },
                               handOff: others.isEmpty ? nil : { fd, peer in Self.balancedHandOff(fd, peer, from: context, to: others) },
                               onFailure: { error in
                    if let error {
                        logger.error("cannot accept connections; new connections wait in the kernel's queue", metadata: [
                            "listen": "\(address)", "loop": "\(listener.loop.index)", "reason": "\(error)",
                            "retry_ms": "\(Listener.backOffMilliseconds)"])
                    } else {
                        logger.notice("accepting connections again", metadata: [
                            "listen": "\(address)", "loop": "\(listener.loop.index)"])
                    }
                })
            }
        }
    }

    /// Connections are taken by whichever loop is waiting when they arrive (see `Listener`),
    /// which can leave a few long-lived connections unevenly spread: a burst of 8 HTTP/2
    /// connections may be accepted mostly by one loop, whose thread is then the bottleneck
    /// while the other idles. (With the earlier `SO_REUSEPORT` listeners the kernel's hash
    /// usually gave one loop 5 or 6 of h2load's 8.) So a
    /// loop that accepts a connection while it already has `handOffFloor` or more, and more
    /// than another loop (counting connections handed over but not yet taken), hands the
    /// descriptor to the least loaded one, as HAProxy gives each accepted connection to its
    /// least loaded thread. Below the floor a connection stays where it was accepted: a
    /// handshake load of a few clients at a time would otherwise pay a queue hop and a
    /// thread wake-up per connection. Runs on the accepting loop.
    static func balancedHandOff(_ fd: Int32, _ peer: SocketAddress, from context: ListenerContext,
                                to others: [ListenerContext]) -> Bool {
        guard let index = handOffTarget(load: context.load, others: others.lazy.map(\.load)) else { return false }
        let target = others[index]
        target.incoming.add(1, ordering: .relaxed)
        target.loop.execute { target.acceptHandedOff(fd, peer: peer) }
        return true
    }

    static let handOffFloor = 3

    /// Which of `others` (their loads) a loop with `load` connections hands a new one to:
    /// the least loaded, if it has fewer and this loop has at least `handOffFloor`.
    static func handOffTarget(load: Int, others: some Sequence<Int>) -> Int? {
        guard load >= handOffFloor else { return nil }
        var least = load
        var target: Int?
        for (index, other) in others.enumerated() where other < least {
            least = other
            target = index
        }
        return target
    }

    /// Open client connections on each loop, over all listeners (tests, diagnostics).
    public var openConnectionsByLoop: [Int] {
        var counts = [Int](repeating: 0, count: group.loops.count)
        for context in contexts { counts[context.loop.index] += context.openConnections }
        return counts
    }

    /// Request counts and pool usage summed over every loop, read on each
    /// loop's queue in turn (no locks on the request path). `completion` runs
    /// on the last loop's queue.
    public func snapshot(completion: @escaping @Sendable (ProxySnapshot) -> Void) {
        let loops = group.loops
        let pools = self.pools
        let metrics = self.metrics
        let routeLabels = metrics?.routeLabels ?? []
        let upstreams = configuration.upstreams
        @Sendable func visit(_ index: Int, _ totals: ProxyMetrics.Totals, _ usage: [UpstreamPoolUsage]) {
            guard index < loops.count else {
                var snapshot = ProxySnapshot(pools: usage)
                for (slot, name) in RequestProtocol.allCases.enumerated() where slot < totals.protocols.count {
                    snapshot.protocols.append(("\(name.name)", totals.protocols[slot]))
                }
                snapshot.outOfPhaseEvents = totals.outOfPhaseEvents
                snapshot.http2RefusedStreams = totals.http2RefusedStreams
                for kind in HTTP2Abuse.allCases where kind.rawValue < totals.http2Abuse.count {
                    snapshot.http2Abuse.append((kind.name, totals.http2Abuse[kind.rawValue]))
                }
                for (slot, count) in totals.requests.enumerated() where count != 0 {
                    let route = slot / ProxyMetrics.statusSlots
                    snapshot.requests.append((route == 0 ? nil : routeLabels[route - 1],
                                              slot % ProxyMetrics.statusSlots + 100, count))
                }
                completion(snapshot)
                return
            }
            loops[index].execute {
                var totals = totals
                if let counts = metrics?.loops[index] { totals.add(counts) }
                var usage = usage
                for pool in pools[index] {
                    usage[pool.index].open += pool.openCount
                    usage[pool.index].idle += pool.idleCount
                    usage[pool.index].waiting += pool.waitingCount
                    usage[pool.index].maxConnections = pool.configuration.maxConnections  // a total, not per loop
                    usage[pool.index].exhausted += pool.exhaustedCount
                    usage[pool.index].unexpectedBytes += pool.unexpectedBytesCount
                }
                visit(index + 1, totals, usage)
            }
        }
        visit(0, ProxyMetrics.Totals(), upstreams.map { UpstreamPoolUsage(upstream: $0.name) })
    }

    /// Stops accepting, waits for in-flight requests (up to `gracePeriod` seconds),
    /// then calls `completion` (on a global queue).
    public func shutdown(gracePeriod: Double, completion: @escaping @Sendable () -> Void) {
        let pairs = Array(zip(listeners, contexts))
        for (listener, context) in pairs {
            listener.loop.execute {
                listener.stop()
                context.beginDraining()
            }
        }
        let deadline = DispatchTime.now() + gracePeriod
        let contexts = self.contexts
        let pools = self.pools
        let accessLogs = self.accessLogs
        @Sendable func poll() {
            let active = contexts.reduce(0) { sum, context in
                sum + context.loop.queue.sync { context.activeRequests }
            }
            if active == 0 || DispatchTime.now() >= deadline {
                for loopPools in pools {
                    for pool in loopPools { pool.loop.queue.sync { pool.closeIdle() } }
                }
                for log in accessLogs { if let log { log.flushOnLoop() } }
                completion()
                return
            }
            DispatchQueue.global().asyncAfter(deadline: .now() + 0.05) { poll() }
        }
        DispatchQueue.global().asyncAfter(deadline: .now() + 0.01) { poll() }
    }
}

extension AccessLog {
    func flushOnLoop() {
        loopQueue.sync { flush() }
    }
}
