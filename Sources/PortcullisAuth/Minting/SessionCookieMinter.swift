internal import COpenSSL

/// Mints session cookies as NextAuth v4 and Auth.js v5 write them (`dir` JWE), for the
/// demo, `portcullis mint` and tests. v4: A256GCM with key = HKDF-SHA-256(secret, "",
/// "NextAuth.js Generated Encryption Key", 32), no `kid`. v5: A256CBC-HS512 (Auth.js's
/// default `enc`) with key = HKDF-SHA-256(secret, cookie name, "Auth.js Generated
/// Encryption Key (<cookie name>)", 64) and the key's JWK thumbprint (SHA-512) as `kid`.
public enum SessionCookieMinter {
    /// A NextAuth v4 session token.
    public static func nextAuth(secret: String, claims: JSONValue) throws(KeyLoadingError) -> String {
        let key = try hkdfSHA256(secret: Array(secret.utf8), salt: [],
                                 info: Array("NextAuth.js Generated Encryption Key".utf8), length: 32)
        return try seal(claims: claims, key: key, header: "{\"alg\":\"dir\",\"enc\":\"A256GCM\"}")
    }

    /// An Auth.js v5 session token for the cookie `cookieName` (the salt).
    public static func authjs(secret: String, cookieName: String = "authjs.session-token",
                              claims: JSONValue) throws(KeyLoadingError) -> String {
        let key = try SessionCookieProvider.authjsKey(secret: secret, salt: cookieName, encryption: .a256cbcHS512)
        let kid = SessionCookieProvider.thumbprint(key)
        return try sealCBC(claims: claims, key: key, header: "{\"alg\":\"dir\",\"enc\":\"A256CBC-HS512\",\"kid\":\"\(kid)\"}")
    }

    /// A256CBC-HS512 (RFC 7518 §5.2.2.1): AES-256-CBC with PKCS #7 padding under K[32..64),
    /// tag = the first 32 bytes of HMAC-SHA-512 under K[0..32) over AAD ‖ IV ‖ C ‖ AL.
    static func sealCBC(claims: JSONValue, key: [UInt8], header: String) throws(KeyLoadingError) -> String {
        let protected = Base64URL.encode(Array(header.utf8))
        let aad = Array(protected.utf8)
        var iv = [UInt8](repeating: 0, count: 16)
        guard key.count == 64, RAND_bytes(&iv, 16) == 1, let context = CipherContext() else {
            throw .openSSL(OpenSSLError.drain("RAND_bytes / EVP_CIPHER_CTX_new"))
        }
        let plaintext = claims.serializedBytes
        var ciphertext = [UInt8](repeating: 0, count: plaintext.count + 16)
        var length: Int32 = 0
        var final: Int32 = 0
        let encryptionKey = Array(key[32..<64])
        let c = context.pointer
        guard EVP_EncryptInit_ex2(c, FetchedCipher.aes256CBC.pointer, encryptionKey, iv, nil) == 1,
              EVP_EncryptUpdate(c, &ciphertext, &length, plaintext, Int32(plaintext.count)) == 1 else {
            throw .openSSL(OpenSSLError.drain("EVP_Encrypt(AES-256-CBC)"))
        }
        let written = Int(length)
        guard ciphertext.withUnsafeMutableBufferPointer({ EVP_EncryptFinal_ex(c, $0.baseAddress! + written, &final) }) == 1 else {
            throw .openSSL(OpenSSLError.drain("EVP_EncryptFinal_ex(AES-256-CBC)"))
        }
        ciphertext.removeLast(ciphertext.count - written - Int(final))
        var bitLength = UInt64(aad.count * 8).bigEndian
        let macInput = aad + iv + ciphertext + withUnsafeBytes(of: &bitLength) { Array($0) }
        var mac = [UInt8](repeating: 0, count: 64)
        var macLength: UInt32 = 0
        let macKey = Array(key[0..<32])
        guard HMAC(EVP_sha512(), macKey, Int32(macKey.count), macInput, macInput.count, &mac, &macLength) != nil,
              macLength == 64 else {
            throw .openSSL(OpenSSLError.drain("HMAC(SHA-512)"))
        }
        return protected + ".." + Base64URL.encode(iv) + "." + Base64URL.encode(ciphertext) + "." + Base64URL.encode(Array(mac[0..<32]))
    }

    static func seal(claims: JSONValue, key: [UInt8], header: String) throws(KeyLoadingError) -> String {
        let protected = Base64URL.encode(Array(header.utf8))
        let aad = Array(protected.utf8)
        var iv = [UInt8](repeating: 0, count: 12)
        guard RAND_bytes(&iv, 12) == 1, let context = CipherContext() else {
            throw .openSSL(OpenSSLError.drain("RAND_bytes / EVP_CIPHER_CTX_new"))
        }
        let plaintext = claims.serializedBytes
        var ciphertext = [UInt8](repeating: 0, count: plaintext.count + 16)
        var tag = [UInt8](repeating: 0, count: 16)
        var length: Int32 = 0
        var final: Int32 = 0
        let c = context.pointer
        guard EVP_EncryptInit_ex2(c, FetchedCipher.aes256GCM.pointer, key, iv, nil) == 1,
              EVP_EncryptUpdate(c, nil, &length, aad, Int32(aad.count)) == 1,
              EVP_EncryptUpdate(c, &ciphertext, &length, plaintext, Int32(plaintext.count)) == 1 else {
            throw .openSSL(OpenSSLError.drain("EVP_Encrypt(AES-256-GCM)"))
        }
        let written = Int(length)
        let ok = ciphertext.withUnsafeMutableBufferPointer { EVP_EncryptFinal_ex(c, $0.baseAddress! + written, &final) } == 1
            && EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_AEAD_GET_TAG, 16, &tag) == 1
        guard ok else { throw .openSSL(OpenSSLError.drain("EVP_EncryptFinal_ex(AES-256-GCM)")) }
        ciphertext.removeLast(ciphertext.count - written - Int(final))
        return protected + ".." + Base64URL.encode(iv) + "." + Base64URL.encode(ciphertext) + "." + Base64URL.encode(tag)
    }
}
