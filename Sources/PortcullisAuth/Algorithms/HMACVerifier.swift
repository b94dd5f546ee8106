internal import COpenSSL

/// HS256/384/512 with a secret of at least 32 bytes (RFC 7518 §3.2).
/// One `EVP_MAC_CTX` per concurrent caller holds the keyed state;
/// `EVP_MAC_init` with a NULL key rewinds it to the keyed start.
final class HMACVerifier: SignatureVerifier {
    let algorithm: JWSAlgorithm
    let macLength: Int
    private let pool: ContextPool<MACContext>
    var maxSignatureLength: Int { macLength }

    init(secret: [UInt8], algorithm: JWSAlgorithm) throws(KeyLoadingError) {
        guard algorithm.isHMAC, let digest = algorithm.digest else { throw .algorithmMismatch(algorithm.rawValue, keyType: "oct") }
        guard secret.count >= 32 else { throw .weakKey("HMAC secret is \(secret.count) bytes; at least 32 are required") }
        self.algorithm = algorithm
        self.macLength = digest.size
        let digestName = digest.name
        self.pool = ContextPool {
            HMACVerifier.makeContext(secret: secret, digestName: digestName)
        }
        guard pool.prime() else { throw .openSSL(OpenSSLError.drain("EVP_MAC_init(HMAC)")) }
    }

    static func makeContext(secret: [UInt8], digestName: String) -> MACContext? {
        guard let mac = FetchedMAC.hmac, let raw = EVP_MAC_CTX_new(mac.pointer) else { return nil }
        let context = MACContext(takingOwnershipOf: raw)
        var params = [
            OSSL_PARAM_construct_utf8_string(ParameterNames.digest, ParameterNames.digestName(digestName), 0),
            OSSL_PARAM_construct_end(),
        ]
        let ok = secret.withUnsafeBufferPointer { key in
            EVP_MAC_init(raw, key.baseAddress, key.count, &params) == 1
        }
        return ok ? context : nil
    }

    /// Computes the MAC of `input` into `output` (at least 64 bytes).
    @inline(__always)
    func mac(_ input: UnsafeRawBufferPointer, into output: UnsafeMutablePointer<UInt8>) -> Bool {
        pool.withContext { context -> Bool in
            var length = 0
            return EVP_MAC_init(context.pointer, nil, 0, nil) == 1
                && EVP_MAC_update(context.pointer, input.baseAddress?.assumingMemoryBound(to: UInt8.self), input.count) == 1
                && EVP_MAC_final(context.pointer, output, &length, 64) == 1
                && length == macLength
        } ?? false
    }

    /// The MAC of the concatenation of four parts (A256CBC-HS512's
    /// AAD ‖ IV ‖ C ‖ AL) without joining them.
    func mac(parts a: UnsafeRawBufferPointer, _ b: UnsafeRawBufferPointer, _ c: UnsafeRawBufferPointer,
             _ d: UnsafeRawBufferPointer, into output: UnsafeMutablePointer<UInt8>) -> Bool {
        pool.withContext { context -> Bool in
            var length = 0
            guard EVP_MAC_init(context.pointer, nil, 0, nil) == 1 else { return false }
            for part in [a, b, c, d] where part.count > 0 {
                guard EVP_MAC_update(context.pointer, part.baseAddress?.assumingMemoryBound(to: UInt8.self), part.count) == 1 else {
                    return false
                }
            }
            return EVP_MAC_final(context.pointer, output, &length, 64) == 1 && length == macLength
        } ?? false
    }

    func verify(signingInput: UnsafeRawBufferPointer, signature: UnsafeRawBufferPointer) -> SignatureCheck {
        guard signature.count == macLength else { return .malformed }
        return withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 64) { buffer -> SignatureCheck in
            guard mac(signingInput, into: buffer.baseAddress!) else {
                OpenSSLError.clearQueue()
                return .internalError
            }
            return CRYPTO_memcmp(buffer.baseAddress, signature.baseAddress, macLength) == 0 ? .valid : .invalid
        }
    }
}
