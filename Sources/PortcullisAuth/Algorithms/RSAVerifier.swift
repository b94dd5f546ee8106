internal import COpenSSL

/// RS256/384/512 (PKCS #1 v1.5) and PS256/384/512 (PSS, salt = hash length,
/// MGF1 with the same hash; RFC 7518 §3.5) on an RSA key of at least 2048 bits.
///
/// Each pooled context holds an `EVP_PKEY_CTX` already through
/// `EVP_PKEY_verify_init` with padding and digest set, plus a digest context:
/// per token we hash the signing input and call `EVP_PKEY_verify` (measured
/// 22.2 µs vs 27.6 µs for `EVP_DigestVerifyInit` per token).
final class RSAVerifier: SignatureVerifier {
    let algorithm: JWSAlgorithm
    let maxSignatureLength: Int
    private let key: EVPKey
    private let digest: FetchedDigest
    private let pool: ContextPool<DigestedPKeyContext>

    init(key: EVPKey, algorithm: JWSAlgorithm) throws(KeyLoadingError) {
        guard algorithm.isRSA, let digest = algorithm.digest else { throw .algorithmMismatch(algorithm.rawValue, keyType: "RSA") }
        guard key.isA("RSA") else { throw .algorithmMismatch(algorithm.rawValue, keyType: "non-RSA") }
        guard key.bits >= 2048 else { throw .weakKey("RSA key is \(key.bits) bits; at least 2048 are required") }
        // Each verification costs about the cube of the size: a 16,384-bit key in a JWKS the
        // gateway fetches would make every token check a denial of service.
        guard key.bits <= 8192 else { throw .weakKey("RSA key is \(key.bits) bits; at most 8192 are accepted") }
        self.algorithm = algorithm
        self.key = key
        self.digest = digest
        self.maxSignatureLength = (key.bits + 7) / 8
        let pss = algorithm.isPSS
        self.pool = ContextPool {
            DigestedPKeyContext.make(key: key, digest: digest, for: .verify) { context in
                guard EVP_PKEY_CTX_set_rsa_padding(context, pss ? RSA_PKCS1_PSS_PADDING : RSA_PKCS1_PADDING) > 0 else { return false }
                if pss {
                    return EVP_PKEY_CTX_set_rsa_pss_saltlen(context, RSA_PSS_SALTLEN_DIGEST) > 0
                        && EVP_PKEY_CTX_set_rsa_mgf1_md(context, digest.pointer) > 0
                }
                return true
            }
        }
        guard pool.prime() else { throw .openSSL(OpenSSLError.drain("EVP_PKEY_verify_init(RSA)")) }
    }

    func verify(signingInput: UnsafeRawBufferPointer, signature: UnsafeRawBufferPointer) -> SignatureCheck {
        guard signature.count == maxSignatureLength else { return .malformed }
        return pool.withContext { $0.verify(digest: digest, signingInput: signingInput, signature: signature) } ?? .internalError
    }
}
