import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Ports on 127.0.0.1 for the processes tests start, and waiting for them to listen.
public enum Loopback {
    /// A port that was free a moment ago (bound to port 0, then released).
    public static func freePort() -> UInt16 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var addr = address(port: 0)
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, len) } }
        _ = withUnsafeMutablePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &len) } }
        return UInt16(bigEndian: addr.sin_port)
    }

    /// A connected blocking TCP socket to 127.0.0.1:`port`, or nil (the caller closes it).
    public static func connect(port: UInt16) -> Int32? {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return nil }
        var addr = address(port: port)
        let rc = withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        if rc != 0 { close(fd); return nil }
        return fd
    }

    /// errno of binding and listening on 127.0.0.1:`port` with SO_REUSEADDR (and
    /// SO_REUSEPORT when asked), 0 when it worked; the socket is closed again.
    public static func bindError(port: UInt16, reusePort: Bool) -> Int32 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var one: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        if reusePort { setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, socklen_t(MemoryLayout<Int32>.size)) }
        var addr = address(port: port)
        let rc = withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        if rc != 0 { return errno }
        return listen(fd, 1) == 0 ? 0 : errno
    }

    /// True once something accepts connections on `port`, false after `timeout` seconds.
    public static func waitForPort(_ port: UInt16, timeout: Double = 10) -> Bool {
        let end = Date().addingTimeInterval(timeout)
        while Date() < end {
            if let fd = connect(port: port) { close(fd); return true }
            usleep(20_000)
        }
        return false
    }

    private static func address(port: UInt16) -> sockaddr_in {
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        addr.sin_port = port.bigEndian
        return addr
    }
}
