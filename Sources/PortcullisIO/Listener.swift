import Dispatch
#if canImport(Glibc)
import Glibc
#endif

/// A listening TCP socket on one event loop. Several listeners (one per loop) bind
/// the same address with `SO_REUSEPORT`, so the kernel spreads new connections across
/// loops and an accepted socket never hops queues.
public final class Listener: @unchecked Sendable {
    // @unchecked Sendable: `source` and `onAccept` are used only on `loop.queue`;
    // `stop()` hops there.
    public let address: SocketAddress
    public unowned let loop: EventLoop
    private let fd: Int32
    private var source: DispatchSourceRead?

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
    public func start(_ onAccept: @escaping (StreamSocket, SocketAddress) -> Void) {
        let source = DispatchSource.makeReadSource(fileDescriptor: fd, queue: loop.queue)
        let loop = self.loop
        let fd = self.fd
        source.setEventHandler {
            // Bounded so one busy listener cannot starve the loop's connections.
            for _ in 0..<64 {
                guard let (client, peer) = System.accept(fd) else { return }
                System.setOption(client, Int32(IPPROTO_TCP), TCP_NODELAY, 1)
                onAccept(StreamSocket(fd: client, loop: loop), peer)
            }
        }
        source.setCancelHandler { System.close(fd) }
        self.source = source
        source.resume()
    }

    /// Stops accepting and closes the listening socket. On the loop's queue.
    public func stop() {
        if let source { source.cancel() } else { System.close(fd) }
        source = nil
    }
}
