import PortcullisIO

extension RedisConfiguration {
    /// Reads `redis://[user][:password]@host[:port][/db]`.
    ///
    /// - `host` is a numeric IPv4 address, `[IPv6]`, `localhost` (127.0.0.1), or a name
    ///   (a Kubernetes or Compose service), resolved off the event loops at each connect.
    /// - `port` defaults to 6379, `db` to 0.
    /// - user and password are percent-decoded; `redis://:secret@…` is the
    ///   `default` user, `redis://alice:secret@…` an ACL user.
    /// - `rediss://` is the same over TLS (verified against the system store unless
    ///   `tls.caFile` says otherwise; a name is also the name the certificate must carry).
    public init(url: String) throws(RedisError) {
        let secure = url.hasPrefix("rediss://")
        guard url.hasPrefix("redis://") || secure else {
            throw .invalidConfiguration("'\(Self.redacted(url))' does not start with redis:// or rediss://")
        }
        var rest = Substring(url.dropFirst(secure ? "rediss://".count : "redis://".count))
        var username: String?
        var password: String?
        if let at = rest.lastIndex(of: "@") {
            let userinfo = rest[..<at]
            rest = rest[rest.index(after: at)...]
            if let colon = userinfo.firstIndex(of: ":") {
                username = try Self.percentDecoded(userinfo[..<colon])
                password = try Self.percentDecoded(userinfo[userinfo.index(after: colon)...])
            } else {
                username = try Self.percentDecoded(userinfo)
            }
            if username?.isEmpty == true { username = nil }
        }
        var database = 0
        if let slash = rest.firstIndex(of: "/") {
            let dbText = rest[rest.index(after: slash)...]
            rest = rest[..<slash]
            if !dbText.isEmpty {
                guard let db = Int(dbText), db >= 0 else {
                    throw .invalidConfiguration("database '\(dbText)' in \(Self.redacted(url)) is not a number")
                }
                database = db
            }
        }
        var hostPort = String(rest)
        let hasPort = hostPort.hasPrefix("[") ? hostPort.contains("]:") : hostPort.contains(":")
        if !hasPort { hostPort += ":6379" }
        let topology: Topology
        if let address = try? SocketAddress(parsing: hostPort) {
            topology = .standalone(address)
        } else {
            // A name: DNS letters, digits, '-' and '.'.
            guard let colon = hostPort.lastIndex(of: ":"), let port = UInt16(hostPort[hostPort.index(after: colon)...]), port > 0 else {
                throw .invalidConfiguration("port in \(Self.redacted(url)) is not a number")
            }
            let host = hostPort[..<colon].lowercased()
            guard !host.isEmpty,
                  host.utf8.allSatisfy({ ($0 >= 0x61 && $0 <= 0x7A) || ($0 >= 0x30 && $0 <= 0x39) || $0 == 0x2D || $0 == 0x2E }) else {
                throw .invalidConfiguration("host '\(rest)' in \(Self.redacted(url)): a numeric address, localhost or a host name")
            }
            topology = host == "localhost" ? .standalone(try! SocketAddress(parsing: "127.0.0.1:\(port)")) : .standaloneHost(host, port: port)
        }
        if username != nil && password == nil {
            // "redis://secret@host" is read by most clients as a password.
            password = username
            username = nil
        }
        self.init(topology: topology, username: username, password: password, database: database)
        if secure { tls = TLS() }
    }

    /// `url` fit for a log line or an error message: any userinfo's password is `***`,
    /// whatever the scheme (a mistyped `http://user:secret@…` must not print the secret).
    /// The userinfo ends at the last `@`, as `init(url:)` reads it, so a password holding
    /// `/`, `%`, `@`, `?` or `#` is hidden whole.
    public static func redacted(_ url: String) -> String {
        guard let colon = url.firstIndex(of: ":"), url[colon...].hasPrefix("://") else {
            // Not a URL at all: everything before an '@' may be a credential.
            guard let at = url.lastIndex(of: "@") else { return url }
            return "***" + url[at...]
        }
        let start = url.index(colon, offsetBy: 3)
        guard let at = url[start...].lastIndex(of: "@") else { return url }
        let userinfo = url[start..<at]
        guard let colon = userinfo.firstIndex(of: ":") else { return url[..<start] + "***" + url[at...] }
        return url[..<start] + userinfo[..<colon] + ":***" + url[at...]
    }

    /// Percent-decodes user info; a `%` not followed by two hex digits is itself (a password
    /// such as `50%off` written without escaping still authenticates).
    private static func percentDecoded(_ text: Substring) throws(RedisError) -> String {
        guard text.contains("%") else { return String(text) }
        var bytes: [UInt8] = []
        var utf8 = Array(text.utf8)[...]
        while let b = utf8.popFirst() {
            if b == UInt8(ascii: "%"), utf8.count >= 2, utf8.prefix(2).allSatisfy({ $0.isHexDigit }),
               let v = UInt8(String(decoding: utf8.prefix(2), as: UTF8.self), radix: 16) {
                bytes.append(v)
                utf8 = utf8.dropFirst(2)
            } else {
                bytes.append(b)
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }
}

private extension UInt8 {
    var isHexDigit: Bool { (0x30...0x39).contains(self) || (0x41...0x46).contains(self) || (0x61...0x66).contains(self) }
}
