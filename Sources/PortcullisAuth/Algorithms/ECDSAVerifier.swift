internal import COpenSSL

/// ES256 (P-256) and ES384 (P-384). The JWS signature is raw `r ‖ s`, each
/// exactly the coordinate size (RFC 7518 §3.4); both must be in [1, n-1].
/// It is re-encoded as DER on the stack (no BIGNUM allocations) and checked
/// with `EVP_PKEY_verify` on the digest, on a context set up once.
final class ECDSAVerifier: SignatureVerifier {
    let algorithm: JWSAlgorithm
    let maxSignatureLength: Int
    private let curve: ECCurve
    private let order: [UInt8]
    private let digest: FetchedDigest
    private let pool: ContextPool<DigestedPKeyContext>

    init(key: EVPKey, algorithm: JWSAlgorithm) throws(KeyLoadingError) {
        guard let curve = algorithm.curve, let digest = algorithm.digest else { throw .algorithmMismatch(algorithm.rawValue, keyType: "EC") }
        guard key.isA("EC") else { throw .algorithmMismatch(algorithm.rawValue, keyType: "non-EC") }
        let group = key.ecGroupName ?? "unknown"
        guard group == curve.opensslGroup else { throw .curveMismatch(expected: curve.jwkName, found: group) }
        self.algorithm = algorithm
        self.curve = curve
        self.order = curve.order
        self.digest = digest
        self.maxSignatureLength = 2 * curve.coordinateSize
        self.pool = ContextPool {
            DigestedPKeyContext.make(key: key, digest: digest, for: .verify) { _ in true }
        }
        guard pool.prime() else { throw .openSSL(OpenSSLError.drain("EVP_PKEY_verify_init(EC)")) }
    }

    func verify(signingInput: UnsafeRawBufferPointer, signature: UnsafeRawBufferPointer) -> SignatureCheck {
        let size = curve.coordinateSize
        guard signature.count == 2 * size else { return .malformed }
        let r = UnsafeRawBufferPointer(rebasing: signature[0..<size])
        let s = UnsafeRawBufferPointer(rebasing: signature[size..<(2 * size)])
        guard inRange(r), inRange(s) else { return .malformed }
        return withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 2 * size + 16) { der -> SignatureCheck in
            let length = ECDSAVerifier.encodeDER(r: r, s: s, into: der.baseAddress!)
            let derSignature = UnsafeRawBufferPointer(start: der.baseAddress, count: length)
            return pool.withContext { $0.verify(digest: digest, signingInput: signingInput, signature: derSignature) } ?? .internalError
        }
    }

    /// 1 ≤ value ≤ n − 1, comparing big-endian bytes of equal length.
    private func inRange(_ value: UnsafeRawBufferPointer) -> Bool {
        var nonZero = false
        for byte in value where byte != 0 { nonZero = true; break }
        guard nonZero else { return false }
        for index in 0..<value.count {
            if value[index] < order[index] { return true }
            if value[index] > order[index] { return false }
        }
        return false  // equal to n
    }

    /// DER `SEQUENCE { INTEGER r, INTEGER s }`; short-form lengths suffice
    /// for P-256 and P-384. Returns the encoded length.
    static func encodeDER(r: UnsafeRawBufferPointer, s: UnsafeRawBufferPointer, into out: UnsafeMutablePointer<UInt8>) -> Int {
        var position = 2
        func writeInteger(_ value: UnsafeRawBufferPointer) {
            var start = 0
            while start < value.count - 1 && value[start] == 0 { start += 1 }
            let pad = value[start] & 0x80 != 0 ? 1 : 0
            out[position] = 0x02
            out[position + 1] = UInt8(value.count - start + pad)
            position += 2
            if pad == 1 { out[position] = 0; position += 1 }
            for index in start..<value.count { out[position] = value[index]; position += 1 }
        }
        writeInteger(r)
        writeInteger(s)
        out[0] = 0x30
        out[1] = UInt8(position - 2)
        return position
    }
}
