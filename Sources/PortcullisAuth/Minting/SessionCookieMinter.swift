internal import COpenSSL

/// Mints session cookies as NextAuth v4 and Auth.js v5 write them
/// (`dir` JWE, A256GCM content encryption), for the demo, `portcullis mint`
/// and tests. v4: key = HKDF-SHA-256(secret, "", "NextAuth.js Generated
/// Encryption Key", 32), no `kid`. v5: key = HKDF-SHA-256(secret, cookie name,
/// "Auth.js Generated Encryption Key (<cookie name>)", 32) with the key's
/// JWK thumbprint as `kid` (Auth.js itself defaults to A256CBC-HS512 and
/// accepts A256GCM).
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
        let key = try SessionCookieProvider.authjsKey(secret: secret, salt: cookieName, encryption: .a256gcm)
        let kid = SessionCookieProvider.thumbprint(key)
        return try seal(claims: claims, key: key, header: "{\"alg\":\"dir\",\"enc\":\"A256GCM\",\"kid\":\"\(kid)\"}")
    }

    static func seal(claims: JSONValue, key: [UInt8], header: String) throws(KeyLoadingError) -> String {
        let protected = Base64URL.encode(Array(header.utf8))
        let aad = Array(protected.utf8)
        var iv = [UInt8](repeating: 0, count: 12)
        guard RAND_bytes(&iv, 12) == 1, let context = CipherContext() else {
            throw .openSSL(OpenSSLError.drain("RAND_bytes / EVP_CIPHER_CTX_new"))
        }
        let plaintext = Array(claims.serialized.utf8)
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
