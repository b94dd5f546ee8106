import PortcullisCore
/// A route resolved at start: its configuration plus the upstream's index.
///
/// A class: every request holds its route from the match to the response, and a reference is
/// one retain where the struct (its configuration's strings, arrays and handler) was a dozen.
public final class Route: Sendable {
    public let configuration: RouteConfiguration
    public let upstreamIndex: Int
    /// Position of this route in the configuration's `routes` list.
    public let index: Int
    /// Lower-cased host to match, if any.
    let host: String?
    /// Prefix without a trailing slash ("/" stays "/").
    let prefix: String

    init(configuration: RouteConfiguration, upstreamIndex: Int, index: Int, host: String?, prefix: String) {
        self.configuration = configuration
        self.upstreamIndex = upstreamIndex
        self.index = index
        self.host = host
        self.prefix = prefix
    }
}

/// Longest path-prefix match, optionally by Host, over normalized paths.
///
/// A prefix matches on a segment boundary: `/api/visits` matches `/api/visits`,
/// `/api/visits/7` and `/api/visits?x`, never `/api/visitsX` (stricter than Envoy's
/// plain string prefix, so a public `/api/pub` cannot catch `/api/public-admin`).
/// Host-specific routes win over host-less ones of the same length.
public struct RouteTable: Sendable {
    public let routes: [Route]
    /// False when no route is bound to a Host: requests then skip host extraction.
    public let hasHostRoutes: Bool

    public init(_ configurations: [RouteConfiguration], upstreamNames: [String]) {
        var built: [Route] = []
        for (position, c) in configurations.enumerated() {
            // A route the gateway answers itself has no pool (-1).
            guard let index = upstreamNames.firstIndex(of: c.upstream) ?? (c.handler != nil ? -1 : nil) else { continue }
            var prefix = c.pathPrefix
            while prefix.count > 1 && prefix.hasSuffix("/") { prefix.removeLast() }
            built.append(Route(configuration: c, upstreamIndex: index, index: position, host: c.host.map { Authority.normalizedHost($0) ?? $0.lowercased() }, prefix: prefix))
        }
        // Longest prefix first; host-bound before host-less at equal length.
        routes = built.enumerated().sorted { a, b in
            if a.element.prefix.utf8.count != b.element.prefix.utf8.count {
                return a.element.prefix.utf8.count > b.element.prefix.utf8.count
            }
            if (a.element.host != nil) != (b.element.host != nil) { return a.element.host != nil }
            return a.offset < b.offset
        }.map(\.element)
        hasHostRoutes = routes.contains { $0.host != nil }
    }

    /// `host` is the request's host without port, lower-cased.
    public func match(path: String, host: Substring?) -> Route? {
        for route in routes {
            if let h = route.host, host.map({ $0 == h }) != true { continue }
            if RouteTable.prefixMatches(route.prefix, path) { return route }
        }
        return nil
    }

    static func prefixMatches(_ prefix: String, _ path: String) -> Bool {
        if prefix == "/" { return true }
        guard path.hasPrefix(prefix) else { return false }
        let rest = path.utf8.dropFirst(prefix.utf8.count)
        return rest.isEmpty || rest.first == UInt8(ascii: "/")
    }

    /// The path forwarded upstream for `route` (prefix removed when configured).
    /// Whether `forwarded` is one of `privatePaths` or below one (segment boundary, ASCII
    /// letters in any case). On every request to a route that has private paths: compared
    /// byte by byte, nothing allocated.
    public static func isPrivate(_ forwarded: Substring, _ privatePaths: [String]) -> Bool {
        let path = forwarded.utf8
        return privatePaths.contains { hidden in
            let prefix = hidden.utf8
            guard path.count >= prefix.count else { return false }
            var index = path.startIndex
            for byte in prefix {
                if Self.foldedASCII(path[index]) != Self.foldedASCII(byte) { return false }
                index = path.index(after: index)
            }
            return index == path.endIndex || prefix.last == UInt8(ascii: "/") || path[index] == UInt8(ascii: "/")
        }
    }

    @inline(__always)
    private static func foldedASCII(_ byte: UInt8) -> UInt8 {
        byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z") ? byte | 0x20 : byte
    }

    public static func forwardedPath(_ path: String, route: Route) -> Substring {
        guard route.configuration.stripPrefix, route.prefix != "/" else { return Substring(path) }
        let rest = path.dropFirst(route.prefix.count)
        return rest.isEmpty ? "/" : rest
    }
}
