/// An immutable snapshot of one provider's verification keys, indexed by
/// `kid`. Built off the hot path (config load or JWKS fetch) and then only
/// read, so lookups take no lock. Replace it whole with
/// `CredentialVerifier.updateKeys(provider:keys:)`.
public struct KeySet: Sendable {
    /// The keys, in document order.
    public let keys: [VerificationKey]

    /// An empty set: every token fails with "unknown key" until keys arrive.
    public static let empty = KeySet(uncheckedKeys: [])

    init(uncheckedKeys: [VerificationKey]) { self.keys = uncheckedKeys }

    /// Refuses two keys with the same `kid`.
    public init(keys: [VerificationKey]) throws(KeyLoadingError) {
        var seen = Set<String>()
        for key in keys {
            if let kid = key.keyID, !seen.insert(kid).inserted { throw .duplicateKeyID(kid) }
        }
        self.keys = keys
    }

    /// A set holding one HMAC secret (UTF-8 bytes of `secret`).
    public init(hmacSecret secret: String, keyID: String? = nil, algorithm: JWSAlgorithm = .hs256) throws(KeyLoadingError) {
        self.keys = [try VerificationKey(hmacSecret: Array(secret.utf8), keyID: keyID, algorithm: algorithm)]
    }

    /// A set holding one PEM public key or certificate.
    public init(pemPublicKey pem: String, keyID: String? = nil, algorithm: JWSAlgorithm? = nil) throws(KeyLoadingError) {
        self.keys = [try VerificationKey(pem: pem, keyID: keyID, algorithm: algorithm)]
    }

    public var isEmpty: Bool { keys.isEmpty }
    public var count: Int { keys.count }

    /// The key for a token's `kid` (bytes) and `alg`, or for a token
    /// without `kid`. A key configured without a `kid` also serves tokens
    /// that carry one (app secrets). When several keys qualify, the one whose
    /// algorithm equals the token's wins; a key of another algorithm may still
    /// be returned, so the caller reports the mismatch rather than "unknown key".
    func key(forKeyID kid: UnsafeRawBufferPointer?, algorithm: JWSAlgorithm? = nil) -> VerificationKey? {
        var named: VerificationKey?
        var unnamed: VerificationKey?
        var unnamedCount = 0
        var unnamedMatching: VerificationKey?
        var unnamedMatchingCount = 0
        for key in keys {
            if let keyID = key.keyIDBytes {
                if let kid, kid.count == keyID.count, keyID.withUnsafeBytes({ $0.elementsEqual(kid) }) {
                    if algorithm == nil || key.algorithm == algorithm { return key }
                    named = named ?? key
                }
            } else {
                unnamed = key
                unnamedCount += 1
                if key.algorithm == algorithm {
                    unnamedMatching = key
                    unnamedMatchingCount += 1
                }
            }
        }
        if unnamedMatchingCount == 1 { return unnamedMatching }
        if let named { return named }
        if unnamedCount == 1 { return unnamed }
        // A token without kid against a set of exactly one key.
        if kid == nil && keys.count == 1 { return keys[0] }
        return nil
    }
}
