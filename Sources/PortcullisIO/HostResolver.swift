import Dispatch
#if canImport(Glibc)
import Glibc
#endif

/// Why a host name gave no address.
public struct ResolutionError: Error, CustomStringConvertible, Sendable, Equatable {
    public var host: String
    public var reason: String
    public var description: String { "cannot resolve \(host): \(reason)" }
}

/// Turns a host into socket addresses, for every outbound client (upstreams, key
/// hosts, Redis). IP literals and `localhost` are answered inline; other names go
/// through getaddrinfo, which blocks, so it runs on its own queue and never on an
/// event loop's.
public enum HostResolver {
    /// getaddrinfo calls run here (concurrent: one slow name must not hold up another).
    private static let queue = DispatchQueue(label: "portcullis.resolver", attributes: .concurrent)

    /// Addresses for `host`, or nil when a name lookup is needed.
    public static func literal(_ host: String, port: UInt16) -> [SocketAddress]? {
        if host == "localhost" {
            return (try? SocketAddress(parsing: "127.0.0.1:\(port)")).map { [$0] }
        }
        let text = host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)"
        if let address = try? SocketAddress(parsing: text) { return [address] }
        return nil
    }

    /// Resolves `host` off the loop; `completion` runs on the resolver queue.
    public static func resolve(_ host: String, port: UInt16,
                               completion: @escaping @Sendable (Result<[SocketAddress], ResolutionError>) -> Void) {
        queue.async { completion(lookup(host, port: port)) }
    }

    private static func text(_ buffer: [CChar]) -> String {
        String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// A blocking lookup: only from the resolver queue or before the loops start.
    public static func lookup(_ host: String, port: UInt16) -> Result<[SocketAddress], ResolutionError> {
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        hints.ai_flags = AI_ADDRCONFIG
        var list: UnsafeMutablePointer<addrinfo>?
        let rc = getaddrinfo(host, nil, &hints, &list)
        guard rc == 0 else { return .failure(ResolutionError(host: host, reason: String(validatingCString: gai_strerror(rc)) ?? "error \(rc)")) }
        defer { freeaddrinfo(list) }
        var addresses = [SocketAddress]()
        var entry = list
        while let info = entry {
            var buffer = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN))
            let family = info.pointee.ai_family
            if let sa = info.pointee.ai_addr {
                var text: String?
                if family == AF_INET {
                    var a = UnsafeRawPointer(sa).load(as: sockaddr_in.self).sin_addr
                    if inet_ntop(AF_INET, &a, &buffer, socklen_t(buffer.count)) != nil { text = "\(Self.text(buffer)):\(port)" }
                } else if family == AF_INET6 {
                    var a = UnsafeRawPointer(sa).load(as: sockaddr_in6.self).sin6_addr
                    if inet_ntop(AF_INET6, &a, &buffer, socklen_t(buffer.count)) != nil { text = "[\(Self.text(buffer))]:\(port)" }
                }
                if let text, let address = try? SocketAddress(parsing: text), !addresses.contains(address) {
                    addresses.append(address)
                }
            }
            entry = info.pointee.ai_next
        }
        return addresses.isEmpty ? .failure(ResolutionError(host: host, reason: "no IPv4 or IPv6 address")) : .success(addresses)
    }
}
