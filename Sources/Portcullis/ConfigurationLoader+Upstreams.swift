import PortcullisProxy
import PortcullisTLS

/// `upstreams`: name → `{url, ca_file, host_header, resolve_interval, max_connections,
/// max_pending, connect_timeout, response_timeout, idle_timeout}`.
extension ConfigurationLoader {
    static func upstreams(_ upstreamsNode: ConfigNode) throws(ConfigurationError) -> [UpstreamConfiguration] {
        var upstreams: [UpstreamConfiguration] = []
        for (name, node) in try upstreamsNode.entries() {
            upstreams.append(try upstream(name, node))
        }
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
            let path = try n.string()
            do { _ = try TLSClientContext(caFile: path) } catch { throw n.error(error.description) }
            upstream.caFile = path
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
}
