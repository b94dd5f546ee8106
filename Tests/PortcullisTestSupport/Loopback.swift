import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// Ports on 127.0.0.1 for the processes tests start, and waiting for them to listen.
public enum Loopback {
    /// A port on 127.0.0.1 that nothing listens on, never handed out twice in this process.
    ///
    /// Ports come from below the kernel's ephemeral range (`ip_local_port_range`), so neither
    /// a client's outgoing connection nor another `freePort()` can take one between this call
    /// and the listener that binds it; a port the kernel had just handed back for port 0 could
    /// be handed back again (two listeners of one test once got the same port). Each process
    /// starts at its own offset, so test processes that run side by side rarely meet.
    public static func freePort() -> UInt16 {
        allocator.withLock { state in
            let (low, high) = state.range
            let span = Int(high - low)
            for _ in 0..<span {
                let port = low + UInt16(state.next % span)
                state.next += 1
                if bindError(port: port, reusePort: false) == 0 { return port }
            }
            fatalError("no free port on 127.0.0.1 in \(low)..<\(high)")
        }
    }

    private struct Allocator {
        let range: (UInt16, UInt16)
        var next: Int
    }

    private static let allocator: Mutex<Allocator> = {
        // Below the ephemeral range (Linux default 32768-60999), above the well-known ports.
        var ephemeralLow: UInt16 = 32768
        if let text = try? String(contentsOfFile: "/proc/sys/net/ipv4/ip_local_port_range", encoding: .utf8),
           let first = text.split(whereSeparator: { $0 == " " || $0 == "\t" || $0 == "\n" }).first,
           let value = UInt16(first), value > 12000 {
            ephemeralLow = value
        }
        let range: (UInt16, UInt16) = (10000, ephemeralLow)
        let offset = Int(getpid()) &* 7919 % Int(range.1 - range.0)
        return Mutex(Allocator(range: range, next: offset))
    }()

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
