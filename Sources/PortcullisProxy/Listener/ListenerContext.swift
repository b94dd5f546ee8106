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

/// Per-loop, per-listener state shared by that listener's connections: the route
/// table, this loop's upstream pools and the policies. Confined to `loop.queue`
/// (the immutable members are read from there only too).
public final class ListenerContext: @unchecked Sendable {
    // @unchecked Sendable: mutable members (`openConnections`, `requestCounter`,
    // `draining`) are touched only on `loop.queue`.
    public let loop: EventLoop
    public let mode: ListenerMode
    let configuration: ProxyConfiguration
    let routes: RouteTable
    let pools: [UpstreamPool]
    let policy: HeaderPolicy
    let authenticator: any RequestAuthenticator
    let accessLog: AccessLog?
    /// Request counters and latency timers (gateway listeners only).
    let metrics: ProxyMetrics?
    let trustedProxies: [CIDR]
    public let scheme: StaticString
    /// The listener terminates TLS with this (nil: plain TCP).
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
    /// Open HTTP/2 connections, told to send GOAWAY when the server drains.
    var http2Connections: [ObjectIdentifier: HTTP2ServerConnection] = [:]
    /// Served at its path before routing (gateway listeners only).
    let published: (any PublishedDocument)?
    /// `published`'s path length, checked first so other requests pay one comparison.
    let publishedPathLength: Int
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
    /// Requests in flight (for graceful shutdown).
    public internal(set) var activeRequests = 0
    /// True once shutdown began: keep-alive is turned off on the next response.
    public internal(set) var draining = false
    private var requestCounter: UInt64 = 0
    private let requestIdPrefix: String

    init(loop: EventLoop, mode: ListenerMode, configuration: ProxyConfiguration, routes: RouteTable,
         pools: [UpstreamPool], authenticator: any RequestAuthenticator, accessLog: AccessLog?,
         metrics: ProxyMetrics? = nil, tls: TLSServerEndpoint? = nil, redirectsToHTTPS: Bool = false,
         published: (any PublishedDocument)? = nil, http2: HTTP2Settings? = nil, h2c: Bool = false,
         logger: Logger? = nil) {
        self.published = published
        self.http2 = http2
        self.h2c = http2 != nil && h2c && tls == nil
        self.logger = logger
        self.publishedPathLength = published?.path.utf8.count ?? -1
        self.loop = loop
        self.mode = mode
        self.configuration = configuration
        self.routes = routes
        self.pools = pools
        self.policy = HeaderPolicy(configuration: configuration)
        self.authenticator = authenticator
        self.accessLog = accessLog
        self.metrics = metrics
        self.trustedProxies = configuration.trustedProxies
        self.tls = tls
        self.scheme = tls == nil ? "http" : "https"
        self.redirectsToHTTPS = redirectsToHTTPS
        var random = SystemRandomNumberGenerator()
        let prefix = String(random.next() as UInt64, radix: 16)
        requestIdPrefix = String(repeating: "0", count: 16 - prefix.count) + prefix
    }

    /// Shutdown began: responses stop keeping connections alive, HTTP/2 connections get GOAWAY.
    func beginDraining() {
        draining = true
        for connection in Array(http2Connections.values) { connection.drain() }
    }

    func isTrusted(_ peer: SocketAddress) -> Bool {
        guard !trustedProxies.isEmpty else { return false }
        let bytes = peer.addressBytes
        return trustedProxies.contains { $0.contains(bytes) }
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
        if let tls, TLSSession.secureServer(socket, context: tls.context) == nil {
            socket.close()  // out of memory in OpenSSL: refuse this one connection
            return
        }
        let connection = HTTP1ServerConnection(context: self, socket: socket, peer: peer)
        openConnections += 1
        connection.start()
    }
}
