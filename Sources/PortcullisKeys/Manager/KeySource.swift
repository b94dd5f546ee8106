import PortcullisAuth
import PortcullisOutbound

/// Where a provider's signing keys come from.
public enum KeySource: Sendable, Equatable {
    /// Fetched from a URL and refreshed; the document has the given format.
    case url(String, format: KeyDocumentFormat)
    /// An inline document (configuration text or a file read at load time): never fetched.
    case document([UInt8], format: KeyDocumentFormat)
    /// One PEM public key or certificate: never fetched.
    case pemPublicKey(String)

    /// Google's JWKS (RS256 keys), per the token rule book.
    public static let googleURL = "https://www.googleapis.com/oauth2/v3/certs"
    /// Apple's JWKS for Sign in with Apple.
    public static let appleURL = "https://appleid.apple.com/auth/keys"
    /// Firebase ID-token certificates: a `kid` → PEM certificate map.
    public static let firebaseURL = "https://www.googleapis.com/robot/v1/metadata/x509/securetoken@system.gserviceaccount.com"
    /// Firebase session-cookie certificates (a `kid` → PEM certificate map), per the Admin SDK.
    public static let firebaseSessionURL = "https://www.googleapis.com/identitytoolkit/v3/relyingparty/publicKeys"

    /// The source for a provider kind: `jwksURL` when set (a JWKS unless
    /// `format` says otherwise), else the kind's default URL. nil for kinds
    /// whose keys are secrets (hs256, nextauth, authjs). An `oidc` provider
    /// without `jwksURL` is a configuration error.
    public static func forProvider(_ name: String, kind: ProviderConfiguration.Kind, jwksURL: String? = nil,
                                   format: KeyDocumentFormat? = nil) throws(KeyManagerConfigurationError) -> KeySource? {
        if let jwksURL {
            do { _ = try FetchURL(parsing: jwksURL) } catch { throw .invalidURL(provider: name, error) }
            return .url(jwksURL, format: format ?? (jwksURL == firebaseURL ? .pemCertificateMap : .jwks))
        }
        switch kind {
        case .google: return .url(googleURL, format: format ?? .jwks)
        case .apple: return .url(appleURL, format: format ?? .jwks)
        case .firebase: return .url(firebaseURL, format: format ?? .pemCertificateMap)
        case .firebaseSession: return .url(firebaseSessionURL, format: format ?? .pemCertificateMap)
        case .oidc: throw .missingKeySource(provider: name)
        case .hs256, .nextauth, .authjs: return nil
        }
    }

    /// The URL for `status()`, or "inline".
    var displayName: String {
        switch self {
        case .url(let url, _): return url
        case .document: return "inline"
        case .pemPublicKey: return "inline PEM"
        }
    }
}

/// One provider whose keys `KeyManager` keeps: its name in the
/// `CredentialVerifier` and where its keys come from.
public struct ManagedKeyProvider: Sendable, Equatable {
    public var name: String
    public var source: KeySource

    public init(name: String, source: KeySource) {
        self.name = name
        self.source = source
    }
}
