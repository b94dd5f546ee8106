import PortcullisSessions
import PortcullisCore
import PortcullisEdgeAuth
import PortcullisProxy

/// `routes[]`: `{path, host, upstream, auth, strip_prefix}` plus each route's auth
/// settings (`ConfigurationLoader+Auth`).
extension ConfigurationLoader {
    static func routes(_ routesNode: ConfigNode, file: String, upstreamNames: Set<String>,
                       providerNames: Set<String>) throws(ConfigurationError) -> ([RouteConfiguration], [RouteAuthSettings]) {
        var routes: [RouteConfiguration] = []
        var routeAuth: [RouteAuthSettings] = []
        var errors: [ConfigurationError] = []
        /// Each good route's position in the file's list (a bad one is reported and skipped).
        var positions: [Int] = []
        for (position, item) in try routesNode.sequence().enumerated() {
            // Each route's error is reported; the others are still read (check-config lists all).
            do throws(ConfigurationError) {
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
                var (routeProviders, authSettings) = try Self.routeAuth(&node, providerNames: providerNames)
                var acceptsSessions = true
                let acceptNode = try node.optional("accept_sessions")
                if let n = acceptNode {
                    acceptsSessions = try n.bool()
                    guard providerNames.contains(SessionSettings.providerName) else {
                        throw n.error("needs sessions: (there are no session tokens to accept or refuse)")
                    }
                    if auth == .none { throw n.error("has no effect on an auth: none route") }
                }
                routeProviders = acceptsSessions
                    ? Self.acceptingSessions(routeProviders, providerNames: providerNames)
                    : (routeProviders ?? providerNames.sorted()).filter { $0 != SessionSettings.providerName }
                if let acceptNode, routeProviders?.isEmpty == true {
                    throw acceptNode.error("refuses the only provider the route lists: nothing could pass")
                }
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
                positions.append(position)
            } catch {
                errors += error.all
            }
        }
        if routes.isEmpty && errors.isEmpty { throw routesNode.error("needs at least one route") }
        var seen = Set<String>()
        let items = (try? routesNode.sequence()) ?? []
        for (i, r) in routes.enumerated() {
            let key = "\(r.host ?? "*") \(r.pathPrefix)"
            if !seen.insert(key).inserted {
                let position = positions[i]
                errors.append(ConfigurationError(file: file, key: "routes[\(position)].path",
                                                 line: position < items.count ? items[position].line : nil,
                                                 reason: "duplicates an earlier route for the same host and path"))
            }
        }
        if !errors.isEmpty { throw combined(errors) }
        return (routes, routeAuth)
    }

    /// With `sessions:` on, a route that lists `providers` accepts the gateway's session
    /// tokens too (`session`), as every route without a list does: turning sessions on moves
    /// an app's sign-in to the edge without rewriting every route, and the access tokens the
    /// exchange issues pass wherever the app's own did. `accept_sessions: false` on a route
    /// refuses them there (the route keeps its list, or every other provider).
    static func acceptingSessions(_ providers: [String]?, providerNames: Set<String>) -> [String]? {
        guard var list = providers, providerNames.contains(SessionSettings.providerName) else { return providers }
        if list.contains(SessionSettings.providerName) { return list }
        list.append(SessionSettings.providerName)
        return list
    }
}
