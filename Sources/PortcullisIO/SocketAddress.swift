#if canImport(Glibc)
import Glibc
#endif

/// An IPv4 or IPv6 socket address, parsed from "127.0.0.1:8080" or "[::1]:8080".
public struct SocketAddress: Sendable, CustomStringConvertible, Equatable {
    public enum ParseError: Error, CustomStringConvertible, Sendable {
        case invalid(String)
        public var description: String {
            switch self { case .invalid(let text): return "'\(text)' is not host:port with a numeric IPv4 or [IPv6] host" }
        }
    }

    var storage: sockaddr_storage

    init(storage: sockaddr_storage) { self.storage = storage }

    public static func == (a: SocketAddress, b: SocketAddress) -> Bool { a.description == b.description }

    public init(parsing text: String) throws(ParseError) {
        var host: Substring
        var portText: Substring
        if text.hasPrefix("[") {
            guard let close = text.firstIndex(of: "]"),
                  text[text.index(after: close)...].hasPrefix(":") else { throw .invalid(text) }
            host = text[text.index(after: text.startIndex)..<close]
            portText = text[text.index(close, offsetBy: 2)...]
        } else {
            guard let colon = text.lastIndex(of: ":") else { throw .invalid(text) }
            host = text[..<colon]
            portText = text[text.index(after: colon)...]
        }
        if host == "localhost" { host = "127.0.0.1" }
        guard let port = UInt16(portText) else { throw .invalid(text) }
        var storage = sockaddr_storage()
        if host.contains(":") {
            var addr = sockaddr_in6()
            addr.sin6_family = sa_family_t(AF_INET6)
            addr.sin6_port = port.bigEndian
            guard inet_pton(AF_INET6, String(host), &addr.sin6_addr) == 1 else { throw .invalid(text) }
            withUnsafeMutableBytes(of: &storage) { dst in withUnsafeBytes(of: addr) { dst.copyMemory(from: $0) } }
        } else {
            var addr = sockaddr_in()
            addr.sin_family = sa_family_t(AF_INET)
            addr.sin_port = port.bigEndian
            guard inet_pton(AF_INET, String(host), &addr.sin_addr) == 1 else { throw .invalid(text) }
            withUnsafeMutableBytes(of: &storage) { dst in withUnsafeBytes(of: addr) { dst.copyMemory(from: $0) } }
        }
        self.storage = storage
    }

    public var family: Int32 { Int32(storage.ss_family) }

    var length: socklen_t {
        socklen_t(family == AF_INET6 ? MemoryLayout<sockaddr_in6>.size : MemoryLayout<sockaddr_in>.size)
    }

    public var port: UInt16 {
        withUnsafeBytes(of: storage) { raw in
            family == AF_INET6
                ? UInt16(bigEndian: raw.load(as: sockaddr_in6.self).sin6_port)
                : UInt16(bigEndian: raw.load(as: sockaddr_in.self).sin_port)
        }
    }

    /// The address without the port, as text ("127.0.0.1", "::1").
    public var host: String {
        var buffer = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN))
        withUnsafeBytes(of: storage) { raw in
            if family == AF_INET6 {
                var a = raw.load(as: sockaddr_in6.self).sin6_addr
                _ = inet_ntop(AF_INET6, &a, &buffer, socklen_t(buffer.count))
            } else if family == AF_INET {
                var a = raw.load(as: sockaddr_in.self).sin_addr
                _ = inet_ntop(AF_INET, &a, &buffer, socklen_t(buffer.count))
            }
        }
        return String(cString: buffer)
    }

    /// Raw address bytes (4 or 16) for CIDR matching.
    public var addressBytes: [UInt8] {
        withUnsafeBytes(of: storage) { raw in
            if family == AF_INET6 {
                let a = raw.load(as: sockaddr_in6.self).sin6_addr
                return withUnsafeBytes(of: a) { Array($0) }
            }
            let a = raw.load(as: sockaddr_in.self).sin_addr
            return withUnsafeBytes(of: a) { Array($0) }
        }
    }

    public var description: String { family == AF_INET6 ? "[\(host)]:\(port)" : "\(host):\(port)" }

    public func withSockAddr<R>(_ body: (UnsafePointer<sockaddr>, socklen_t) -> R) -> R {
        withUnsafeBytes(of: storage) { raw in
            body(raw.baseAddress!.assumingMemoryBound(to: sockaddr.self), length)
        }
    }
}
