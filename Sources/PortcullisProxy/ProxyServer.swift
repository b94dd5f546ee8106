import Dispatch
import Logging
import PortcullisCore
import PortcullisHTTP
import PortcullisIO

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
    /// pools[loop][upstream]
    private var pools: [[UpstreamPool]] = []
    private var accessLogs: [AccessLog?] = []
    private var listeners: [Listener] = []
    private var contexts: [ListenerContext] = []
    private let routes: RouteTable

    public init(group: EventLoopGroup, configuration: ProxyConfiguration,
                authenticator: any RequestAuthenticator, accessLogFD: Int32?, logger: Logger) {
        self.group = group
        self.configuration = configuration
        self.authenticator = authenticator
        self.logger = logger
        self.accessLogFD = accessLogFD
        routes = RouteTable(configuration.routes, upstreamNames: configuration.upstreams.map(\.name))
        let logger = self.logger
        for loop in group.loops {
            pools.append(configuration.upstreams.map { upstream in
                let pool = UpstreamPool(configuration: upstream, loop: loop, loopCount: group.loops.count,
                                        limits: configuration.limits)
                if loop.index == 0 {
                    // Logged once per state change, from one loop (the others see the same upstream).
                    pool.onReachabilityChange = { upstream, error in
                        if let error {
                            logger.warning("upstream unreachable", metadata: [
                                "upstream": "\(upstream.name)", "address": "\(upstream.address)", "error": "\(error)"])
                        } else {
                            logger.info("upstream reachable again", metadata: ["upstream": "\(upstream.name)"])
                        }
                    }
                }
                return pool
            })
            accessLogs.append(accessLogFD.map { AccessLog(fd: $0, loop: loop) })
        }
    }

    /// Binds `address` once per loop (SO_REUSEPORT). Returns the bound port.
    @discardableResult
    public func addListener(address: SocketAddress, mode: ListenerMode) throws(IOError) -> UInt16 {
        var port: UInt16 = 0
        var bound = address
        for loop in group.loops {
            let listener = try Listener(address: bound, loop: loop)
            if port == 0 {
                port = listener.boundPort
                if address.port == 0 {
                    // Every loop must bind the same port the kernel picked for the first.
                    bound = (try? SocketAddress(parsing: address.family == 10 ? "[\(address.host)]:\(port)" : "\(address.host):\(port)")) ?? address
                }
            }
            let isGateway: Bool
            if case .gateway = mode { isGateway = true } else { isGateway = false }
            let context = ListenerContext(loop: loop, mode: mode, configuration: configuration, routes: routes,
                                          pools: pools[loop.index], authenticator: authenticator,
                                          accessLog: isGateway ? accessLogs[loop.index] : nil)
            listeners.append(listener)
            contexts.append(context)
        }
        return port
    }

    public func start() {
        for (listener, context) in zip(listeners, contexts) {
            listener.loop.execute {
                listener.start { socket, peer in context.accept(socket, peer: peer) }
            }
        }
    }

    /// Stops accepting, waits for in-flight requests (up to `gracePeriod` seconds),
    /// then calls `completion` (on a global queue).
    public func shutdown(gracePeriod: Double, completion: @escaping @Sendable () -> Void) {
        let pairs = Array(zip(listeners, contexts))
        for (listener, context) in pairs {
            listener.loop.execute {
                listener.stop()
                context.draining = true
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
