import PortcullisHTTP
import PortcullisProxy
import PortcullisTLS

/// `upstreams`: name → `{url, ca_file, client_certificate, client_private_key, host_header,
/// request_headers, resolve_interval, max_connections, max_pending, connect_timeout,
/// response_timeout, idle_timeout}`.
extension ConfigurationLoader {
    /// `client_certificate` and `client_private_key` of `node` (an upstream, the tracing
    /// collector): both or neither, only over TLS (`secure`, else `insecure` is the reason),
    /// files that load as a pair; nil when neither is set.
    static func clientCertificate(_ node: inout ConfigNode, secure: Bool,
                                  insecure: String) throws(ConfigurationError) -> ClientCertificateFiles? {
        let certificateNode = try node.optional("client_certificate")
        let keyNode = try node.optional("client_private_key")
        guard certificateNode != nil || keyNode != nil else { return nil }
        guard let certificateNode, let keyNode else {
            throw node.error("client_certificate and client_private_key go together", key: certificateNode == nil ? "client_certificate" : "client_private_key")
        }
        guard secure else { throw certificateNode.error(insecure) }
        let certificate = try certificateNode.string()
        let key = try keyNode.string()
        do throws(TLSFileError) { _ = try TLSCertificate.client(certificateFile: certificate, keyFile: key) } catch {
            throw (error.file == key ? keyNode : certificateNode).error(error.description)
        }
        return ClientCertificateFiles(certificate: certificate, key: key)
    }

    static func upstreams(_ upstreamsNode: ConfigNode) throws(ConfigurationError) -> [UpstreamConfiguration] {
        var upstreams: [UpstreamConfiguration] = []
        var errors: [ConfigurationError] = []
        let entries = try upstreamsNode.entries()
        for (name, node) in entries {
            // Each upstream's error is reported; the others are still read (check-config lists all).
            do throws(ConfigurationError) { upstreams.append(try upstream(name, node)) } catch { errors += error.all }
        }
        if !errors.isEmpty { throw combined(errors) }
        if upstreams.isEmpty { throw upstreamsNode.error("needs at least one upstream") }
        return upstreams
    }

    static func upstream(_ name: String, _ node: ConfigNode) throws(ConfigurationError) -> UpstreamConfiguration {
        var node = node
        guard !name.isEmpty, name.allSatisfy({ $0.isLetter || $0.isNumber || $0 == "_" || $0 == "-" }) else {
            throw node.error("upstream names use letters, digits, '-' and '_'")
        }
        let urlNode = try node.required("url")
        let url: UpstreamURL
        let text = try urlNode.string()
        do { url = try UpstreamURL(parsing: text) } catch { throw urlNode.error(error.description) }
        var upstream = UpstreamConfiguration(name: name, url: url)
        if let n = try node.optional("ca_file") {
            guard url.secure else { throw n.error("ca_file applies to https:// upstreams only") }
            upstream.caFile = try n.caFile()
        }
        upstream.clientCertificate = try clientCertificate(&node, secure: url.secure,
                                                           insecure: "client certificates apply to https:// upstreams only")
        if let n = try node.optional("request_headers") {
            for (headerName, valueNode) in try n.entries() {
                try checkRequestHeaderName(headerName, valueNode)
                let value = try valueNode.secret()
                guard value.utf8.allSatisfy({ ($0 >= 0x20 && $0 != 0x7F) || $0 == 0x09 }) else {
                    throw valueNode.error("the value holds a control character (CR, LF, NUL …)")
                }
                let folded = HTTPBytes.identityName(headerName)
                if upstream.requestHeaders.contains(where: { HTTPBytes.identityName($0.name) == folded }) {
                    throw valueNode.error("set twice (names compare without case, with '-', '_' and '.' alike)")
                }
                upstream.requestHeaders.append(SecretHeader(name: headerName, value: value))
            }
        }
        if let n = try node.optional("host_header") {
            let text = try n.string()
            guard let mode = HostHeaderMode(rawValue: text) else { throw n.error("expected client or upstream, got '\(text)'") }
            upstream.hostHeader = mode
        }
        if let n = try node.optional("resolve_interval") { upstream.resolveInterval = try positiveDuration(n) }
        if let n = try node.optional("max_connections") { upstream.maxConnections = try n.int(min: 1, max: 100_000) }
        if let n = try node.optional("max_pending") { upstream.maxPending = try n.int(min: 0, max: 1_000_000) }
        if let n = try node.optional("connect_timeout") { upstream.connectTimeout = try positiveDuration(n) }
        if let n = try node.optional("response_timeout") { upstream.responseTimeout = try positiveDuration(n) }
        if let n = try node.optional("idle_timeout") { upstream.idleTimeout = try positiveDuration(n) }
        try node.finish()
        return upstream
    }

    /// Header names the gateway writes itself or that frame and route the request.
    static let reservedRequestHeaders: Set<String> = [
        "host", "content-length", "transfer-encoding", "connection", "keep-alive", "proxy-connection",
        "te", "trailer", "upgrade", "expect", "http2-settings", "forwarded", "x-forwarded-for",
        "x-forwarded-proto", "x-forwarded-host", "x-request-id", "authorization", "cookie",
    ]

    static func checkRequestHeaderName(_ name: String, _ node: ConfigNode) throws(ConfigurationError) {
        guard isHeaderName(name) else { throw node.error("not a valid header name") }
        if reservedRequestHeaders.contains(HTTPBytes.identityName(name)) {
            throw node.error("\(name) is written by the gateway itself (or frames the request) and cannot be set here")
        }
    }
}
