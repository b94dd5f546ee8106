#if canImport(Glibc)
import Glibc
#endif
import CPortcullisSystem

/// A failed system call: which call and its errno. Created only on real failures;
/// `EAGAIN` and `EINTR` never become an `IOError`.
public struct IOError: Error, CustomStringConvertible, Sendable {
    public var call: StaticString
    public var errno: Int32
    public init(_ call: StaticString, errno: Int32) { self.call = call; self.errno = errno }
    public var description: String { "\(call): \(String(cString: strerror(errno)))" }
}

/// The outcome of a non-blocking read or write.
public enum IOResult: Equatable, Sendable {
    /// This many bytes moved (always > 0).
    case bytes(Int)
    /// The kernel has no data or no room now; wait for the next event.
    case wouldBlock
    /// The peer closed its side (reads only).
    case endOfFile
    /// A hard error, with errno (ECONNRESET, EPIPE, …).
    case failed(Int32)
}

/// Every system call Portcullis makes, wrapped once: EINTR retried, EAGAIN a value.
public enum System {
    @inline(__always)
    public static func read(_ fd: Int32, into buffer: UnsafeMutableRawBufferPointer) -> IOResult {
        while true {
            let n = Glibc.read(fd, buffer.baseAddress, buffer.count)
            if n > 0 { return .bytes(n) }
            if n == 0 { return .endOfFile }
            let e = Glibc.errno
            if e == EINTR { continue }
            if e == EAGAIN || e == EWOULDBLOCK { return .wouldBlock }
            return .failed(e)
        }
    }

    @inline(__always)
    public static func write(_ fd: Int32, _ buffer: UnsafeRawBufferPointer) -> IOResult {
        while true {
            let n = Glibc.send(fd, buffer.baseAddress, buffer.count, Int32(MSG_NOSIGNAL))
            if n >= 0 { return n == 0 ? .wouldBlock : .bytes(n) }
            let e = Glibc.errno
            if e == EINTR { continue }
            if e == EAGAIN || e == EWOULDBLOCK { return .wouldBlock }
            return .failed(e)
        }
    }

    /// A new epoll instance (close-on-exec). Failing here means the process is out
    /// of descriptors at start-up, which nothing can recover from.
    static func makePoller() -> Int32 {
        let fd = portcullis_epoll_create()
        precondition(fd >= 0, "epoll_create1 failed: errno \(Glibc.errno)")
        return fd
    }

    /// Registers `fd` once with `poller`, edge-triggered for input and output.
    static func register(_ fd: Int32, with poller: Int32, token: UInt64) -> IOError? {
        portcullis_epoll_add(poller, fd, token) == 0 ? nil : IOError("epoll_ctl", errno: Glibc.errno)
    }

    /// Registers a listening `fd` once with `poller`, level-triggered for input only.
    static func registerListener(_ fd: Int32, with poller: Int32, token: UInt64) -> IOError? {
        portcullis_epoll_add_listener(poller, fd, token) == 0 ? nil : IOError("epoll_ctl", errno: Glibc.errno)
    }

    /// Turns a registered listener's reports on or off.
    static func setListening(_ fd: Int32, with poller: Int32, token: UInt64, _ on: Bool) -> IOError? {
        portcullis_epoll_listen(poller, fd, token, on ? 1 : 0) == 0 ? nil : IOError("epoll_ctl", errno: Glibc.errno)
    }

    /// Collects ready sockets, waiting up to `timeoutMilliseconds` (-1: until one is
    /// ready, 0: not at all); returns how many slots were filled.
    static func poll(_ poller: Int32, tokens: UnsafeMutablePointer<UInt64>,
                     ready: UnsafeMutablePointer<UInt32>, max: Int, timeoutMilliseconds: Int32 = 0) -> Int {
        let n = tokens.withMemoryRebound(to: UInt64.self, capacity: max) { t in
            portcullis_epoll_wait(poller, t, ready, Int32(max), timeoutMilliseconds)
        }
        return n > 0 ? Int(n) : 0
    }

    public static func close(_ fd: Int32) {
        _ = Glibc.close(fd)  // EINTR on close must not be retried on Linux.
    }

    public static func ignoreWriteSignals() { portcullis_ignore_write_signals() }

    /// Creates a non-blocking, close-on-exec TCP socket.
    public static func tcpSocket(family: Int32) throws(IOError) -> Int32 {
        let fd = Glibc.socket(family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        if fd < 0 { throw IOError("socket", errno: Glibc.errno) }
        return fd
    }

    /// A second, close-on-exec descriptor for the socket `fd` refers to.
    static func duplicate(_ fd: Int32) throws(IOError) -> Int32 {
        let copy = portcullis_duplicate(fd)
        if copy < 0 { throw IOError("fcntl(F_DUPFD_CLOEXEC)", errno: Glibc.errno) }
        return copy
    }

    public static func setOption(_ fd: Int32, _ level: Int32, _ name: Int32, _ value: Int32) {
        var v = value
        _ = setsockopt(fd, level, name, &v, socklen_t(MemoryLayout<Int32>.size))
    }

    /// Pending socket error after a non-blocking connect (0 when connected).
    public static func socketError(_ fd: Int32) -> Int32 {
        var err: Int32 = 0
        var len = socklen_t(MemoryLayout<Int32>.size)
        if getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 { return Glibc.errno }
        return err
    }

    /// Accepts one connection, non-blocking and close-on-exec. nil when none is pending.
    /// What one `accept` found.
    public enum Accepted {
        case connection(fd: Int32, peer: SocketAddress)
        /// No connection is queued (EAGAIN).
        case none
        /// The process or system is out of descriptors or memory (EMFILE, ENFILE, ENOBUFS,
        /// ENOMEM): the connection stays queued in the kernel.
        case failed(IOError)
    }

    public static func accept(_ fd: Int32) -> Accepted {
        var storage = sockaddr_storage()
        var len = socklen_t(MemoryLayout<sockaddr_storage>.size)
        while true {
            let client = withUnsafeMutablePointer(to: &storage) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    portcullis_accept_nonblocking(fd, $0, &len)
                }
            }
            if client >= 0 { return .connection(fd: client, peer: SocketAddress(storage: storage)) }
            let e = Glibc.errno
            if e == EINTR || e == ECONNABORTED || e == EPROTO { continue }
            if e == EAGAIN || e == EWOULDBLOCK { return .none }
            return .failed(IOError("accept", errno: e))
        }
    }
}
