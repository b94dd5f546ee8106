internal import COpenSSL

/// A key that signs compact JWS for tests, the load harness and
/// `portcullis mint`. Not used on the verification path.
public final class SigningKey: Sendable {
    enum Material: Sendable {
        case hmac([UInt8])
        case privateKey(EVPKey)
    }

    public let algorithm: JWSAlgorithm
    let material: Material
    /// Contexts set up once (see `PreparedSigner`); nil when the key does not fit the
    /// algorithm, and `sign` then takes the one-shot path, which says why it fails.
    let prepared: PreparedSigner?

    init(algorithm: JWSAlgorithm, key: EVPKey) {
        self.algorithm = algorithm
        self.material = .privateKey(key)
        self.prepared = PreparedSigner.make(algorithm: algorithm, material: material)
    }

    /// An HMAC secret (any length: minting weak-key tokens is a test need).
    public init(hmacSecret: [UInt8], algorithm: JWSAlgorithm = .hs256) {
        self.algorithm = algorithm
        self.material = .hmac(hmacSecret)
        self.prepared = PreparedSigner.make(algorithm: algorithm, material: material)
    }

    /// A PEM private key (PKCS #8 or traditional). The algorithm defaults
    /// from the key type (RSA → RS256, P-256 → ES256, P-384 → ES384, Ed25519 → EdDSA).
    public init(privateKeyPEM pem: String, algorithm: JWSAlgorithm? = nil) throws(KeyLoadingError) {
        let key = try withMemoryBIO(Array(pem.utf8)) { bio throws(KeyLoadingError) in
            guard let pointer = PEM_read_bio_PrivateKey(bio, nil, nil, nil) else {
                throw .invalidPEM("not a PEM private key (\(OpenSSLError.drain("PEM_read_bio_PrivateKey").reasons.first ?? "unreadable"))")
            }
            return EVPKey(takingOwnershipOf: pointer)
        }
        guard let algorithm = algorithm ?? key.defaultAlgorithm(rsa: .rs256) else { throw .unsupported("private key type") }
        self.algorithm = algorithm
        self.material = .privateKey(key)
        self.prepared = PreparedSigner.make(algorithm: algorithm, material: material)
    }

    /// The JWS signature of `input` (raw r ‖ s for ECDSA).
    func sign(_ input: [UInt8]) throws(KeyLoadingError) -> [UInt8] {
        try input.withUnsafeBytes { input in
            Result { () throws(KeyLoadingError) in try withSignature(of: input) { Array($0) } }
        }.get()
    }

    /// Calls `body` with the JWS signature of `input` (raw r ‖ s for ECDSA), written on
    /// the stack by the prepared contexts when there are some.
    func withSignature<Result>(of input: UnsafeRawBufferPointer, _ body: (UnsafeBufferPointer<UInt8>) -> Result) throws(KeyLoadingError) -> Result {
        guard let prepared else {
            let signature = try signOneShot(input)
            return signature.withUnsafeBufferPointer { body($0) }
        }
        let signed = withUnsafeTemporaryAllocation(of: UInt8.self, capacity: prepared.maxSignatureLength) { output -> Result? in
            guard let length = prepared.sign(input, into: output.baseAddress!) else { return nil }
            return body(UnsafeBufferPointer(rebasing: output[0..<length]))
        }
        guard let signed else { throw .openSSL(OpenSSLError.drain("sign (\(algorithm.rawValue))")) }
        return signed
    }

    /// One signature with contexts made for it: keys that do not fit their algorithm.
    private func signOneShot(_ inputBuffer: UnsafeRawBufferPointer) throws(KeyLoadingError) -> [UInt8] {
        let input = Array(inputBuffer)
        switch material {
        case .hmac(let secret):
            guard let digest = algorithm.digest, algorithm.isHMAC else { throw .algorithmMismatch(algorithm.rawValue, keyType: "oct") }
            var out = [UInt8](repeating: 0, count: 64)
            var length = 0
            guard EVP_Q_mac(nil, "HMAC", nil, digest.name, nil, secret, secret.count, input, input.count, &out, 64, &length) != nil else {
                throw .openSSL(OpenSSLError.drain("EVP_Q_mac"))
            }
            return Array(out.prefix(length))
        case .privateKey(let key):
            guard let context = EVP_MD_CTX_new() else { throw .openSSL(OpenSSLError.drain("EVP_MD_CTX_new")) }
            defer { EVP_MD_CTX_free(context) }
            var pkeyContext: OpaquePointer?
            guard EVP_DigestSignInit_ex(context, &pkeyContext, algorithm.digest?.name, nil, nil, key.pointer, nil) == 1 else {
                throw .openSSL(OpenSSLError.drain("EVP_DigestSignInit_ex"))
            }
            if algorithm.isPSS, let pkeyContext {
                guard EVP_PKEY_CTX_set_rsa_padding(pkeyContext, RSA_PKCS1_PSS_PADDING) > 0,
                      EVP_PKEY_CTX_set_rsa_pss_saltlen(pkeyContext, RSA_PSS_SALTLEN_DIGEST) > 0 else {
                    throw .openSSL(OpenSSLError.drain("EVP_PKEY_CTX_set_rsa_padding"))
                }
            }
            var length = 0
            guard EVP_DigestSign(context, nil, &length, input, input.count) == 1 else { throw .openSSL(OpenSSLError.drain("EVP_DigestSign")) }
            var signature = [UInt8](repeating: 0, count: length)
            guard EVP_DigestSign(context, &signature, &length, input, input.count) == 1 else {
                throw .openSSL(OpenSSLError.drain("EVP_DigestSign"))
            }
            signature.removeLast(signature.count - length)
            if let curve = algorithm.curve {
                var raw = [UInt8](repeating: 0, count: 2 * curve.coordinateSize)
                let converted = signature.withUnsafeBufferPointer { der in
                    raw.withUnsafeMutableBufferPointer { ECDSASignature.raw(fromDER: der, coordinate: curve.coordinateSize, into: $0.baseAddress!) }
                }
                guard converted else { throw .unsupported("unexpected ECDSA signature encoding") }
                return raw
            }
            return signature
        }
    }
}
