internal import COpenSSL

/// A key's signing state, set up once when the key is loaded: what a signature costs is
/// then the digest and the private-key operation, as in `openssl speed`.
///
/// The one-shot path (`EVP_DigestSignInit_ex` per call) fetched the digest by name, made an
/// `EVP_PKEY_CTX`, fetched the signature algorithm from the provider and duplicated the key
/// into it on every signature: on this machine an ES256 `portcullis mint` took about twice
/// the bare P-256 signature. Identity assertions sign on the request path (a credential's
/// first request to an upstream, then every half lifetime), so this is hot-path work.
///
/// - ECDSA, RSA PKCS #1 v1.5 and PSS: the signing input is hashed with a pooled digest
///   context and a pre-fetched `EVP_MD`, and `EVP_PKEY_sign` runs on a pooled context whose
///   padding and digest were set once (`DigestedPKeyContext`, as the verifiers use).
///   ECDSA's DER output becomes raw `r ‖ s` on the stack.
/// - Ed25519: `EVP_DigestSign` one-shot (the only form OpenSSL offers), on a pooled context.
/// - HMAC: the keyed inner/outer digest states of `HMACContext`.
///
/// Threading: contexts come from `ContextPool`s; any thread.
final class PreparedSigner: Sendable {
    private enum Kind {
        case hmac(ContextPool<HMACContext>)
        case digestThenSign(ContextPool<DigestedPKeyContext>, FetchedDigest, ecdsaCoordinate: Int?)
        case oneShot(ContextPool<DigestContext>, EVPKey)
    }

    private let kind: Kind
    /// The most bytes `sign` writes (a raw JWS signature).
    let maxSignatureLength: Int

    private init(kind: Kind, maxSignatureLength: Int) {
        self.kind = kind
        self.maxSignatureLength = maxSignatureLength
    }

    /// nil when the key is not of the type the algorithm names (negative-test tokens): the
    /// caller then signs with what the key is, one-shot.
    static func make(algorithm: JWSAlgorithm, material: SigningKey.Material) -> PreparedSigner? {
        defer { OpenSSLError.clearQueue() }
        switch material {
        case .hmac(let secret):
            guard algorithm.isHMAC, let digest = algorithm.digest else { return nil }
            let pool = ContextPool { HMACContext(key: secret, digest: digest) }
            guard pool.prime() else { return nil }
            return PreparedSigner(kind: .hmac(pool), maxSignatureLength: digest.size)
        case .privateKey(let key):
            if algorithm == .edDSA {
                guard key.isA("ED25519") else { return nil }
                let pool = ContextPool { DigestContext() }
                guard pool.prime() else { return nil }
                return PreparedSigner(kind: .oneShot(pool, key), maxSignatureLength: 64)
            }
            guard let digest = algorithm.digest, !algorithm.isHMAC else { return nil }
            let coordinate = algorithm.curve?.coordinateSize
            if let curve = algorithm.curve {
                guard key.isA("EC"), key.ecGroupName == curve.opensslGroup else { return nil }
            } else {
                guard key.isA("RSA") else { return nil }
            }
            let pss = algorithm.isPSS
            let pool = ContextPool {
                DigestedPKeyContext.make(key: key, digest: digest, for: .sign) { context in
                    !pss || (EVP_PKEY_CTX_set_rsa_padding(context, RSA_PKCS1_PSS_PADDING) > 0
                        && EVP_PKEY_CTX_set_rsa_pss_saltlen(context, RSA_PSS_SALTLEN_DIGEST) > 0)
                }
            }
            guard pool.prime() else { return nil }
            let length = coordinate.map { 2 * $0 } ?? (key.bits + 7) / 8
            return PreparedSigner(kind: .digestThenSign(pool, digest, ecdsaCoordinate: coordinate), maxSignatureLength: length)
        }
    }

    /// Writes the JWS signature of `input` (raw `r ‖ s` for ECDSA) into `output`, which holds
    /// at least `maxSignatureLength` bytes; the length written, or nil (the error queue is
    /// left for the caller to drain).
    func sign(_ input: UnsafeRawBufferPointer, into output: UnsafeMutablePointer<UInt8>) -> Int? {
        switch kind {
        case .hmac(let pool):
            return pool.withContext { context -> Int? in
                guard context.begin(), context.update(input), context.finish(into: output) else { return nil }
                return context.size
            } ?? nil
        case .oneShot(let pool, let key):
            return pool.withContext { context -> Int? in
                guard EVP_DigestSignInit_ex(context.pointer, nil, nil, nil, nil, key.pointer, nil) == 1 else { return nil }
                var length = maxSignatureLength
                guard EVP_DigestSign(context.pointer, output, &length, input.baseAddress, input.count) == 1 else { return nil }
                return length
            } ?? nil
        case .digestThenSign(let pool, let digest, let coordinate):
            return pool.withContext { context -> Int? in
                withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 64 + 160) { scratch -> Int? in
                    let hash = scratch.baseAddress!, der = hash + 64
                    guard let hashLength = context.digestContext.digest(digest, input, into: hash) else { return nil }
                    guard let coordinate else {
                        var length = maxSignatureLength
                        guard EVP_PKEY_sign(context.pkey.pointer, output, &length, hash, hashLength) == 1 else { return nil }
                        return length
                    }
                    var length = 160
                    guard EVP_PKEY_sign(context.pkey.pointer, der, &length, hash, hashLength) == 1,
                          ECDSASignature.raw(fromDER: UnsafeBufferPointer(start: der, count: length), coordinate: coordinate, into: output)
                    else { return nil }
                    return 2 * coordinate
                }
            } ?? nil
        }
    }
}

enum ECDSASignature {
    /// DER `SEQUENCE { INTEGER r, INTEGER s }` → fixed-size `r ‖ s` (RFC 7518 §3.4) in
    /// `output` (`2 * coordinate` bytes). False for anything but that shape.
    static func raw(fromDER der: UnsafeBufferPointer<UInt8>, coordinate: Int, into output: UnsafeMutablePointer<UInt8>) -> Bool {
        var index = 0
        func readLength() -> Int? {
            guard index < der.count else { return nil }
            let first = der[index]; index += 1
            if first < 0x80 { return Int(first) }
            guard first == 0x81, index < der.count else { return nil }
            let value = der[index]; index += 1
            return Int(value)
        }
        func readInteger(into target: UnsafeMutablePointer<UInt8>) -> Bool {
            guard index < der.count, der[index] == 0x02 else { return false }
            index += 1
            guard let length = readLength(), length > 0, index + length <= der.count else { return false }
            var start = index, count = length
            index += length
            while count > coordinate, der[start] == 0 { start += 1; count -= 1 }
            guard count <= coordinate else { return false }
            let pad = coordinate - count
            target.initialize(repeating: 0, count: pad)
            for offset in 0..<count { target[pad + offset] = der[start + offset] }
            return true
        }
        guard der.first == 0x30 else { return false }
        index = 1
        guard readLength() != nil else { return false }
        return readInteger(into: output) && readInteger(into: output + coordinate)
    }
}
