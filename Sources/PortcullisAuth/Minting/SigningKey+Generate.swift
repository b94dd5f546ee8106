internal import COpenSSL

extension SigningKey {
    /// A fresh key pair for `algorithm` (RS*/PS* → RSA-2048, ES256 → P-256,
    /// ES384 → P-384, EdDSA → Ed25519), for tests and load generation.
    public static func generate(_ algorithm: JWSAlgorithm) throws(KeyLoadingError) -> SigningKey {
        let type: String
        if algorithm.isRSA { type = "RSA" } else if algorithm.isECDSA { type = "EC" } else if algorithm == .edDSA { type = "ED25519" } else {
            throw .unsupported("generating keys for \(algorithm.rawValue)")
        }
        guard let context = EVP_PKEY_CTX_new_from_name(nil, type, nil) else { throw .openSSL(OpenSSLError.drain("EVP_PKEY_CTX_new_from_name")) }
        defer { EVP_PKEY_CTX_free(context) }
        guard EVP_PKEY_keygen_init(context) == 1 else { throw .openSSL(OpenSSLError.drain("EVP_PKEY_keygen_init")) }
        if algorithm.isRSA, EVP_PKEY_CTX_set_rsa_keygen_bits(context, 2048) != 1 {
            throw .openSSL(OpenSSLError.drain("EVP_PKEY_CTX_set_rsa_keygen_bits"))
        }
        if let curve = algorithm.curve, EVP_PKEY_CTX_set_group_name(context, curve.opensslGroup) != 1 {
            throw .openSSL(OpenSSLError.drain("EVP_PKEY_CTX_set_group_name"))
        }
        var key: OpaquePointer?
        guard EVP_PKEY_generate(context, &key) == 1, let key else { throw .openSSL(OpenSSLError.drain("EVP_PKEY_generate")) }
        return SigningKey(algorithm: algorithm, key: EVPKey(takingOwnershipOf: key))
    }

    /// The public half as a `BEGIN PUBLIC KEY` PEM block (nil for HMAC).
    public var publicKeyPEM: String? {
        pem { bio, key in PEM_write_bio_PUBKEY(bio, key) }
    }

    /// The private key as PKCS #8 PEM (sharing a generated key through Redis); nil for HMAC.
    public var privateKeyPEM: String? {
        pem { bio, key in PEM_write_bio_PrivateKey(bio, key, nil, nil, 0, nil, nil) }
    }

    /// What `write` puts into a memory BIO for the private key, as text (nil for HMAC or on failure).
    private func pem(_ write: (OpaquePointer, OpaquePointer) -> Int32) -> String? {
        guard case .privateKey(let key) = material, let bio = BIO_new(BIO_s_mem()) else { return nil }
        defer { BIO_free(bio) }
        guard write(bio, key.pointer) == 1 else { OpenSSLError.clearQueue(); return nil }
        let length = Int(BIO_ctrl_pending(bio))
        var buffer = [UInt8](repeating: 0, count: length)
        guard BIO_read(bio, &buffer, Int32(length)) == Int32(length) else { return nil }
        return String(decoding: buffer, as: UTF8.self)
    }

    /// The verification key for this signing key, bound to the same algorithm.
    public func verificationKey(keyID: String? = nil) throws(KeyLoadingError) -> VerificationKey {
        switch material {
        case .hmac(let secret): return try VerificationKey(hmacSecret: secret, keyID: keyID, algorithm: algorithm)
        case .privateKey:
            guard let pem = publicKeyPEM else { throw .unsupported("public key export") }
            return try VerificationKey(pem: pem, keyID: keyID, algorithm: algorithm)
        }
    }
}
