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

    /// The key for a token's `kid` (bytes), or for a token without `kid`.
    /// A key configured without a `kid` also serves tokens that carry one
    /// (app secrets), but only when it is the set's single such key.
    func key(forKeyID kid: UnsafeRawBufferPointer?) -> VerificationKey? {
        var unnamed: VerificationKey?
        var unnamedCount = 0
        for key in keys {
            if let keyID = key.keyIDBytes {
                if let kid, kid.count == keyID.count, keyID.withUnsafeBytes({ $0.elementsEqual(kid) }) { return key }
            } else {
                unnamed = key
                unnamedCount += 1
            }
        }
        return unnamedCount == 1 ? unnamed : nil
    }
}
