internal import COpenSSL

/// EdDSA with Ed25519 (RFC 8037). OpenSSL requires one-shot
/// `EVP_DigestVerify` with a NULL digest; the pooled `EVP_MD_CTX` is
/// re-initialised per token (Ed25519 has no per-key precomputation that an
/// init would throw away, so this costs well under 1% of the 150 µs verify).
final class EdDSAVerifier: SignatureVerifier {
    let algorithm: JWSAlgorithm = .edDSA
    let maxSignatureLength = 64
    private let key: EVPKey
    private let pool: ContextPool<DigestContext>

    init(key: EVPKey) throws(KeyLoadingError) {
        guard key.isA("ED25519") else { throw .algorithmMismatch("EdDSA", keyType: "non-Ed25519") }
        self.key = key
        self.pool = ContextPool { DigestContext() }
        guard pool.prime() else { throw .openSSL(OpenSSLError.drain("EVP_MD_CTX_new")) }
    }

    func verify(signingInput: UnsafeRawBufferPointer, signature: UnsafeRawBufferPointer) -> SignatureCheck {
        guard signature.count == 64 else { return .malformed }
        return pool.withContext { context -> SignatureCheck in
            guard EVP_DigestVerifyInit_ex(context.pointer, nil, nil, nil, nil, key.pointer, nil) == 1 else {
                OpenSSLError.clearQueue()
                return .internalError
            }
            let result = EVP_DigestVerify(context.pointer, signature.baseAddress?.assumingMemoryBound(to: UInt8.self), 64,
                                          signingInput.baseAddress?.assumingMemoryBound(to: UInt8.self), signingInput.count)
            if result == 1 { return .valid }
            OpenSSLError.clearQueue()
            return .invalid
        } ?? .internalError
    }
}
