import Foundation
import Yams
import Logging
import PortcullisHTTP
import PortcullisIO
import PortcullisProxy
import PortcullisTLS

/// `listen[]`: an address, optionally TLS (`tls:`) or a redirect to https (`redirect_https:`).
///
/// ```yaml
/// listen:
///   - address: "0.0.0.0:443"
///     tls:
///       certificates:                 # first = default (no SNI, unknown SNI)
///         - {certificate: /etc/portcullis/api.pem, private_key: /etc/portcullis/api.key}
///       min_version: "1.2"            # "1.2" | "1.3"
///       alpn: [h2, http/1.1]          # the default; [http/1.1] turns HTTP/2 off
///       handshake_timeout: 10s
///     http2: {max_concurrent_streams: 100, max_header_list_size: 16384, initial_window_size: 65535,
///             send_timeout: 10s, idle_timeout: 30s}
///   - {address: "0.0.0.0:80", redirect_https: true}
///   - {address: "127.0.0.1:8081", h2c: true}   # HTTP/1.1, and HTTP/2 with prior knowledge
/// ```
/// Every certificate is loaded and checked here (pair, validity, chain order,
/// subjectAltName names), so `check-config` and start-up fail naming the file.
extension ConfigurationLoader {
    static func listener(_ item: ConfigNode) throws(ConfigurationError) -> GatewayConfiguration.Listen {
        var item = item
        let address = try socketAddress(try item.required("address"))
        var listen = GatewayConfiguration.Listen(address: address)
        if let node = try item.optional("tls") { listen.tls = try tlsSettings(node) }
        if let node = try item.optional("redirect_https") { listen.redirectHTTPS = try node.bool() }
        if listen.redirectHTTPS && listen.tls != nil {
            throw item.error("a TLS listener cannot also redirect to https (redirect_https belongs on the plain listener)",
                             key: "redirect_https")
        }
        if let node = try item.optional("h2c") {
            listen.h2c = try node.bool()
            if listen.h2c && listen.tls != nil {
                throw node.error("h2c is HTTP/2 without TLS; a TLS listener offers HTTP/2 with 'h2' in tls.alpn")
            }
            if listen.h2c && listen.redirectHTTPS {
                throw node.error("a listener that redirects to https answers every request with 308; h2c has no use there")
            }
        }
        if let node = try item.optional("http2") {
            listen.http2 = try http2Settings(node)
            if !listen.offersHTTP2 {
                throw node.error(listen.tls == nil
                    ? "HTTP/2 settings on a plain listener need h2c: true"
                    : "HTTP/2 settings on a TLS listener whose tls.alpn does not list h2")
            }
        }
        try item.finish()
        return listen
    }

    static func tlsSettings(_ node: ConfigNode) throws(ConfigurationError) -> TLSServerSettings {
        var node = node
        let list = try node.required("certificates")
        var files: [TLSServerSettings.CertificateFiles] = []
        for entry in try list.sequence() {
            var entry = entry
            let certificateNode = try entry.required("certificate")
            let keyNode = try entry.required("private_key")
            let pair = TLSServerSettings.CertificateFiles(certificate: try certificateNode.string(), privateKey: try keyNode.string())
            try entry.finish()
            do {
                _ = try TLSCertificate(certificateFile: pair.certificate, keyFile: pair.privateKey)
            } catch {
                let culprit = error.file == pair.privateKey ? keyNode : certificateNode
                throw culprit.error(error.description)
            }
            files.append(pair)
        }
        if files.isEmpty { throw list.error("needs at least one certificate") }
        var settings = TLSServerSettings(certificates: files)
        if let n = try node.optional("min_version") {
            let text = try n.string()
            guard let version = TLSVersion(rawValue: text) else { throw n.error("expected \"1.2\" or \"1.3\", got '\(text)'") }
            settings.minimumVersion = version
        }
        if let n = try node.optional("alpn") {
            let protocols = try n.stringList()
            for name in protocols where name != "http/1.1" && name != "h2" {
                throw n.error("unsupported protocol '\(name)' (supported: h2, http/1.1)")
            }
            if Set(protocols).count != protocols.count { throw n.error("lists a protocol twice") }
            if protocols.isEmpty { throw n.error("needs at least one protocol") }
            settings.alpn = protocols
        }
        if let n = try node.optional("handshake_timeout") { settings.handshakeTimeout = try positiveDuration(n) }
        try node.finish()
        return settings
    }
}

/// `listen[].http2`: the HTTP/2 settings (see `HTTP2Settings` for each one's meaning).
extension ConfigurationLoader {
    static func http2Settings(_ node: ConfigNode) throws(ConfigurationError) -> HTTP2Settings {
        var node = node
        var settings = HTTP2Settings()
        if let n = try node.optional("max_concurrent_streams") { settings.maxConcurrentStreams = try n.int(min: 1, max: 10_000) }
        if let n = try node.optional("max_header_list_size") { settings.maxHeaderListSize = try n.int(min: 1024, max: 1 << 24) }
        // RFC 9113 §6.5.2: at most 2^31-1; below 1 KiB a request body would crawl.
        if let n = try node.optional("initial_window_size") { settings.initialWindowSize = try n.int(min: 1024, max: Int(Int32.max)) }
        if let n = try node.optional("send_timeout") { settings.sendTimeout = try positiveDuration(n) }
        if let n = try node.optional("idle_timeout") { settings.idleTimeout = try positiveDuration(n) }
        try node.finish()
        return settings
    }
}

/// `admin`: the admin listener (`off`, or `{address, token, metrics_public}`).
extension ConfigurationLoader {
    /// Only the admin listener's address of `file` (nil: `admin: off`), for `portcullis health`:
    /// the running gateway is asked, so the rest of the file is not read — an edit not yet
    /// reloaded, or a secret the probe's environment lacks, must not fail a healthy gateway's probe.
    public static func adminAddress(file: String, environment: [String: String] = ProcessInfo.processInfo.environment)
        throws(ConfigurationError) -> SocketAddress? {
        let text: String
        do { text = try String(contentsOfFile: file, encoding: .utf8) } catch {
            throw ConfigurationError(file: file, key: "", reason: "cannot read the file (\(error.localizedDescription))")
        }
        let root: Node?
        do { root = try Yams.compose(yaml: text) } catch {
            throw ConfigurationError(file: file, key: "", reason: "invalid YAML: \(error)")
        }
        guard let root else { throw ConfigurationError(file: file, key: "", reason: "the file is empty") }
        var top = ConfigNode(node: root, path: "", file: file, environment: environment)
        guard var admin = try top.optional("admin") else { return try! SocketAddress(parsing: "127.0.0.1:9901") }
        if case .scalar = admin.node, try admin.string() == "off" { return nil }
        guard let address = try admin.optional("address") else { return try! SocketAddress(parsing: "127.0.0.1:9901") }
        return try socketAddress(address)
    }

    static func admin(_ node: ConfigNode?) throws(ConfigurationError) -> GatewayConfiguration.Admin? {
        let defaultAddress = try! SocketAddress(parsing: "127.0.0.1:9901")
        guard var node else { return .init(address: defaultAddress, token: nil) }
        if case .scalar = node.node, try node.string() == "off" { return nil }
        let address = try node.optional("address").map { n throws(ConfigurationError) in try socketAddress(n) } ?? defaultAddress
        var token: String?
        if let n = try node.optional("token") {
            // An empty string (`token: ""`, an unset `${VAR:-}`) means no token, as before.
            if case .scalar = n.node, try n.string().isEmpty { token = nil } else { token = try n.secret(bare: true) }
        }
        if let t = token, t.utf8.count < 16 {
            throw node.error("must be at least 16 characters", key: "token")
        }
        let metricsPublic = try node.optional("metrics_public")?.bool() ?? false
        try node.finish()
        return .init(address: address, token: token, metricsPublic: metricsPublic)
    }

    /// `log_level`: trace … critical (default info).
    static func logLevel(_ node: ConfigNode?) throws(ConfigurationError) -> Logger.Level {
        guard let node else { return .info }
        let text = try node.string()
        guard let level = Logger.Level(rawValue: text) else {
            throw node.error("expected one of trace, debug, info, notice, warning, error, critical; got '\(text)'")
        }
        return level
    }

    /// `access_log`: off, stdout (default), stderr or an absolute path.
    /// `access_log`: a target (`off`, `stdout`, `stderr`, an absolute path), or
    /// `{target: …, fields: [time, status, user, …]}` to choose the members of each line (as
    /// Traefik's JSON access log does; the default is every field, `AccessLogFields.names`).
    static func accessLog(_ node: ConfigNode?) throws(ConfigurationError) -> (GatewayConfiguration.AccessLogTarget, AccessLogFields) {
        guard var node else { return (.stdout, .all) }
        guard case .mapping = node.node else { return (try accessLogTarget(node), .all) }
        let target = try node.optional("target").map { n throws(ConfigurationError) in try accessLogTarget(n) } ?? .stdout
        var fields = AccessLogFields.all
        if let n = try node.optional("fields") {
            fields = []
            for name in try n.stringList() {
                guard let field = AccessLogFields(named: name) else {
                    throw n.error("unknown field '\(name)' (known: \(AccessLogFields.names.joined(separator: ", ")))")
                }
                fields.insert(field)
            }
            guard !fields.isEmpty else { throw n.error("names at least one field") }
        }
        try node.finish()
        return (target, fields)
    }

    private static func accessLogTarget(_ node: ConfigNode) throws(ConfigurationError) -> GatewayConfiguration.AccessLogTarget {
        switch try node.string() {
        case "off": return .off
        case "stdout": return .stdout
        case "stderr": return .stderr
        case let path where path.hasPrefix("/"): return .file(path)
        case let other: throw node.error("expected off, stdout, stderr or an absolute path; got '\(other)'")
        }
    }

    /// `limits`: request line, head and body sizes.
    static func limits(_ node: ConfigNode?) throws(ConfigurationError) -> HTTPLimits {
        var limits = HTTPLimits.default
        guard var node else { return limits }
        if let n = try node.optional("max_request_line") { limits.maxRequestLineBytes = try positiveSize(n) }
        if let n = try node.optional("max_header_bytes") { limits.maxHeaderBytes = try positiveSize(n) }
        if let n = try node.optional("max_header_count") { limits.maxHeaderCount = try n.int(min: 1, max: 10_000) }
        if let n = try node.optional("max_body_bytes") { limits.maxBodyBytes = try n.byteSize() }
        try node.finish()
        return limits
    }

    /// `timeouts`: the client side (header, idle, body) and the shutdown grace (also
    /// `shutdown.grace`; nil when not given here).
    static func timeouts(_ node: ConfigNode?) throws(ConfigurationError) -> (ClientTimeouts, shutdownGrace: Double?) {
        var timeouts = ClientTimeouts()
        var shutdownGrace: Double?
        guard var node else { return (timeouts, shutdownGrace) }
        if let n = try node.optional("header") { timeouts.header = try positiveDuration(n) }
        if let n = try node.optional("idle") { timeouts.idle = try positiveDuration(n) }
        if let n = try node.optional("body") { timeouts.body = try positiveDuration(n) }
        if let n = try node.optional("send") { timeouts.send = try positiveDuration(n) }
        if let n = try node.optional("shutdown_grace") { shutdownGrace = try n.duration() }
        try node.finish()
        return (timeouts, shutdownGrace)
    }

    /// `shutdown: {drain_delay: 5s, grace: 10s}` (see `ShutdownSettings`). `timeouts.shutdown_grace`
    /// is the older spelling of `grace`; both at once is refused.
    static func shutdown(_ node: ConfigNode?, timeoutsGrace: Double?) throws(ConfigurationError) -> ShutdownSettings {
        var settings = ShutdownSettings()
        if let timeoutsGrace { settings.grace = timeoutsGrace }
        guard var node else { return settings }
        if let n = try node.optional("drain_delay") { settings.drainDelay = try n.duration() }
        if let n = try node.optional("grace") {
            if timeoutsGrace != nil {
                throw n.error("set either shutdown.grace or timeouts.shutdown_grace, not both")
            }
            settings.grace = try n.duration()
        }
        try node.finish()
        return settings
    }

    /// `trusted_proxies`: addresses or CIDR blocks whose X-Forwarded-* are believed.
    static func trustedProxies(_ node: ConfigNode?) throws(ConfigurationError) -> [CIDR] {
        guard let node else { return [] }
        return try node.sequence().map { item throws(ConfigurationError) in
            let text = try item.string()
            guard let cidr = CIDR(text) else { throw item.error("'\(text)' is not an IP address or CIDR block") }
            return cidr
        }
    }
}
