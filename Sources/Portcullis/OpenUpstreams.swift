import PortcullisProxy

/// Upstreams that a caller could reach around the gateway: `check-config` warns for them.
///
/// An upstream is left open when its host is neither loopback (`127.0.0.0/8`, `::1`,
/// `localhost`), nor private (RFC 1918 `10/8`, `172.16/12`, `192.168/16`; ULA
/// `fc00::/7`), nor a `*.internal` name (Fly.io private networking, GCP internal DNS),
/// and it has none of the locks the gateway offers: `request_headers` (a platform's
/// secret header), a client certificate, or the signed identity assertion
/// (`identity.assertion`). Any other host name is assumed public: the gateway cannot
/// know what a name resolves to tomorrow.
extension GatewayConfiguration {
    public static let lockingDoc = "docs/locking-upstreams.md"

    public var openUpstreams: [UpstreamConfiguration] {
        guard identity.assertion == nil else { return [] }
        return proxy.upstreams.filter { upstream in
            upstream.requestHeaders.isEmpty && upstream.clientCertificate == nil && !Self.isPrivateHost(upstream.url.host)
        }
    }

    static func isPrivateHost(_ host: String) -> Bool {
        let host = host.hasSuffix(".") ? String(host.dropLast()) : host
        if host == "localhost" || host.hasSuffix(".localhost") || host.hasSuffix(".internal") { return true }
        let v4 = host.split(separator: ".", omittingEmptySubsequences: false).compactMap { UInt8($0) }
        if v4.count == 4 && host.split(separator: ".").count == 4 {
            switch (v4[0], v4[1]) {
            case (127, _), (10, _), (192, 168): return true
            case (172, let b) where b >= 16 && b <= 31: return true
            default: return false
            }
        }
        if host.contains(":") {
            let lower = host.lowercased()
            if lower == "::1" { return true }
            // fc00::/7: the first 16-bit group starts with fc or fd (and has four digits).
            let first = lower.split(separator: ":", maxSplits: 1, omittingEmptySubsequences: false).first ?? ""
            if first.count == 4, first.hasPrefix("fc") || first.hasPrefix("fd") { return true }
        }
        return false
    }
}
