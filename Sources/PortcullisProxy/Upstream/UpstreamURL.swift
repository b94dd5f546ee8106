import PortcullisIO

/// Where an upstream app is: `http://` or `https://`, a host (IP literal,
/// `localhost` or a DNS name) and a port; no path (routes rewrite paths).
public struct UpstreamURL: Sendable, Equatable, CustomStringConvertible {
    public var secure: Bool
    /// Lowercased; an IPv6 literal without brackets.
    public var host: String
    public var port: UInt16
    /// The fixed address of an IP literal; nil for a name (resolved at run time).
    public var literal: SocketAddress?

    public struct ParseError: Error, CustomStringConvertible, Sendable {
        public var description: String
    }

    public init(parsing url: String) throws(ParseError) {
        let lower = url.lowercased()
        if lower.hasPrefix("https://") { secure = true } else if lower.hasPrefix("http://") { secure = false } else {
            throw ParseError(description: "expected http://HOST[:PORT] or https://HOST[:PORT], got '\(url)'")
        }
        var authority = Substring(url.dropFirst(secure ? 8 : 7))
        if let slash = authority.firstIndex(of: "/") {
            guard authority[slash...] == "/" else {
                throw ParseError(description: "upstream URLs take no path (use strip_prefix on routes); got '\(url)'")
            }
            authority = authority[..<slash]
        }
        guard !authority.contains("@"), !authority.contains("?"), !authority.contains("#") else {
            throw ParseError(description: "upstream URLs take no user, query or fragment; got '\(url)'")
        }
        var hostPart = authority
        var portText: Substring?
        if authority.hasPrefix("[") {
            guard let close = authority.firstIndex(of: "]") else { throw ParseError(description: "unterminated IPv6 literal in '\(url)'") }
            hostPart = authority[authority.index(after: authority.startIndex)..<close]
            let rest = authority[authority.index(after: close)...]
            if !rest.isEmpty {
                guard rest.hasPrefix(":") else { throw ParseError(description: "unexpected '\(rest)' after the IPv6 literal in '\(url)'") }
                portText = rest.dropFirst()
            }
        } else if let colon = authority.lastIndex(of: ":") {
            hostPart = authority[..<colon]
            portText = authority[authority.index(after: colon)...]
        }
        if let portText {
            guard let p = UInt16(portText), p > 0 else { throw ParseError(description: "invalid port '\(portText)' in '\(url)'") }
            port = p
        } else {
            port = secure ? 443 : 80
        }
        host = hostPart.lowercased()
        guard !host.isEmpty else { throw ParseError(description: "no host in '\(url)'") }
        // Only IP literals are fixed; every name (`localhost` too) goes through the resolver.
        if let address = try? SocketAddress(parsing: host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)") {
            literal = address
        } else {
            literal = nil
            let allowed = host.utf8.allSatisfy { ($0 >= 0x61 && $0 <= 0x7A) || ($0 >= 0x30 && $0 <= 0x39) || $0 == 0x2D || $0 == 0x2E }
            guard allowed, !host.hasPrefix("."), !host.hasPrefix("-"), !host.contains("..") else {
                throw ParseError(description: "'\(hostPart)' is not an IP address or a DNS name")
            }
        }
    }

    /// An upstream at a fixed address over plain HTTP (tests, the demo).
    public init(address: SocketAddress) {
        secure = false
        host = address.host
        port = address.port
        literal = address
    }

    /// `host[:port]`, the port left out when it is the scheme's default: the `Host`
    /// an app behind `host_header: upstream` expects, and the assertion audience.
    public var authority: String {
        let h = host.contains(":") ? "[\(host)]" : host
        return port == (secure ? 443 : 80) ? h : "\(h):\(port)"
    }

    /// `https://rvu-tracker.vercel.app`, `http://127.0.0.1:3001`.
    public var origin: String { "\(secure ? "https" : "http")://\(authority)" }

    public var description: String { origin }
}
