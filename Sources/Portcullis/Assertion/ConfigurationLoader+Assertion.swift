import PortcullisEdgeAuth
import PortcullisAuth

/// `identity.assertion`: `{header, issuer, lifetime, algorithm, signing_keys | secret}`.
extension ConfigurationLoader {
    static func assertion(_ node: ConfigNode) throws(ConfigurationError) -> AssertionSettings {
        var node = node
        let issuer = try node.required("issuer").string()
        guard !issuer.isEmpty else { throw node.error("is empty", key: "issuer") }
        var settings = AssertionSettings(issuer: issuer)
        if let n = try node.optional("header") { settings.header = try headerName(n) }
        if let n = try node.optional("lifetime") {
            settings.lifetime = try positiveDuration(n)
            guard settings.lifetime >= 2 && settings.lifetime <= 3600 else { throw n.error("must be between 2s and 1h") }
        }
        if let n = try node.optional("algorithm") {
            let text = try n.string()
            guard let algorithm = JWSAlgorithm(rawValue: text), AssertionSettings.supportedAlgorithms.contains(algorithm) else {
                throw n.error("expected ES256, EdDSA, RS256 or HS256, got '\(text)'")
            }
            settings.algorithm = algorithm
        }
        let keysNode = try node.optional("signing_keys")
        let secretNode = try node.optional("secret")
        if settings.algorithm == .hs256 {
            guard let secretNode else { throw node.error("HS256 assertions need secret: {env|file|value}", key: "secret") }
            if let keysNode { throw keysNode.error("HS256 signs with secret:, not keys") }
            let secret = try secretNode.secret()
            guard secret.utf8.count >= 32 else { throw secretNode.error("an HS256 secret needs at least 32 bytes") }
            settings.secret = secret
        } else {
            if let secretNode { throw secretNode.error("secret: is for HS256; \(settings.algorithm.rawValue) signs with signing_keys") }
            if let keysNode {
                let items = try keysNode.sequence()
                guard !items.isEmpty else { throw keysNode.error("needs at least one key file (or leave signing_keys out to generate one)") }
                for item in items {
                    let path = try item.string()
                    do { _ = try AssertionKeys.loadKey(path, algorithm: settings.algorithm) } catch { throw item.error(error.description) }
                    settings.signingKeys.append(path)
                }
            }
        }
        try node.finish()
        return settings
    }
}
