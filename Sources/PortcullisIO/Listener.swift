import Dispatch
#if canImport(Glibc)
import Glibc
#endif

/// A listening TCP socket on one event loop. Several listeners (one per loop) bind
/// the same address with `SO_REUSEPORT`, so the kernel spreads new connections across
/// loops and an accepted socket never hops queues.
public final class Listener: @unchecked Sendable {
    // @unchecked Sendable: `socket` and `onAccept` are used only on `loop.queue`;
    // `stop()` hops there.
    public let address: SocketAddress
    public unowned let loop: EventLoop
    private let fd: Int32
    /// The listening descriptor as the loop's poller sees it (owns `fd` once started).
    private var socket: StreamSocket?
    private var closed = false

    public init(address: SocketAddress, loop: EventLoop, backlog: Int32 = 1024) throws(IOError) {
        self.address = address
        self.loop = loop
        fd = try System.tcpSocket(family: address.family)
        System.setOption(fd, SOL_SOCKET, SO_REUSEADDR, 1)
        System.setOption(fd, SOL_SOCKET, SO_REUSEPORT, 1)
        if address.family == AF_INET6 { System.setOption(fd, Int32(IPPROTO_IPV6), IPV6_V6ONLY, 1) }
        let rc = address.withSockAddr { Glibc.bind(fd, $0, $1) }
        if rc != 0 { let e = errno; System.close(fd); throw IOError("bind", errno: e) }
        if Glibc.listen(fd, backlog) != 0 { let e = errno; System.close(fd); throw IOError("listen", errno: e) }
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

    /// Starts accepting; `onAccept` runs on the loop's queue for each new socket.
    ///
    /// The listening descriptor sits in the loop's own edge-triggered poller, like
    /// every connection (a `StreamSocket` used only for its readiness), not behind a
    /// `DispatchSourceRead`: libdispatch re-arms its sources one-shot through its
    /// manager thread (an `epoll_ctl`, an eventfd write and a thread wake-up per
    /// accept), which under a handshake load cost more CPU than the accepts.
    public func start(_ onAccept: @escaping (StreamSocket, SocketAddress) -> Void) {
        loop.assertInLoop()
        let socket = StreamSocket(fd: fd, loop: loop)
        let loop = self.loop
        let fd = self.fd
        socket.startReading { [unowned socket] in
            // Bounded so one busy listener cannot starve the loop's connections; what
            // is left is accepted at the end of the pass.
            for _ in 0..<64 {
                guard let (client, peer) = System.accept(fd) else {
                    socket.markReadDrained()  // EAGAIN (or EMFILE: retried on the next edge)
                    return
                }
                System.setOption(client, Int32(IPPROTO_TCP), TCP_NODELAY, 1)
                onAccept(StreamSocket(fd: client, loop: loop), peer)
            }
            socket.runAgainSoon()
        }
        self.socket = socket
    }

    /// Stops accepting and closes the listening socket. On the loop's queue.
    public func stop() {
        if let socket { socket.close() } else if !closed { System.close(fd) }
        socket = nil
        closed = true
    }
}
