import CoreMetrics
import Dispatch
import Logging
import PortcullisCore
import PortcullisHTTP
import PortcullisIO
import PortcullisTLS

/// One upstream: its shared target and its pool on every loop. Kept across reloads while
/// the upstream's settings (and the limits its pools apply) stay the same.
final class UpstreamEntry: Sendable {
    let target: UpstreamTarget
    /// By loop index.
    let pools: [UpstreamPool]
    let limits: HTTPLimits

    init(target: UpstreamTarget, group: EventLoopGroup, limits: HTTPLimits, metrics: ProxyMetrics?) {
        self.target = target
        self.limits = limits
        let latency = metrics?.latencyTimer(upstream: target.configuration.name)
        pools = group.loops.map { loop in
            UpstreamPool(target: target, loop: loop, loopCount: group.loops.count, limits: limits, latency: latency)
        }
        // The budget of each upstream is shared: a freed slot is handed to the loop whose
        // request waits longest, and loops with idle connections give them up for waiters.
        // The pools are held weakly: the servings that use them keep them (and through them
        // the target); a removed upstream goes once its last request finished.
        let weakPools = pools.map { WeakPool($0) }
        let loops = group.loops
        target.grantSlot = { loopIndex in
            guard let pool = weakPools[loopIndex].pool else { return }
            loops[loopIndex].execute { pool.slotGranted() }
        }
        target.trimIdle = { except in
            for loop in loops where loop.index != except {
                guard let pool = weakPools[loop.index].pool else { continue }
                loop.execute { pool.trimIdleForWaiters() }
            }
        }
    }

    func matches(_ configuration: UpstreamConfiguration, limits: HTTPLimits) -> Bool {
        target.configuration == configuration && self.limits == limits
    }
}

private struct WeakPool: Sendable {
    weak var pool: UpstreamPool?
    init(_ pool: UpstreamPool) { self.pool = pool }
}

/// What a listener is told to be: its address, what it does, TLS and HTTP/2.
public struct ListenerSpec: Sendable {
    public var address: SocketAddress
    public var mode: ListenerMode
    public var tls: TLSServerEndpoint?
    public var redirectsToHTTPS: Bool
    public var http2: HTTP2Settings?
    public var h2c: Bool
    public init(address: SocketAddress, mode: ListenerMode, tls: TLSServerEndpoint? = nil, redirectsToHTTPS: Bool = false,
                http2: HTTP2Settings? = nil, h2c: Bool = false) {
        self.address = address
        self.mode = mode
        self.tls = tls
        self.redirectsToHTTPS = redirectsToHTTPS
        self.http2 = http2
        self.h2c = h2c
    }
    var isGateway: Bool {
        if case .gateway = mode { return true }
        return false
    }
}

/// One listening address: its socket on every loop and the per-loop contexts, which
/// outlive reloads (connections keep them; `serving` is what changes).
final class ListenerSlot: @unchecked Sendable {
    // @unchecked Sendable: `spec` is written under the server's reconfiguration lock only.
    var spec: ListenerSpec
    /// Reloads add and remove it (the gateway listeners and the admin listener); the
    /// demo apps are not.
    let managed: Bool
    let listeners: [Listener]
    let contexts: [ListenerContext]
    init(spec: ListenerSpec, managed: Bool, listeners: [Listener], contexts: [ListenerContext]) {
        self.spec = spec
        self.managed = managed
        self.listeners = listeners
        self.contexts = contexts
    }
}

/// A new generation for `ProxyServer.reconfigure`.
public struct ProxyGeneration: Sendable {
    public var configuration: ProxyConfiguration
    public var authenticator: any RequestAuthenticator
    public var published: (any PublishedDocument)?
    /// The access log's descriptor (nil: off); a change makes new per-loop logs.
    public var accessLogFD: Int32?
    /// Every listener reloads manage, in order (gateway listeners and the admin listener).
    public var listeners: [ListenerSpec]
    public init(configuration: ProxyConfiguration, authenticator: any RequestAuthenticator,
                published: (any PublishedDocument)?, accessLogFD: Int32?, listeners: [ListenerSpec]) {
        self.configuration = configuration
        self.authenticator = authenticator
        self.published = published
        self.accessLogFD = accessLogFD
        self.listeners = listeners
    }
}

/// Why a generation was not applied (nothing changed).
public struct ReconfigureError: Error, CustomStringConvertible {
    public var description: String
}

/// Assembles listeners, per-loop upstream pools and contexts, swaps them on reload, and
/// runs the graceful shutdown: stop accepting, let in-flight requests finish up to a
/// deadline, close.
///
/// A reload (`reconfigure`) is an in-process swap, one loop at a time: the new generation's
/// `ListenerServing`s are built off the loops, then each loop replaces its contexts'
/// `serving` in one block on its queue. A request in flight keeps the serving it began
/// with; an upstream whose settings did not change keeps its pools and their connections;
/// a removed upstream's pools close their idle connections and close busy ones when their
/// request ends; a removed listener stops accepting and drains its connections (keep-alive
/// off, GOAWAY) as in a shutdown; an added one is bound before anything changes, so a port
/// that cannot be bound refuses the whole reload.
public final class ProxyServer: @unchecked Sendable {
    // @unchecked Sendable: `state` is under `lock`; before `start()` it is written on the
    // caller's thread only. Each context is read on its loop.
    public let group: EventLoopGroup
    private let logger: Logger
    /// Counters and timers for `/metrics`; nil when metrics are off.
    public let metrics: ProxyMetrics?
    /// Trace ids and spans (`tracing:`); exports only while a configuration turns it on.
    public let tracer: Tracer

    private struct State {
        var generation: UInt64 = 1
        var configuration: ProxyConfiguration
        var authenticator: any RequestAuthenticator
        var published: (any PublishedDocument)?
        var accessLogFD: Int32?
        var accessLogs: [AccessLog?]
        var upstreams: [UpstreamEntry]
        var slots: [ListenerSlot] = []
        /// Removed listeners whose connections may still be open.
        var retired: [ListenerSlot] = []
        var started = false
        /// Shutdown began: reloads are refused.
        var stopping = false
    }
    private let lock = Lock()
    private var state: State
    /// Serializes `reconfigure` calls (held while binding; never on a loop).
    private let reconfiguring = DispatchSemaphore(value: 1)

    /// The configuration now served.
    public var configuration: ProxyConfiguration { lock.withLock { state.configuration } }
    /// 1 at start, one more per applied reload.
    public var generation: UInt64 { lock.withLock { state.generation } }
    /// Upstreams shared by every loop's pools (addresses, TLS, reachability), current ones.
    public var targets: [UpstreamTarget] { lock.withLock { state.upstreams.map(\.target) } }

    public init(group: EventLoopGroup, configuration: ProxyConfiguration,
                authenticator: any RequestAuthenticator, accessLogFD: Int32?, logger: Logger,
                metricsFactory: (any MetricsFactory)? = nil) throws(TLSFileError) {
        self.group = group
        self.logger = logger
        let metrics = metricsFactory.map { ProxyMetrics(loopCount: group.loops.count, configuration: configuration, factory: $0) }
        self.metrics = metrics
        tracer = Tracer(loops: group.loops, logger: logger)
        tracer.configure(configuration.tracing)
        var upstreams: [UpstreamEntry] = []
        for upstream in configuration.upstreams {
            let target = try UpstreamTarget(configuration: upstream, logger: logger)
            upstreams.append(UpstreamEntry(target: target, group: group, limits: configuration.limits, metrics: metrics))
        }
        state = State(configuration: configuration, authenticator: authenticator, accessLogFD: accessLogFD,
                      accessLogs: group.loops.map { loop in accessLogFD.map { AccessLog(fd: $0, loop: loop) } },
                      upstreams: upstreams)
    }

    /// The authenticator of listeners added after it is set (before `start()`).
    public func setAuthenticator(_ authenticator: any RequestAuthenticator) {
        lock.withLock { state.authenticator = authenticator }
    }

    /// Served by every gateway listener added after it is set (see `PublishedDocument`).
    public var published: (any PublishedDocument)? {
        get { lock.withLock { state.published } }
        set { lock.withLock { state.published = newValue } }
    }

    /// The servings of one generation for `spec` on every loop.
    private static func servings(_ spec: ListenerSpec, generation: UInt64, configuration: ProxyConfiguration,
                                 routes: RouteTable, routeSlots: [Int]?, upstreams: [UpstreamEntry],
                                 authenticator: any RequestAuthenticator, accessLogs: [AccessLog?],
                                 metrics: ProxyMetrics?, tracer: Tracer, published: (any PublishedDocument)?,
                                 logger: Logger, group: EventLoopGroup) -> [ListenerServing] {
        let isGateway = spec.isGateway
        return group.loops.map { loop in
            ListenerServing(generation: generation, configuration: configuration, routes: routes, routeSlots: routeSlots,
                            pools: upstreams.map { $0.pools[loop.index] }, authenticator: authenticator,
                            accessLog: isGateway ? accessLogs[loop.index] : nil, metrics: isGateway ? metrics : nil,
                            tls: spec.tls, redirectsToHTTPS: spec.redirectsToHTTPS, published: isGateway ? published : nil,
                            http2: isGateway ? spec.http2 : nil, h2c: spec.h2c, logger: logger,
                            tracer: isGateway ? tracer : nil)
        }
    }

    /// Binds `spec.address` once and opens a descriptor for every loop.
    private func bind(_ spec: ListenerSpec, servings: [ListenerServing], managed: Bool) throws(IOError) -> ListenerSlot {
        var first: Listener?
        var listeners: [Listener] = []
        var contexts: [ListenerContext] = []
        do {
            for loop in group.loops {
                let listener: Listener
                if let first {
                    listener = try Listener(sharing: first, loop: loop)
                } else {
                    listener = try Listener(address: spec.address, loop: loop)
                    first = listener
                }
                listeners.append(listener)
                contexts.append(ListenerContext(loop: loop, mode: spec.mode, serving: servings[loop.index]))
            }
        } catch {
            for listener in listeners { listener.loop.queue.sync { listener.stop() } }
            throw error
        }
        return ListenerSlot(spec: spec, managed: managed, listeners: listeners, contexts: contexts)
    }

    /// Binds `address` once; every loop listens on that socket (see `Listener`). Returns
    /// the bound port. Before `start()`.
    ///
    /// `http2`: HTTP/2 settings when the listener offers it (ALPN `h2` on TLS; with `h2c`,
    /// prior knowledge on a plain listener). `managed`: reloads may remove it (false: the
    /// demo apps, which no configuration file names).
    @discardableResult
    public func addListener(address: SocketAddress, mode: ListenerMode, tls: TLSServerEndpoint? = nil,
                            redirectsToHTTPS: Bool = false, http2: HTTP2Settings? = nil,
                            h2c: Bool = false, managed: Bool = true) throws(IOError) -> UInt16 {
        let spec = ListenerSpec(address: address, mode: mode, tls: tls, redirectsToHTTPS: redirectsToHTTPS, http2: http2, h2c: h2c)
        let current = lock.withLock { state }
        let servings = Self.servings(spec, generation: current.generation, configuration: current.configuration,
                                     routes: RouteTable(current.configuration.routes, upstreamNames: current.configuration.upstreams.map(\.name)),
                                     routeSlots: metrics?.routeSlots(for: current.configuration), upstreams: current.upstreams,
                                     authenticator: current.authenticator,
                                     accessLogs: current.accessLogs, metrics: metrics, tracer: tracer, published: current.published,
                                     logger: logger, group: group)
        let slot = try bind(spec, servings: servings, managed: managed)
        lock.withLock { state.slots.append(slot) }
        return slot.listeners.first?.boundPort ?? 0
    }

    public func start() {
        let (upstreams, slots) = lock.withLock { () -> ([UpstreamEntry], [ListenerSlot]) in
            state.started = true
            return (state.upstreams, state.slots)
        }
        for entry in upstreams { entry.target.startResolving() }
        for slot in slots { startAccepting(slot) }
    }

    private func startAccepting(_ slot: ListenerSlot) {
        let logger = self.logger
        for (listener, context) in zip(slot.listeners, slot.contexts) {
            let address = listener.address.description
            let others = slot.contexts.filter { $0 !== context }
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

    /// What a reload changed, for the log and the verdict.
    public struct ReconfigureReport: Sendable {
        public var generation: UInt64
        public var upstreamsKept: [String] = []
        public var upstreamsAdded: [String] = []
        public var upstreamsRemoved: [String] = []
        public var listenersAdded: [String] = []
        public var listenersRemoved: [String] = []
    }

    /// Applies a new generation (see the type comment). Called off the loops (a reload's
    /// thread); reloads are serialized. Throws, with nothing changed, when an upstream's
    /// TLS files do not load or an added listener's address cannot be bound.
    public func reconfigure(_ next: ProxyGeneration) throws(ReconfigureError) -> ReconfigureReport {
        reconfiguring.wait()
        defer { reconfiguring.signal() }
        let current = lock.withLock { state }
        guard !current.stopping else { throw ReconfigureError(description: "the gateway is shutting down") }
        let generation = current.generation + 1
        var report = ReconfigureReport(generation: generation)
        let configuration = next.configuration

        // Upstreams: kept when unchanged, else new targets (TLS files loaded now).
        var upstreams: [UpstreamEntry] = []
        var fresh: [UpstreamEntry] = []
        for upstream in configuration.upstreams {
            if let kept = current.upstreams.first(where: { $0.matches(upstream, limits: configuration.limits) }) {
                upstreams.append(kept)
                report.upstreamsKept.append(upstream.name)
                continue
            }
            do {
                let entry = UpstreamEntry(target: try UpstreamTarget(configuration: upstream, logger: logger),
                                          group: group, limits: configuration.limits, metrics: metrics)
                upstreams.append(entry)
                fresh.append(entry)
                report.upstreamsAdded.append(upstream.name)
            } catch {
                throw ReconfigureError(description: "upstreams.\(upstream.name): \(error)")
            }
        }
        let removedUpstreams = current.upstreams.filter { old in !upstreams.contains { $0 === old } }
        report.upstreamsRemoved = removedUpstreams.map(\.target.configuration.name)

        let accessLogs = next.accessLogFD == current.accessLogFD ? current.accessLogs
            : group.loops.map { loop in next.accessLogFD.map { AccessLog(fd: $0, loop: loop) } }
        let routes = RouteTable(configuration.routes, upstreamNames: configuration.upstreams.map(\.name))
        let routeSlots = metrics?.routeSlots(for: configuration)

        // Listeners: the same address (and kind) keeps its socket and contexts.
        func sameSlot(_ slot: ListenerSlot, _ spec: ListenerSpec) -> Bool {
            slot.managed && slot.spec.address == spec.address && slot.spec.isGateway == spec.isGateway
        }
        var swaps: [(ListenerSlot, [ListenerServing], ListenerSpec)] = []
        var added: [ListenerSlot] = []
        for spec in next.listeners {
            let servings = Self.servings(spec, generation: generation, configuration: configuration, routes: routes,
                                         routeSlots: routeSlots, upstreams: upstreams, authenticator: next.authenticator,
                                         accessLogs: accessLogs, metrics: metrics, tracer: tracer, published: next.published,
                                         logger: logger, group: group)
            if let slot = current.slots.first(where: { sameSlot($0, spec) }) {
                swaps.append((slot, servings, spec))
                continue
            }
            do {
                added.append(try bind(spec, servings: servings, managed: true))
                report.listenersAdded.append(spec.address.description)
            } catch {
                for slot in added { for listener in slot.listeners { listener.loop.queue.sync { listener.stop() } } }
                for entry in fresh { entry.target.stopResolving() }
                throw ReconfigureError(description: "cannot listen on \(spec.address): \(error)")
            }
        }
        let removedSlots = current.slots.filter { slot in slot.managed && !swaps.contains { $0.0 === slot } }
        report.listenersRemoved = removedSlots.map(\.spec.address.description)

        // Nothing can fail from here on. Resolve new upstreams before they serve.
        for entry in fresh { entry.target.startResolving() }
        for loop in group.loops {
            let index = loop.index
            let metrics = self.metrics
            loop.queue.sync {
                metrics?.grow(loopIndex: index)
                for (slot, servings, _) in swaps { slot.contexts[index].serving = servings[index] }
                for slot in removedSlots {
                    slot.listeners[index].stop()
                    slot.contexts[index].beginDraining()
                }
                for entry in removedUpstreams { entry.pools[index].retire() }
            }
        }
        for entry in removedUpstreams { entry.target.stopResolving() }
        tracer.configure(configuration.tracing)
        lock.withLock {
            state.generation = generation
            state.configuration = configuration
            state.authenticator = next.authenticator
            state.published = next.published
            state.accessLogFD = next.accessLogFD
            state.accessLogs = accessLogs
            state.upstreams = upstreams
            for (slot, _, spec) in swaps { slot.spec = spec }
            state.slots = state.slots.filter { slot in !removedSlots.contains { $0 === slot } } + added
            // Removed listeners are kept until their last connection closed (shutdown waits for them).
            state.retired = state.retired.filter { slot in slot.contexts.contains { $0.openConnections > 0 } } + removedSlots
        }
        if next.accessLogFD != current.accessLogFD {
            for log in current.accessLogs { if let log { log.loopQueue.async { log.flush() } } }
        }
        for slot in added { startAccepting(slot) }
        return report
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
        let slots = lock.withLock { state.slots + state.retired }
        for slot in slots { for context in slot.contexts { counts[context.loop.index] += context.openConnections } }
        return counts
    }

    /// Request counts and pool usage summed over every loop, read on each
    /// loop's queue in turn (no locks on the request path). `completion` runs
    /// on the last loop's queue.
    public func snapshot(completion: @escaping @Sendable (ProxySnapshot) -> Void) {
        let loops = group.loops
        let (upstreams, slots) = lock.withLock { (state.upstreams, state.slots + state.retired) }
        let listeners = slots.map { (label: $0.spec.address.description, contexts: $0.contexts) }
        let metrics = self.metrics
        let routeLabels = metrics?.routeLabels ?? []
        @Sendable func visit(_ index: Int, _ totals: ProxyMetrics.Totals, _ usage: [UpstreamPoolUsage],
                             _ connections: ListenerConnectionTotals) {
            guard index < loops.count else {
                var snapshot = ProxySnapshot(pools: usage)
                connections.publish(into: &snapshot)
                for (slot, name) in RequestProtocol.allCases.enumerated() where slot < totals.protocols.count {
                    snapshot.protocols.append(("\(name.name)", totals.protocols[slot]))
                }
                snapshot.outOfPhaseEvents = totals.outOfPhaseEvents
                snapshot.http2RefusedStreams = totals.http2RefusedStreams
                for kind in HTTP2Abuse.allCases where kind.rawValue < totals.http2Abuse.count {
                    snapshot.http2Abuse.append((kind.name, totals.http2Abuse[kind.rawValue]))
                }
                let cells = ProxyMetrics.durationCells
                for (row, sum) in totals.durationSums.enumerated() where (row + 1) * cells <= totals.durations.count {
                    let buckets = Array(totals.durations[(row * cells)..<((row + 1) * cells)])
                    guard buckets.contains(where: { $0 != 0 }) else { continue }
                    let route = row / ProxyMetrics.statusClasses
                    guard route <= routeLabels.count else { continue }
                    snapshot.durations.append((route == 0 ? nil : routeLabels[route - 1], "\(row % ProxyMetrics.statusClasses + 1)xx",
                                               buckets, Double(sum) / 1e9))
                }
                for (slot, count) in totals.requests.enumerated() where count != 0 {
                    let route = slot / ProxyMetrics.statusSlots
                    guard route <= routeLabels.count else { continue }
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
                for (position, entry) in upstreams.enumerated() {
                    let pool = entry.pools[index]
                    usage[position].open += pool.openCount
                    usage[position].idle += pool.idleCount
                    usage[position].waiting += pool.waitingCount
                    usage[position].maxConnections = pool.configuration.maxConnections  // a total, not per loop
                    usage[position].exhausted += pool.exhaustedCount
                    usage[position].unexpectedBytes += pool.unexpectedBytesCount
                }
                var connections = connections
                for listener in listeners where index < listener.contexts.count {
                    connections.add(listener.contexts[index], listener: listener.label)
                }
                visit(index + 1, totals, usage, connections)
            }
        }
        visit(0, ProxyMetrics.Totals(), upstreams.map { UpstreamPoolUsage(upstream: $0.target.configuration.name) },
              ListenerConnectionTotals())
    }

    /// Stops accepting, waits for in-flight requests (up to `gracePeriod` seconds),
    /// then calls `completion` (on a global queue).
    public func shutdown(gracePeriod: Double, completion: @escaping @Sendable () -> Void) {
        // No reload applies once the shutdown began (it waits for one under way).
        reconfiguring.wait()
        let (slots, upstreams, accessLogs) = lock.withLock {
            state.stopping = true
            return (state.slots + state.retired, state.upstreams, state.accessLogs)
        }
        reconfiguring.signal()
        for slot in slots {
            for (listener, context) in zip(slot.listeners, slot.contexts) {
                listener.loop.execute {
                    listener.stop()
                    context.beginDraining()
                }
            }
        }
        let deadline = DispatchTime.now() + gracePeriod
        let contexts = slots.flatMap(\.contexts)
        @Sendable func poll() {
            let active = contexts.reduce(0) { sum, context in
                sum + context.loop.queue.sync { context.activeRequests }
            }
            if active == 0 || DispatchTime.now() >= deadline {
                for entry in upstreams {
                    for pool in entry.pools { pool.loop.queue.sync { pool.closeIdle() } }
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
