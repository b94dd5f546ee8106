#if canImport(Glibc)
import Glibc
#endif

/// Starts non-blocking TCP connects. The caller waits for writability on the
/// returned socket and then calls `finishConnect`.
public enum Connector {
    public enum Start {
        case connected(StreamSocket)
        case inProgress(StreamSocket)
        case failed(IOError)
    }

    public static func start(to address: SocketAddress, on loop: EventLoop) -> Start {
        let fd: Int32
        do { fd = try System.tcpSocket(family: address.family) } catch { return .failed(error) }
        System.setOption(fd, Int32(IPPROTO_TCP), TCP_NODELAY, 1)
        let rc = address.withSockAddr { Glibc.connect(fd, $0, $1) }
        let socket = StreamSocket(fd: fd, loop: loop)
        if rc == 0 { return .connected(socket) }
        let e = errno
        if e == EINPROGRESS || e == EINTR { return .inProgress(socket) }
        socket.close()
        return .failed(IOError("connect", errno: e))
    }

    /// nil when connected, else the connect error.
    public static func finishConnect(_ socket: StreamSocket) -> IOError? {
        let e = System.socketError(socket.fd)
        return e == 0 ? nil : IOError("connect", errno: e)
    }
}
