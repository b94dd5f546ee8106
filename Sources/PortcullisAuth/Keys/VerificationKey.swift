/// One verification key bound to exactly one algorithm (RFC 8725 §3.1), so
/// the token's `alg` can only select it, never change how it is used.
/// OpenSSL state is built at load time; verification is lock-free apart from
/// borrowing a pooled context.
public final class VerificationKey: Sendable {
    /// The JWK / certificate-map `kid`, if any.
    public let keyID: String?
    /// The only algorithm this key verifies.
    public let algorithm: JWSAlgorithm
    let keyIDBytes: [UInt8]?
    let verifier: any SignatureVerifier

    init(keyID: String?, verifier: any SignatureVerifier) {
        self.keyID = keyID
        self.keyIDBytes = keyID.map { Array($0.utf8) }
        self.algorithm = verifier.algorithm
        self.verifier = verifier
    }

    /// An HMAC secret (raw bytes, as jose's `SignJWT` with `TextEncoder` uses
    /// them). Secrets under 32 bytes are refused (RFC 7518 §3.2).
    public convenience init(hmacSecret: [UInt8], keyID: String? = nil, algorithm: JWSAlgorithm = .hs256) throws(KeyLoadingError) {
        self.init(keyID: keyID, verifier: try HMACVerifier(secret: hmacSecret, algorithm: algorithm))
    }

    /// A PEM public key (`BEGIN PUBLIC KEY`) or certificate (`BEGIN CERTIFICATE`).
    /// The algorithm defaults from the key type (RSA → RS256, P-256 → ES256,
    /// P-384 → ES384, Ed25519 → EdDSA).
    public convenience init(pem: String, keyID: String? = nil, algorithm: JWSAlgorithm? = nil) throws(KeyLoadingError) {
        let key = pem.contains("BEGIN CERTIFICATE") ? try EVPKey.pemCertificate(pem) : try EVPKey.pemPublicKey(pem)
        guard let algorithm = algorithm ?? key.defaultAlgorithm(rsa: .rs256) else { throw .unsupported("key type of PEM") }
        self.init(keyID: keyID, verifier: try makeVerifier(key: key, algorithm: algorithm))
    }

    /// Checks one JWS signature (raw bytes, `r ‖ s` for ECDSA) over a
    /// signing input with this key's algorithm. Exposed for benchmarks and
    /// tools; the verifier uses it internally.
    public func isValidSignature(_ signature: UnsafeRawBufferPointer, for signingInput: UnsafeRawBufferPointer) -> Bool {
        verify(signingInput: signingInput, signature: signature) == .valid
    }

    @inline(__always)
    func verify(signingInput: UnsafeRawBufferPointer, signature: UnsafeRawBufferPointer) -> SignatureCheck {
        verifier.verify(signingInput: signingInput, signature: signature)
    }
}
