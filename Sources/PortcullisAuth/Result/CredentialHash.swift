/// The name a credential without `jti` is revoked by
/// (`VerifiedIdentity.credentialHash`): lower-case hex of the first 16 bytes
/// of SHA-256 over the credential as presented.
///
/// Computed once per verification (a cache miss), so it is on the hot path:
/// digest contexts are pooled (see `ContextPool`) and the hex is written
/// straight into the string's storage. What remains per call is one
/// `EVP_DigestInit_ex2`/`Update`/`Final` and the 32-byte string.
enum CredentialHash {
    private static let contexts = ContextPool<DigestContext> { DigestContext() }

    /// nil only when OpenSSL cannot run the digest (allocation failure).
    static func hex(of credential: UnsafeRawBufferPointer) -> String? {
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 64) { digest -> String? in
            let length = contexts.withContext { $0.digest(.sha256, credential, into: digest.baseAddress!) } ?? nil
            guard length == 32 else {
                OpenSSLError.clearQueue()
                return nil
            }
            return String(unsafeUninitializedCapacity: 32) { out in
                for index in 0..<16 {
                    out[2 * index] = hexDigit(digest[index] >> 4)
                    out[2 * index + 1] = hexDigit(digest[index] & 15)
                }
                return 32
            }
        }
    }

    @inline(__always)
    private static func hexDigit(_ value: UInt8) -> UInt8 {
        value < 10 ? UInt8(ascii: "0") &+ value : UInt8(ascii: "a") &+ (value &- 10)
    }
}
