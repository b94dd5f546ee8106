import PortcullisProxy
import PortcullisRateLimit

/// `rate_limits:` (README: Rate limits): rules by route and key, GCRA, and what happens when
/// the shared store cannot be asked. A list alone is read as the rules.
extension ConfigurationLoader {
    static func rateLimits(_ node: ConfigNode?, routes: [RouteConfiguration]) throws(ConfigurationError) -> RateLimitSettings {
        guard var node else { return RateLimitSettings() }
        var settings = RateLimitSettings()
        let rulesNode: ConfigNode?
        if case .sequence = node.node {
            rulesNode = node
        } else {
            rulesNode = try node.optional("rules")
            if let n = try node.optional("on_unavailable") {
                let text = try n.string()
                guard let policy = RateLimitSettings.Unavailable(rawValue: text) else {
                    throw n.error("expected allow or deny, got '\(text)'")
                }
                settings.onUnavailable = policy
            }
            if let n = try node.optional("max_keys") { settings.maxKeys = try n.int(min: 1_000, max: 100_000_000) }
            try node.finish()
        }
        guard let rulesNode else { return settings }
        let paths = Set(routes.map(\.pathPrefix))
        var names = Set<String>()
        for var item in try rulesNode.sequence() {
            let nameNode = try item.required("name")
            let name = try nameNode.string()
            guard !name.isEmpty, name.utf8.count <= 64,
                  name.utf8.allSatisfy({ $0 < 0x80 && (Character(Unicode.Scalar($0)).isLetter || Character(Unicode.Scalar($0)).isNumber
                                                       || $0 == UInt8(ascii: "-") || $0 == UInt8(ascii: "_") || $0 == UInt8(ascii: ".")) })
            else { throw nameNode.error("expected 1-64 letters, digits, '-', '_' or '.' (it names the rule in headers, metrics and store keys)") }
            guard names.insert(name).inserted else { throw nameNode.error("'\(name)' names another rule too") }
            var routePaths: [String]?
            if let n = try item.optional("routes") {
                let listed = try n.stringList()
                if listed.isEmpty { throw n.error("lists no route (leave it out to limit every route)") }
                for path in listed where !paths.contains(path) {
                    throw n.error("'\(path)' is no route's path (routes[].path, as configured)")
                }
                routePaths = listed
            }
            let keyNode = try item.required("key")
            let keyText = try keyNode.string()
            let key: RateLimitRule.Key
            switch keyText {
            case "user": key = .user
            case "client_address": key = .clientAddress
            case let text where text.hasPrefix("claim:") && text.count > 6: key = .claim(String(text.dropFirst(6)))
            default: throw keyNode.error("expected user, client_address or claim:<name>, got '\(keyText)'")
            }
            let rateNode = try item.required("rate")
            let rateText = try rateNode.string()
            guard let rate = RateLimitSettings.parseRate(rateText) else {
                throw rateNode.error("expected <count>/<unit> (10/s, 600/m, 1000/h, 100/10s), got '\(rateText)'")
            }
            let burst = try item.optional("burst")?.int(min: 1, max: 1_000_000)
            try item.finish()
            settings.rules.append(RateLimitRule(name: name, routes: routePaths, key: key, count: rate.count,
                                                periodSeconds: rate.periodSeconds, burst: burst.map(Int64.init)))
        }
        return settings
    }
}
