import Foundation

/// The outbound proxy for key fetches and the session lookup hook, as curl and Go read it:
/// `HTTPS_PROXY` / `https_proxy` for `https://` URLs, `HTTP_PROXY` / `http_proxy` for `http://`
/// ones, `NO_PROXY` / `no_proxy` for the exceptions (`*`; a host and its subdomains, with or
/// without a leading dot; an IP; a CIDR; any of them with `:port`). As Go's net/http, a
/// loopback target (`localhost`, 127.0.0.0/8, ::1) is never proxied. An `https://` target goes
/// through a `CONNECT` tunnel (TLS end to end with the target); an `http://` one is asked of
/// the proxy in absolute form. The proxy itself is spoken to in plain HTTP (`http://`, with
/// `user:password@` sent as `Proxy-Authorization: Basic`).
public struct EgressProxy: Sendable, Equatable, CustomStringConvertible {
    public var host: String
    public var port: UInt16
    /// `Basic <base64(user:password)>`, when the proxy URL carries credentials.
    public var authorization: String?

    public var description: String { "\(host.contains(":") ? "[\(host)]" : host):\(port)" }

    /// The proxies of an environment.
    public struct Settings: Sendable, Equatable {
        public var http: EgressProxy?
        public var https: EgressProxy?
        public var noProxy: [String] = []

        public init(http: EgressProxy? = nil, https: EgressProxy? = nil, noProxy: [String] = []) {
            self.http = http
            self.https = https
            self.noProxy = noProxy
        }

        /// Read from `environment` (the process's by default); an unparsable proxy URL is
        /// ignored (curl's behaviour), which `check-config` cannot see: it is logged at use.
        public init(environment: [String: String]) {
            func value(_ name: String) -> String? {
                (environment[name] ?? environment[name.lowercased()]).flatMap { $0.isEmpty ? nil : $0 }
            }
            http = value("HTTP_PROXY").flatMap(EgressProxy.init(url:))
            https = value("HTTPS_PROXY").flatMap(EgressProxy.init(url:))
            noProxy = (value("NO_PROXY") ?? "").split(separator: ",")
                .map { $0.trimmingCharacters(in: .whitespaces).lowercased() }.filter { !$0.isEmpty }
        }

        /// The process's, read once.
        public static let process = Settings(environment: ProcessInfo.processInfo.environment)

        /// The proxy for `url`, or nil to go direct.
        public func proxy(for url: FetchURL) -> EgressProxy? {
            guard let proxy = url.scheme == .https ? https : http else { return nil }
            let host = url.host.lowercased()
            if host == "localhost" || host.hasSuffix(".localhost") || Self.isLoopback(host) { return nil }
            for entry in noProxy where Self.matches(entry, host: host, port: url.port) { return nil }
            return proxy
        }

        static func matches(_ entry: String, host: String, port: UInt16) -> Bool {
            if entry == "*" { return true }
            var name = Substring(entry)
            // host:port (an IPv6 literal only in brackets).
            if let colon = name.lastIndex(of: ":"), !name.hasSuffix("]"), name.filter({ $0 == ":" }).count == 1 || name.hasPrefix("[") {
                guard UInt16(name[name.index(after: colon)...]) == port else { return false }
                name = name[..<colon]
            }
            if name.hasPrefix("[") && name.hasSuffix("]") { name = name.dropFirst().dropLast() }
            if name.contains("/") { return CIDRMatch.contains(String(name), host) }
            if name.hasPrefix(".") { name = name.dropFirst() }
            return host == name || host.hasSuffix("." + name)
        }

        static func isLoopback(_ host: String) -> Bool {
            host == "::1" || host.hasPrefix("127.") && host.split(separator: ".").count == 4
        }
    }

    /// `http://[user:password@]host[:port][/]`; a bare `host:port` is read as `http://`.
    public init?(url text: String) {
        var rest = Substring(text)
        if rest.lowercased().hasPrefix("http://") { rest = rest.dropFirst(7) } else if rest.contains("://") { return nil }
        if let slash = rest.firstIndex(of: "/") { rest = rest[..<slash] }
        if let at = rest.lastIndex(of: "@") {
            let credentials = rest[..<at].removingPercentEncoding ?? String(rest[..<at])
            authorization = "Basic " + Data(credentials.utf8).base64EncodedString()
            rest = rest[rest.index(after: at)...]
        }
        var portText: Substring = "80"
        if rest.hasPrefix("["), let close = rest.firstIndex(of: "]") {
            host = String(rest[rest.index(after: rest.startIndex)..<close])
            let after = rest[rest.index(after: close)...]
            if after.hasPrefix(":") { portText = after.dropFirst() }
        } else if let colon = rest.lastIndex(of: ":") {
            host = String(rest[..<colon])
            portText = rest[rest.index(after: colon)...]
        } else {
            host = String(rest)
        }
        guard !host.isEmpty, let port = UInt16(portText), port > 0 else { return nil }
        self.port = port
    }

    public init(host: String, port: UInt16, authorization: String? = nil) {
        self.host = host
        self.port = port
        self.authorization = authorization
    }
}

/// `NO_PROXY`'s CIDR entries, IPv4 and IPv6 (a host name never matches one).
enum CIDRMatch {
    static func contains(_ cidr: String, _ host: String) -> Bool {
        let parts = cidr.split(separator: "/")
        guard parts.count == 2, let bits = Int(parts[1]), let network = bytes(String(parts[0])), let address = bytes(host),
              network.count == address.count, bits >= 0, bits <= network.count * 8 else { return false }
        for i in 0..<network.count {
            let remaining = bits - i * 8
            if remaining <= 0 { break }
            let mask: UInt8 = remaining >= 8 ? 0xFF : UInt8(truncatingIfNeeded: 0xFF << (8 - remaining))
            if network[i] & mask != address[i] & mask { return false }
        }
        return true
    }

    static func bytes(_ text: String) -> [UInt8]? {
        var v4 = in_addr()
        if inet_pton(AF_INET, text, &v4) == 1 { return withUnsafeBytes(of: &v4) { Array($0) } }
        var v6 = in6_addr()
        if inet_pton(AF_INET6, text, &v6) == 1 { return withUnsafeBytes(of: &v6) { Array($0) } }
        return nil
    }
}
