import Dispatch
#if canImport(Glibc)
import Glibc
#endif

/// A listening TCP socket on one event loop. The listeners of one address (one per
/// loop) share one socket, each through its own descriptor (`init(sharing:loop:)`), and
/// each loop's poller watches it with `EPOLLEXCLUSIVE`: a new connection wakes one
/// waiting loop, so it is taken by a loop that is free, as nginx's workers share their
/// listening sockets.
///
/// Why not one `SO_REUSEPORT` socket per loop (the first design): the kernel then picks
/// the loop by a hash of the addresses, whether or not that loop is busy. Under full TLS
/// handshakes (4 `s_time` clients, each connection ~0.7 ms of the loop's CPU) connections
/// queued behind a handshake on one loop while the other loop slept: 63 µs of idle
/// machine per handshake against nginx's 10, and 0.91× nginx's handshakes per second
/// (see `Benchmarks/load/tls.sh`). A loop that ends up with more connections than
/// another hands them over (`ProxyServer.balancedHandOff`). Without `SO_REUSEPORT` an
/// address another process listens on is refused at start (`EADDRINUSE`), not shared.
public final class Listener: @unchecked Sendable {
    // @unchecked Sendable: `socket` and `onAccept` are used only on `loop.queue`;
    // `stop()` hops there.
    public let address: SocketAddress
    public let loop: EventLoop
    private let fd: Int32
    /// The listening descriptor as the loop's poller sees it (owns `fd` once started).
    private var socket: StreamSocket?
    private var closed = false

    public init(address: SocketAddress, loop: EventLoop, backlog: Int32 = 1024) throws(IOError) {
        self.address = address
        self.loop = loop
        fd = try System.tcpSocket(family: address.family)
        System.setOption(fd, SOL_SOCKET, SO_REUSEADDR, 1)
        if address.family == AF_INET6 { System.setOption(fd, Int32(IPPROTO_IPV6), IPV6_V6ONLY, 1) }
        let rc = address.withSockAddr { Glibc.bind(fd, $0, $1) }
        if rc != 0 { let e = errno; System.close(fd); throw IOError("bind", errno: e) }
        if Glibc.listen(fd, backlog) != 0 { let e = errno; System.close(fd); throw IOError("listen", errno: e) }
    }

    /// A listener on `loop` for the socket `first` listens on (a duplicate descriptor of
    /// it, so each listener closes its own).
    public init(sharing first: Listener, loop: EventLoop) throws(IOError) {
        address = first.address
        self.loop = loop
        fd = try System.duplicate(first.fd)
    }

    /// The port actually bound (useful with port 0).
    public var boundPort: UInt16 {
        var storage = sockaddr_storage()
        var len = socklen_t(MemoryLayout<sockaddr_storage>.size)
        _ = withUnsafeMutablePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &len) }
        }
        return SocketAddress(storage: storage).port
    }

    /// How long a listener that ran out of descriptors (or memory) waits before it
    /// tries `accept` again; the connection waits in the kernel's queue meanwhile
    /// (nginx waits 500 ms; a shorter pause serves a transient peak sooner).
    public static let backOffMilliseconds = 100

    /// Starts accepting; `onAccept` runs on the loop's queue for each new socket.
    /// `onFailure` runs (on the loop's queue) when accepting starts failing, with the
    /// reason, and with nil when a connection is accepted again: once per change.
    ///
    /// The listening descriptor sits in the loop's own poller, like every connection
    /// (a `StreamSocket` used only for its readiness), not behind a `DispatchSourceRead`:
    /// libdispatch re-arms its sources one-shot through its manager thread (an
    /// `epoll_ctl`, an eventfd write and a thread wake-up per accept), which under a
    /// handshake load cost more CPU than the accepts.
    ///
    /// It is level-triggered and accepts one connection per report, as nginx does: an
    /// edge-triggered listener must call `accept` until `EAGAIN`, a second system call
    /// for every wake-up that finds one connection (1.85 `accept4` per connection under
    /// the resumed-handshake row against nginx's 1.1). A burst is still taken at once:
    /// the loop polls again after each pass, and each poll reports the listener anew.
    /// Out of descriptors (`EMFILE`), the poller's reports are turned off for
    /// `backOffMilliseconds` rather than spinning, and the connections stay queued.
    ///
    /// `handOff`, when given, sees each accepted descriptor first and may take it (true):
    /// the server hands it to a less loaded loop (see `ProxyServer`).
    public func start(_ onAccept: @escaping (StreamSocket, SocketAddress) -> Void,
                      handOff: ((Int32, SocketAddress) -> Bool)? = nil,
                      onFailure: ((IOError?) -> Void)? = nil) {
        loop.assertInLoop()
        let socket = StreamSocket(listening: fd, loop: loop)
        let loop = self.loop
        let fd = self.fd
        // Whether accepting is failing (for want of descriptors or memory): only this
        // handler reads and writes it, so it lives in the closure, not on `self`.
        var failing = false
        socket.startReading { [weak socket] in
            guard let socket else { return }
            socket.markReadDrained()
            switch System.accept(fd) {
            case .connection(let client, let peer):
                if failing {
                    failing = false
                    onFailure?(nil)
                }
                System.setOption(client, Int32(IPPROTO_TCP), TCP_NODELAY, 1)
                if let handOff, handOff(client, peer) { return }
                onAccept(StreamSocket(fd: client, loop: loop), peer)
            case .none:
                break
            case .failed(let error):
                if !failing {
                    failing = true
                    onFailure?(error)
                }
                // Stop the reports rather than spin; `setListening` does nothing once closed.
                guard socket.setListening(false) == nil else { return }
                loop.queue.asyncAfter(deadline: .now() + .milliseconds(Self.backOffMilliseconds)) { [weak socket] in
                    socket?.setListening(true)
                }
            }
        }
        self.socket = socket
    }

    /// Stops accepting and closes the listening socket. On the loop's queue.
    public func stop() {
        // The socket lives on in the other loops' descriptors, and epoll forgets an entry
        // only when the socket itself closes: remove it from this loop's poller first.
        if let socket { socket.setListening(false); socket.close() } else if !closed { System.close(fd) }
        socket = nil
        closed = true
    }
}
