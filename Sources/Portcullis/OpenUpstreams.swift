import PortcullisSessions
import PortcullisProxy

/// Upstreams that a caller could reach around the gateway: `check-config` warns for them.
///
/// An upstream is left open when its host is neither loopback (`127.0.0.0/8`, `::1`,
/// `localhost`), nor private (RFC 1918 `10/8`, `172.16/12`, `192.168/16`; ULA
/// `fc00::/7`), nor a `*.internal` name (Fly.io private networking, GCP internal DNS), nor a
/// single-label name (`visits-api`, `notes:10000`: a private network's service name, as
/// Render, Docker and Kubernetes give them; no public DNS name has one label),
/// and it has none of the locks the gateway offers: `request_headers` (a platform's
/// secret header), a client certificate, or the signed identity assertion
/// (`identity.assertion`). Any other host name is assumed public: the gateway cannot
/// know what a name resolves to tomorrow.
extension GatewayConfiguration {
    public static let lockingDoc = "docs/locking-upstreams.md"

    public var openUpstreams: [UpstreamConfiguration] {
        guard identity.assertion == nil else { return [] }
        return proxy.upstreams.filter { upstream in
            upstream.requestHeaders.isEmpty && upstream.clientCertificate == nil && !Self.isPrivate(upstream.url)
        }
    }

    /// Loopback, RFC 1918 and ULA networks (`CIDR`, as `trusted_proxies` uses).
    static let privateNetworks = ["127.0.0.0/8", "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "::1/128", "fc00::/7"]
        .compactMap(CIDR.init)

    static func isPrivate(_ url: UpstreamURL) -> Bool {
        if let address = url.literal {
            let bytes = address.addressBytes
            return privateNetworks.contains { $0.contains(bytes) }
        }
        let host = url.host.hasSuffix(".") ? String(url.host.dropLast()) : url.host
        return host == "localhost" || host.hasSuffix(".localhost") || host.hasSuffix(".internal") || !host.contains(".")
    }
}
