import PortcullisAuth
import PortcullisOutbound

/// Why a key document could not be refreshed. Kept as the provider's
/// `lastError` and reported through events and `status()`.
public enum KeyRefreshError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The GET failed (connect, timeout, size, TLS, ...).
    case transport(HTTPFetchError)
    /// The key host answered with a status other than 200.
    case httpStatus(Int, url: String)
    /// The document did not load as keys.
    case invalidDocument(url: String, KeyLoadingError)
    /// No provider of that name is managed.
    case unknownProvider(String)

    public var description: String {
        switch self {
        case .transport(let error): return error.description
        case .httpStatus(let status, let url): return "GET \(url) answered \(status)"
        case .invalidDocument(let url, let error): return "document from \(url) refused: \(error)"
        case .unknownProvider(let name): return "no managed key provider named '\(name)'"
        }
    }
}

/// Why a `KeyManager` cannot be built from its settings.
public enum KeyManagerConfigurationError: Error, Sendable, Equatable, CustomStringConvertible {
    /// An `oidc` provider needs `jwks_url` (or inline keys).
    case missingKeySource(provider: String)
    /// `jwks_url` does not parse.
    case invalidURL(provider: String, HTTPFetchError)
    /// Inline keys do not load.
    case invalidInlineKeys(provider: String, KeyLoadingError)
    /// The verifier has no JWS provider of this name.
    case unknownProvider(String)
    /// The same provider is listed twice.
    case duplicateProvider(String)

    public var description: String {
        switch self {
        case .missingKeySource(let provider): return "provider '\(provider)': oidc needs jwks_url or inline keys"
        case .invalidURL(let provider, let error): return "provider '\(provider)': \(error)"
        case .invalidInlineKeys(let provider, let error): return "provider '\(provider)': inline keys: \(error)"
        case .unknownProvider(let provider): return "provider '\(provider)' is not a JWS provider of the verifier"
        case .duplicateProvider(let provider): return "provider '\(provider)' has two key sources"
        }
    }
}
