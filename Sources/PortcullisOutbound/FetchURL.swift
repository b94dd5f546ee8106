/// An absolute `http://` or `https://` URL split into what a GET needs.
///
/// Accepted: `scheme://host[:port][/path][?query]`, where `host` is a DNS name,
/// an IPv4 literal or a bracketed IPv6 literal. User information is refused
/// (credentials do not belong in a key URL); a fragment is dropped.
public struct FetchURL: Sendable, Equatable, CustomStringConvertible {
    public enum Scheme: String, Sendable { case http, https }

    public var scheme: Scheme
    /// The host without brackets ("127.0.0.1", "::1", "www.googleapis.com").
    public var host: String
    public var port: UInt16
    /// Path and query as sent in the request line; at least "/".
    public var pathAndQuery: String

    public init(parsing text: String) throws(HTTPFetchError) {
        let scheme: Scheme
        let rest: Substring
        if text.lowercased().hasPrefix("http://") {
            scheme = .http; rest = text.dropFirst(7)
        } else if text.lowercased().hasPrefix("https://") {
            scheme = .https; rest = text.dropFirst(8)
        } else {
            throw .invalidURL(text, reason: "only http:// and https:// URLs are supported")
        }
        var withoutFragment = rest
        if let hash = withoutFragment.firstIndex(of: "#") { withoutFragment = withoutFragment[..<hash] }
        let authorityEnd = withoutFragment.firstIndex { $0 == "/" || $0 == "?" } ?? withoutFragment.endIndex
        let authority = withoutFragment[..<authorityEnd]
        var path = String(withoutFragment[authorityEnd...])
        if path.isEmpty || path.hasPrefix("?") { path = "/" + path }
        guard !authority.contains("@") else { throw .invalidURL(text, reason: "user information is not allowed") }

        var host: Substring
        var portText: Substring?
        if authority.hasPrefix("[") {
            guard let close = authority.firstIndex(of: "]") else { throw .invalidURL(text, reason: "unclosed IPv6 literal") }
            host = authority[authority.index(after: authority.startIndex)..<close]
            let after = authority[authority.index(after: close)...]
            if !after.isEmpty {
                guard after.hasPrefix(":") else { throw .invalidURL(text, reason: "junk after IPv6 literal") }
                portText = after.dropFirst()
            }
        } else if let colon = authority.lastIndex(of: ":") {
            host = authority[..<colon]
            portText = authority[authority.index(after: colon)...]
        } else {
            host = authority
        }
        guard !host.isEmpty else { throw .invalidURL(text, reason: "missing host") }
        guard host.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "." || $0 == "-" || $0 == ":" || $0 == "_") }) else {
            throw .invalidURL(text, reason: "invalid character in host")
        }
        var port: UInt16 = scheme == .http ? 80 : 443
        if let portText {
            guard let value = UInt16(portText), value != 0 else { throw .invalidURL(text, reason: "invalid port") }
            port = value
        }
        guard path.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else {
            throw .invalidURL(text, reason: "the path must be percent-encoded ASCII without spaces")
        }
        self.scheme = scheme
        self.host = host.lowercased()
        self.port = port
        self.pathAndQuery = path
    }

    /// Whether `host` is an IP literal (no name resolution needed).
    public var hostIsIPLiteral: Bool {
        host.contains(":") || host.split(separator: ".").count == 4 && host.allSatisfy { $0.isNumber || $0 == "." }
    }

    /// The `Host` header value: the port is omitted when it is the scheme's default.
    public var hostHeader: String {
        let name = host.contains(":") ? "[\(host)]" : host
        let defaultPort: UInt16 = scheme == .http ? 80 : 443
        return port == defaultPort ? name : "\(name):\(port)"
    }

    /// `host:port` always (a CONNECT target, an absolute-form request to a proxy).
    public var hostHeaderWithPort: String { "\(host.contains(":") ? "[\(host)]" : host):\(port)" }

    public var description: String { "\(scheme.rawValue)://\(hostHeader)\(pathAndQuery)" }
}
