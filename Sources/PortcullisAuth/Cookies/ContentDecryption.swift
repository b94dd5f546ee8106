internal import COpenSSL

/// JWE content encryption algorithms accepted for session cookies.
enum ContentEncryption: String, Sendable {
    case a256gcm = "A256GCM"
    case a256cbcHS512 = "A256CBC-HS512"

    var keyLength: Int { self == .a256gcm ? 32 : 64 }
    var ivLength: Int { self == .a256gcm ? 12 : 16 }
    var tagLength: Int { self == .a256gcm ? 16 : 32 }
}

/// Decrypts `dir` JWE content with one derived key. Contexts are pooled
/// with the key already set (see `ContextPool`).
protocol ContentDecryptor: Sendable {
    var encryption: ContentEncryption { get }
    /// The plaintext, or nil when authentication or decryption fails.
    func decrypt(aad: UnsafeRawBufferPointer, iv: UnsafeRawBufferPointer, ciphertext: UnsafeRawBufferPointer,
                 tag: UnsafeRawBufferPointer) -> [UInt8]?
}

/// Owns a fetched `EVP_CIPHER`, shared process-wide.
final class FetchedCipher: @unchecked Sendable {
    // @unchecked Sendable: fetched algorithm objects are immutable and shareable.
    let pointer: OpaquePointer
    init?(_ name: String) {
        guard let pointer = EVP_CIPHER_fetch(nil, name, nil) else { return nil }
        self.pointer = pointer
    }
    deinit { EVP_CIPHER_free(pointer) }

    static let aes256GCM = FetchedCipher("AES-256-GCM")!
    static let aes256CBC = FetchedCipher("AES-256-CBC")!
}

/// A256GCM (RFC 7518 §5.3): 96-bit IV, 128-bit tag, AAD = the protected
/// header segment as received.
final class AESGCMDecryptor: ContentDecryptor {
    let encryption = ContentEncryption.a256gcm
    private let pool: ContextPool<CipherContext>

    init(key: [UInt8]) throws(KeyLoadingError) {
        guard key.count == 32 else { throw .weakKey("A256GCM needs a 32-byte key") }
        pool = ContextPool {
            guard let context = CipherContext(),
                  EVP_DecryptInit_ex2(context.pointer, FetchedCipher.aes256GCM.pointer, key, nil, nil) == 1 else { return nil }
            return context
        }
        guard pool.prime() else { throw .openSSL(OpenSSLError.drain("EVP_DecryptInit_ex2(AES-256-GCM)")) }
    }

    func decrypt(aad: UnsafeRawBufferPointer, iv: UnsafeRawBufferPointer, ciphertext: UnsafeRawBufferPointer,
                 tag: UnsafeRawBufferPointer) -> [UInt8]? {
        guard iv.count == 12, tag.count == 16 else { return nil }
        let result = pool.withContext { context -> [UInt8]? in
            let c = context.pointer
            guard EVP_DecryptInit_ex2(c, nil, nil, iv.baseAddress?.assumingMemoryBound(to: UInt8.self), nil) == 1 else { return nil }
            var length: Int32 = 0
            guard EVP_DecryptUpdate(c, nil, &length, aad.baseAddress?.assumingMemoryBound(to: UInt8.self), Int32(aad.count)) == 1 else { return nil }
            var failed = false
            let plaintext = [UInt8](unsafeUninitializedCapacity: ciphertext.count + 16) { buffer, initialized in
                var written: Int32 = 0
                var final: Int32 = 0
                if EVP_DecryptUpdate(c, buffer.baseAddress, &written, ciphertext.baseAddress?.assumingMemoryBound(to: UInt8.self),
                                     Int32(ciphertext.count)) != 1
                    || EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_AEAD_SET_TAG, 16, UnsafeMutableRawPointer(mutating: tag.baseAddress)) != 1
                    || EVP_DecryptFinal_ex(c, buffer.baseAddress! + Int(written), &final) != 1 {
                    failed = true
                    buffer.initialize(repeating: 0)
                    initialized = 0
                    return
                }
                initialized = Int(written + final)
            }
            return failed ? nil : plaintext
        } ?? nil
        if result == nil { OpenSSLError.clearQueue() }
        return result
    }
}

/// A256CBC-HS512 (RFC 7518 §5.2): MAC_KEY = K[0..32), ENC_KEY = K[32..64);
/// the tag (first 32 bytes of HMAC-SHA-512 over AAD ‖ IV ‖ C ‖ AL) is
/// checked in constant time before any decryption.
final class AESCBCHMACDecryptor: ContentDecryptor {
    let encryption = ContentEncryption.a256cbcHS512
    private let mac: HMACVerifier
    private let pool: ContextPool<CipherContext>

    init(key: [UInt8]) throws(KeyLoadingError) {
        guard key.count == 64 else { throw .weakKey("A256CBC-HS512 needs a 64-byte key") }
        mac = try HMACVerifier(secret: Array(key[0..<32]), algorithm: .hs512)
        let encryptionKey = Array(key[32..<64])
        pool = ContextPool {
            guard let context = CipherContext(),
                  EVP_DecryptInit_ex2(context.pointer, FetchedCipher.aes256CBC.pointer, encryptionKey, nil, nil) == 1 else { return nil }
            return context
        }
        guard pool.prime() else { throw .openSSL(OpenSSLError.drain("EVP_DecryptInit_ex2(AES-256-CBC)")) }
    }

    func decrypt(aad: UnsafeRawBufferPointer, iv: UnsafeRawBufferPointer, ciphertext: UnsafeRawBufferPointer,
                 tag: UnsafeRawBufferPointer) -> [UInt8]? {
        guard iv.count == 16, tag.count == 32, ciphertext.count > 0, ciphertext.count % 16 == 0 else { return nil }
        var bitLength = UInt64(aad.count * 8).bigEndian
        let authentic = withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 64) { digest -> Bool in
            let ok = withUnsafeBytes(of: &bitLength) { al in
                mac.mac(parts: aad, iv, ciphertext, al, into: digest.baseAddress!)
            }
            return ok && CRYPTO_memcmp(digest.baseAddress, tag.baseAddress, 32) == 0
        }
        guard authentic else { OpenSSLError.clearQueue(); return nil }
        let result = pool.withContext { context -> [UInt8]? in
            let c = context.pointer
            guard EVP_DecryptInit_ex2(c, nil, nil, iv.baseAddress?.assumingMemoryBound(to: UInt8.self), nil) == 1 else { return nil }
            var failed = false
            let plaintext = [UInt8](unsafeUninitializedCapacity: ciphertext.count + 16) { buffer, initialized in
                var written: Int32 = 0
                var final: Int32 = 0
                if EVP_DecryptUpdate(c, buffer.baseAddress, &written, ciphertext.baseAddress?.assumingMemoryBound(to: UInt8.self),
                                     Int32(ciphertext.count)) != 1
                    || EVP_DecryptFinal_ex(c, buffer.baseAddress! + Int(written), &final) != 1 {
                    failed = true
                    buffer.initialize(repeating: 0)
                    initialized = 0
                    return
                }
                initialized = Int(written + final)
            }
            return failed ? nil : plaintext
        } ?? nil
        if result == nil { OpenSSLError.clearQueue() }
        return result
    }
}
