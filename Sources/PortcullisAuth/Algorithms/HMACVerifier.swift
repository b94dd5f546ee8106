internal import COpenSSL

/// HS256/384/512 with a secret of at least 32 bytes (RFC 7518 §3.2).
/// One `HMACContext` per concurrent caller holds the keyed state (the
/// digest state after the key blocks), so a MAC hashes only the input.
final class HMACVerifier: SignatureVerifier {
    let algorithm: JWSAlgorithm
    let macLength: Int
    private let pool: ContextPool<HMACContext>
    var maxSignatureLength: Int { macLength }

    init(secret: [UInt8], algorithm: JWSAlgorithm) throws(KeyLoadingError) {
        guard algorithm.isHMAC, let digest = algorithm.digest else { throw .algorithmMismatch(algorithm.rawValue, keyType: "oct") }
        guard secret.count >= 32 else { throw .weakKey("HMAC secret is \(secret.count) bytes; at least 32 are required") }
        self.algorithm = algorithm
        self.macLength = digest.size
        self.pool = ContextPool { HMACContext(key: secret, digest: digest) }
        guard pool.prime() else { throw .openSSL(OpenSSLError.drain("HMAC key setup")) }
    }

    /// Computes the MAC of `input` into `output` (at least 64 bytes).
    @inline(__always)
    func mac(_ input: UnsafeRawBufferPointer, into output: UnsafeMutablePointer<UInt8>) -> Bool {
        pool.withContext { context -> Bool in
            context.begin() && context.update(input) && context.finish(into: output)
        } ?? false
    }

    /// The MAC of the concatenation of four parts (A256CBC-HS512's
    /// AAD ‖ IV ‖ C ‖ AL) without joining them.
    func mac(parts a: UnsafeRawBufferPointer, _ b: UnsafeRawBufferPointer, _ c: UnsafeRawBufferPointer,
             _ d: UnsafeRawBufferPointer, into output: UnsafeMutablePointer<UInt8>) -> Bool {
        pool.withContext { context -> Bool in
            context.begin() && context.update(a) && context.update(b) && context.update(c) && context.update(d)
                && context.finish(into: output)
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
