import Logging
import Synchronization
import PortcullisCore
import PortcullisHTTP
import PortcullisIO
import PortcullisTLS

/// What a listener does with requests.
public enum ListenerMode: Sendable {
    /// Route to upstreams, after authentication.
    case gateway
    /// Answer everything with a local handler.
    case local(any LocalHandler)
}

/// What one listener serves on one loop under one configuration generation: the route
/// table, this loop's upstream pools, the policies and the listener's own settings.
/// Immutable: a reload makes new ones and swaps `ListenerContext.serving` on the loop.
/// An exchange takes the current one when its request begins and keeps it to the end, so
/// a request finishes under the configuration it started with; a keep-alive connection
/// takes the new one at its next request, an HTTP/2 connection at its next stream.
public final class ListenerServing: @unchecked Sendable {
    // @unchecked Sendable: immutable; its pools and log are used on their loop only.
    /// Counts reloads: 1 for the configuration the gateway started with.
    public let generation: UInt64
    let configuration: ProxyConfiguration
    let routes: RouteTable
    /// `ProxyMetrics` request-table slot of each route (by route index).
    let routeSlots: [Int]
    let pools: [UpstreamPool]
    let policy: HeaderPolicy
    let authenticator: any RequestAuthenticator
    let accessLog: AccessLog?
    /// Request counters and latency timers (gateway listeners only).
    let metrics: ProxyMetrics?
    /// Spans and ids when `tracing:` is on (gateway listeners only).
    let tracer: Tracer?
    /// `tracing:`'s per-request settings, copied out so a request copies no settings struct.
    let traceAccept: TracingSettings.ParentPolicy
    let traceSampleRatio: Double
    let traceQueueLimit: Int
    let trustedProxies: [CIDR]
    /// The listener terminates TLS with this (nil: plain TCP); taken by each new connection.
    let tls: TLSServerEndpoint?
    /// `redirect_https`: every request is answered 308 to the same target over https.
    let redirectsToHTTPS: Bool
    /// HTTP/2 on this listener (nil: HTTP/1.x only): after ALPN `h2` on TLS, or with
    /// prior knowledge on a plain listener when `h2c` is set.
    let http2: HTTP2Settings?
    /// A plain listener that also takes HTTP/2 with prior knowledge (the client preface).
    let h2c: Bool
    /// Warnings about clients (HTTP/2 abuse); nil in tests that do not care.
    let logger: Logger?
    /// Served at its path before routing (gateway listeners only).
    let published: (any PublishedDocument)?
    /// `published`'s path length, checked first so other requests pay one comparison.
    let publishedPathLength: Int

    init(generation: UInt64, configuration: ProxyConfiguration, routes: RouteTable, routeSlots: [Int]? = nil,
         pools: [UpstreamPool], authenticator: any RequestAuthenticator, accessLog: AccessLog?,
         metrics: ProxyMetrics?, tls: TLSServerEndpoint?, redirectsToHTTPS: Bool,
         published: (any PublishedDocument)?, http2: HTTP2Settings?, h2c: Bool, logger: Logger?, tracer: Tracer? = nil) {
        self.tracer = configuration.tracing == nil ? nil : tracer
        traceAccept = configuration.tracing?.acceptParent ?? .never
        traceSampleRatio = configuration.tracing?.sampleRatio ?? 0
        traceQueueLimit = configuration.tracing?.maxQueuedSpans ?? 0
        self.generation = generation
        self.configuration = configuration
        self.routes = routes
        self.routeSlots = routeSlots ?? configuration.routes.indices.map { $0 + 1 }
        self.pools = pools
        self.policy = HeaderPolicy(configuration: configuration)
        self.authenticator = authenticator
        self.accessLog = accessLog
        self.metrics = metrics
        self.trustedProxies = configuration.trustedProxies
        self.tls = tls
        self.redirectsToHTTPS = redirectsToHTTPS
        self.published = published
        self.publishedPathLength = published?.path.utf8.count ?? -1
        self.http2 = http2
        self.h2c = http2 != nil && h2c && tls == nil
        self.logger = logger
    }

    func isTrusted(_ peer: SocketAddress) -> Bool {
        guard !trustedProxies.isEmpty else { return false }
        let bytes = peer.addressBytes
        return trustedProxies.contains { $0.contains(bytes) }
    }
}

/// Per-loop, per-listener state that outlives reloads: the loop, the mode, the counts of
/// open connections and requests, the drain flag, and what the listener serves now
/// (`serving`). Confined to `loop.queue`.
public final class ListenerContext: @unchecked Sendable {
    // @unchecked Sendable: mutable members (`serving`, `openConnections`, `requestCounter`,
    // `draining`) are touched only on `loop.queue`.
    public let loop: EventLoop
    public let mode: ListenerMode
    /// The current generation's settings; swapped on `loop.queue` by a reload.
    var serving: ListenerServing
    /// Open HTTP/2 connections, told to send GOAWAY when the server drains.
    var http2Connections: [ObjectIdentifier: HTTP2ServerConnection] = [:]
    /// Open HTTP/1.1 connections turned into tunnels (WebSockets), closed with 1001 when
    /// the server drains.
    var tunnels: [ObjectIdentifier: HTTP1ServerConnection] = [:]
    /// Open client connections on this loop for this listener. Written on `loop.queue`
    /// only; other loops read it (relaxed) to balance accepted connections.
    public internal(set) var openConnections: Int {
        get { openCount.load(ordering: .relaxed) }
        set { openCount.store(newValue, ordering: .relaxed) }
    }
    private let openCount = Atomic<Int>(0)
    /// Connections another loop accepted and handed to this one, not yet taken.
    let incoming = Atomic<Int>(0)
    /// What the balancer compares: open connections plus those on their way.
    var load: Int { openConnections + incoming.load(ordering: .relaxed) }
    /// Connections on this loop whose TLS handshake has not completed yet.
    var handshaking = 0
    /// Client TLS handshakes on this loop that did not complete, by `TLSHandshakeFailure.rawValue`.
    var handshakeFailures = [Int](repeating: 0, count: TLSHandshakeFailure.allCases.count)
    /// Requests in flight (for graceful shutdown).
    public internal(set) var activeRequests = 0
    /// True once shutdown began (or a reload removed the listener): keep-alive is turned
    /// off on the next response.
    public internal(set) var draining = false
    private var requestCounter: UInt64 = 0
    private let requestIdPrefix: String

    init(loop: EventLoop, mode: ListenerMode, serving: ListenerServing) {
        self.loop = loop
        self.mode = mode
        self.serving = serving
        var random = SystemRandomNumberGenerator()
        let prefix = String(random.next() as UInt64, radix: 16)
        requestIdPrefix = String(repeating: "0", count: 16 - prefix.count) + prefix
    }

    convenience init(loop: EventLoop, mode: ListenerMode, configuration: ProxyConfiguration, routes: RouteTable,
                     pools: [UpstreamPool], authenticator: any RequestAuthenticator, accessLog: AccessLog?,
                     metrics: ProxyMetrics? = nil, tls: TLSServerEndpoint? = nil, redirectsToHTTPS: Bool = false,
                     published: (any PublishedDocument)? = nil, http2: HTTP2Settings? = nil, h2c: Bool = false,
                     logger: Logger? = nil) {
        self.init(loop: loop, mode: mode, serving: ListenerServing(
            generation: 1, configuration: configuration, routes: routes, pools: pools, authenticator: authenticator,
            accessLog: accessLog, metrics: metrics, tls: tls, redirectsToHTTPS: redirectsToHTTPS, published: published,
            http2: http2, h2c: h2c, logger: logger))
    }

    /// Shutdown began: responses stop keeping connections alive, HTTP/2 connections get GOAWAY,
    /// WebSockets a Close with 1001.
    func beginDraining() {
        draining = true
        for connection in Array(http2Connections.values) { connection.drain() }
        for connection in Array(tunnels.values) { connection.goAway() }
    }

    /// A unique request id: a random per-loop prefix and a counter, 32 hex digits.
    func nextRequestId(into buffer: inout ByteBuffer) {
        requestCounter &+= 1
        buffer.append(requestIdPrefix)
        var hex: (UInt64, UInt64) = (0, 0)
        withUnsafeMutableBytes(of: &hex) { scratch in
            var v = requestCounter ^ (UInt64(loop.index) << 56)
            for i in stride(from: 15, through: 0, by: -1) {
                let d = Int(v & 0xF)
                scratch[i] = UInt8(d < 10 ? 48 + d : 87 + d)
                v >>= 4
            }
            buffer.append(UnsafeRawBufferPointer(rebasing: scratch[0..<16]))
        }
    }

    /// Takes a connection another loop accepted (see `ProxyServer.balancedHandOff`).
    func acceptHandedOff(_ fd: Int32, peer: SocketAddress) {
        incoming.subtract(1, ordering: .relaxed)
        accept(StreamSocket(fd: fd, loop: loop), peer: peer)
    }

    /// Takes ownership of an accepted socket.
    public func accept(_ socket: StreamSocket, peer: SocketAddress) {
        if let tls = serving.tls, TLSSession.secureServer(socket, context: tls.context) == nil {
            socket.close()  // out of memory in OpenSSL: refuse this one connection
            return
        }
        let connection = HTTP1ServerConnection(context: self, socket: socket, peer: peer)
        openConnections += 1
        connection.start()
    }
}
