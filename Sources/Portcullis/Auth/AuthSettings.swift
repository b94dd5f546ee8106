import PortcullisAuth

/// Where a provider's verification keys come from.
public enum KeySourceSetting: Sendable {
    /// hs256 / nextauth / authjs: the configured secret is the key.
    case secret
    /// Fetched over HTTP(S) and refreshed: `jwks_url`, or the provider kind's
    /// well-known URL (Google, Apple, Firebase).
    case url(String)
    /// Given in the file (`jwks`, `jwks_file`, `public_key`): loaded at start,
    /// never refreshed.
    case inline(KeySet)
}

/// One configured provider: the verification rules plus its key source.
public struct ProviderSettings: Sendable {
    public var configuration: ProviderConfiguration
    public var keys: KeySourceSetting
    /// nextauth / authjs: the cookie names that carry the session (plain and `__Secure-`).
    public var sessionCookieNames: [String]
}

extension Array where Element == ProviderSettings {
    /// The key sets given in the file, by provider name (what
    /// `CredentialVerifier` starts with; fetched sets arrive later).
    public var inlineKeys: [String: KeySet] {
        var keys: [String: KeySet] = [:]
        for provider in self {
            if case .inline(let set) = provider.keys { keys[provider.configuration.name] = set }
        }
        return keys
    }
}
