import PortcullisCore
import PortcullisEdgeAuth
import PortcullisProxy

/// `routes[]`: `{path, host, upstream, auth, strip_prefix}` plus each route's auth
/// settings (`ConfigurationLoader+Auth`).
extension ConfigurationLoader {
    static func routes(_ routesNode: ConfigNode, file: String, upstreams: [UpstreamConfiguration],
                       providerNames: Set<String>) throws(ConfigurationError) -> ([RouteConfiguration], [RouteAuthSettings]) {
        var routes: [RouteConfiguration] = []
        var routeAuth: [RouteAuthSettings] = []
        let upstreamNames = Set(upstreams.map(\.name))
        for item in try routesNode.sequence() {
            var node = item
            let pathNode = try node.required("path")
            let path = try pathNode.string()
            guard path.hasPrefix("/"), !path.contains("?"), !path.contains("#"), !path.contains("//"),
                  !path.split(separator: "/").contains(where: { $0 == "." || $0 == ".." }),
                  !path.contains("%"), !path.contains("\\") else {
                throw pathNode.error("must be a normalized path prefix starting with '/' (no '.', '..', '//', '%', '\\', '?', '#')")
            }
            let upstreamNode = try node.required("upstream")
            let upstream = try upstreamNode.string()
            guard upstreamNames.contains(upstream) else {
                throw upstreamNode.error("names no upstream (known: \(upstreamNames.sorted().joined(separator: ", ")))")
            }
            var auth = AuthMode.required
            if let n = try node.optional("auth") {
                let text = try n.string()
                guard let mode = AuthMode(rawValue: text) else { throw n.error("expected required, optional or none; got '\(text)'") }
                auth = mode
            }
            // Normalized as every request's host is (`Authority`), so `Host: A.example.com.` and
            // `host: a.example.com` name the same route.
            var host: String?
            if let hostNode = try node.optional("host") {
                guard let normalized = Authority.normalizedHost(try hostNode.string(), allowPort: false) else {
                    throw hostNode.error("is not a host name (a name or address, without port or userinfo)")
                }
                host = normalized
            }
            let strip = try node.optional("strip_prefix")?.bool() ?? false
            let credentialNode = try node.optional("credential")
            let onInvalidNode = try node.optional("on_invalid")
            let (routeProviders, authSettings) = try Self.routeAuth(&node, providerNames: providerNames)
            if let credentialNode, auth == .none {
                throw credentialNode.error("has no effect on an auth: none route (use required or optional)")
            }
            if let onInvalidNode, auth != .optional {
                throw onInvalidNode.error("applies to auth: optional routes only (a required route refuses, or redirects with on_unauthenticated: redirect)")
            }
            try node.finish()
            routes.append(RouteConfiguration(pathPrefix: path, host: host, upstream: upstream, auth: auth,
                                             stripPrefix: strip, providers: routeProviders))
            routeAuth.append(authSettings)
        }
        if routes.isEmpty { throw routesNode.error("needs at least one route") }
        var seen = Set<String>()
        for (i, r) in routes.enumerated() {
            let key = "\(r.host ?? "*") \(r.pathPrefix)"
            if !seen.insert(key).inserted {
                throw ConfigurationError(file: file, key: "routes[\(i)].path", line: nil,
                                         reason: "duplicates an earlier route for the same host and path")
            }
        }
        return (routes, routeAuth)
    }
}
