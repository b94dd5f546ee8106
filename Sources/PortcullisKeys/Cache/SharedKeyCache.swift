import PortcullisAuth
/// How a key document is written.
public enum KeyDocumentFormat: String, Sendable, Equatable {
    /// A JWK Set, `{"keys":[...]}` (Google v3, Apple, OIDC issuers).
    case jwks
    /// A map of `kid` to PEM certificate (Firebase securetoken x509, Google v1).
    case pemCertificateMap
}

extension KeyDocumentFormat {
    /// The format of a document given without saying which: a PEM certificate
    /// map when it holds certificates and no `"keys"` member, else a JWK Set.
    public static func detect(_ bytes: [UInt8]) -> KeyDocumentFormat {
        let text = String(decoding: bytes, as: UTF8.self)
        return text.contains("BEGIN CERTIFICATE") && !text.contains("\"keys\"") ? .pemCertificateMap : .jwks
    }

    /// The key set a document in this format holds.
    public func load(_ bytes: [UInt8]) throws(KeyLoadingError) -> KeySet {
        switch self {
        case .jwks: return try KeySet(jwks: bytes)
        case .pemCertificateMap: return try KeySet(pemCertificateMap: bytes)
        }
    }
}

/// A provider's key document as fetched, with the times that bound its use.
/// This is what instances share: each one parses it into its own `KeySet`.
public struct CachedKeyDocument: Sendable, Equatable {
    /// The document exactly as the key host sent it.
    public var body: [UInt8]
    public var format: KeyDocumentFormat
    /// Wall-clock seconds since the epoch at which it was fetched.
    public var fetchedAt: Double
    /// Wall-clock seconds at which it stops being fresh (fetch time plus the clamped TTL).
    public var expiresAt: Double

    public init(body: [UInt8], format: KeyDocumentFormat, fetchedAt: Double, expiresAt: Double) {
        self.body = body
        self.format = format
        self.fetchedAt = fetchedAt
        self.expiresAt = expiresAt
    }
}

/// The store many gateway instances share so that a key document is fetched
/// once for all of them (Redis in production, `InProcessKeyCache` for a single
/// instance and in tests).
///
/// Contract for implementations:
/// - Completions may run on any queue; `KeyManager` hops back to its own.
/// - Failures of the backing store are reported as "nothing cached" (`load`
///   → nil) or "not claimed" (`claimFetch` → false), never by blocking: the
///   manager then keeps serving its in-process snapshot.
/// - A stored document should be kept at least until its `expiresAt`.
public protocol SharedKeyCache: AnyObject, Sendable {
    /// The cached document for a provider, if any, with its remaining TTL.
    func load(provider: String, completion: @escaping @Sendable (CachedKeyDocument?) -> Void)
    func store(provider: String, document: CachedKeyDocument)
    /// Atomically claims the right to fetch this provider's keys for `interval` seconds (Redis: SET key NX PX). false → someone else fetched recently: reload from the cache instead.
    func claimFetch(provider: String, interval: Double, completion: @escaping @Sendable (Bool) -> Void)
    /// Drops the provider's document and claim: a reload pointed the provider at another
    /// key source, so what is cached under its name must not be installed again.
    func forget(provider: String)
}

extension SharedKeyCache {
    public func forget(provider: String) {}
}
