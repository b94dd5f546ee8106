internal import COpenSSL

// Building EVP_PKEYs from JWK members and PEM text (load time only).
extension EVPKey {
    /// RSA public key from big-endian modulus and exponent (JWK `n`, `e`).
    static func rsa(modulus: [UInt8], exponent: [UInt8]) throws(KeyLoadingError) -> EVPKey {
        guard let n = BN_bin2bn(modulus, Int32(modulus.count), nil) else { throw .openSSL(OpenSSLError.drain("BN_bin2bn")) }
        defer { BN_free(n) }
        guard let e = BN_bin2bn(exponent, Int32(exponent.count), nil) else { throw .openSSL(OpenSSLError.drain("BN_bin2bn")) }
        defer { BN_free(e) }
        return try fromData(type: "RSA") { builder in
            OSSL_PARAM_BLD_push_BN(builder, ParameterNames.rsaN, n) == 1
                && OSSL_PARAM_BLD_push_BN(builder, ParameterNames.rsaE, e) == 1
        }
    }

    /// EC public key from affine coordinates; the point is fully validated
    /// (`EVP_PKEY_public_check`, SP 800-56A).
    static func ec(curve: ECCurve, x: [UInt8], y: [UInt8]) throws(KeyLoadingError) -> EVPKey {
        let point = [0x04] + x + y
        let key = try fromData(type: "EC") { builder in
            OSSL_PARAM_BLD_push_utf8_string(builder, ParameterNames.group, curve == .p256 ? ParameterNames.prime256v1 : ParameterNames.secp384r1, 0) == 1
                && point.withUnsafeBytes {
                    OSSL_PARAM_BLD_push_octet_string(builder, ParameterNames.publicKey, $0.baseAddress, $0.count) == 1
                }
        }
        guard let check = EVP_PKEY_CTX_new_from_pkey(nil, key.pointer, nil) else { throw .openSSL(OpenSSLError.drain("EVP_PKEY_CTX_new_from_pkey")) }
        defer { EVP_PKEY_CTX_free(check) }
        guard EVP_PKEY_public_check(check) == 1 else { throw .openSSL(OpenSSLError.drain("EVP_PKEY_public_check")) }
        return key
    }

    /// Ed25519 public key from its 32 raw bytes (JWK `x`).
    static func ed25519(_ x: [UInt8]) throws(KeyLoadingError) -> EVPKey {
        guard x.count == 32 else { throw .invalidMember(kid: nil, member: "x") }
        guard let pointer = EVP_PKEY_new_raw_public_key_ex(nil, "ED25519", nil, x, 32) else {
            throw .openSSL(OpenSSLError.drain("EVP_PKEY_new_raw_public_key_ex"))
        }
        return EVPKey(takingOwnershipOf: pointer)
    }

    private static func fromData(type: String, push: (OpaquePointer) -> Bool) throws(KeyLoadingError) -> EVPKey {
        guard let builder = OSSL_PARAM_BLD_new() else { throw .openSSL(OpenSSLError.drain("OSSL_PARAM_BLD_new")) }
        defer { OSSL_PARAM_BLD_free(builder) }
        guard push(builder), let params = OSSL_PARAM_BLD_to_param(builder) else { throw .openSSL(OpenSSLError.drain("OSSL_PARAM_BLD_push")) }
        defer { OSSL_PARAM_free(params) }
        guard let context = EVP_PKEY_CTX_new_from_name(nil, type, nil) else { throw .openSSL(OpenSSLError.drain("EVP_PKEY_CTX_new_from_name")) }
        defer { EVP_PKEY_CTX_free(context) }
        var key: OpaquePointer?
        guard EVP_PKEY_fromdata_init(context) == 1,
              EVP_PKEY_fromdata(context, &key, portcullis_evp_pkey_public_key_selection(), params) == 1,
              let key else { throw .openSSL(OpenSSLError.drain("EVP_PKEY_fromdata(\(type))")) }
        return EVPKey(takingOwnershipOf: key)
    }

    /// A `-----BEGIN PUBLIC KEY-----` (SubjectPublicKeyInfo) block.
    static func pemPublicKey(_ pem: String) throws(KeyLoadingError) -> EVPKey {
        try withMemoryBIO(Array(pem.utf8)) { bio throws(KeyLoadingError) in
            guard let key = PEM_read_bio_PUBKEY(bio, nil, nil, nil) else {
                let error = OpenSSLError.drain("PEM_read_bio_PUBKEY")
                throw .invalidPEM("not a PEM public key (\(error.reasons.first ?? "unreadable"))")
            }
            return EVPKey(takingOwnershipOf: key)
        }
    }

    /// The public key of a `-----BEGIN CERTIFICATE-----` block. Only the key
    /// is used: the certificate's validity and chain are not checked, as
    /// Google's and Firebase's libraries do not either.
    static func pemCertificate(_ pem: String) throws(KeyLoadingError) -> EVPKey {
        try withMemoryBIO(Array(pem.utf8)) { bio throws(KeyLoadingError) in
            guard let certificate = PEM_read_bio_X509(bio, nil, nil, nil) else {
                let error = OpenSSLError.drain("PEM_read_bio_X509")
                throw .invalidPEM("not a PEM certificate (\(error.reasons.first ?? "unreadable"))")
            }
            defer { X509_free(certificate) }
            guard let key = X509_get_pubkey(certificate) else { throw .openSSL(OpenSSLError.drain("X509_get_pubkey")) }
            return EVPKey(takingOwnershipOf: key)
        }
    }

    /// The natural JWS algorithm for a public key when none is configured.
    func defaultAlgorithm(rsa: JWSAlgorithm) -> JWSAlgorithm? {
        if isA("RSA") { return rsa }
        if isA("ED25519") { return .edDSA }
        if isA("EC") {
            switch ecGroupName {
            case "prime256v1": return .es256
            case "secp384r1": return .es384
            default: return nil
            }
        }
        return nil
    }
}

/// Builds the verifier for a public key and the one algorithm it serves.
func makeVerifier(key: EVPKey, algorithm: JWSAlgorithm) throws(KeyLoadingError) -> any SignatureVerifier {
    if algorithm.isRSA { return try RSAVerifier(key: key, algorithm: algorithm) }
    if algorithm.isECDSA { return try ECDSAVerifier(key: key, algorithm: algorithm) }
    if algorithm == .edDSA { return try EdDSAVerifier(key: key) }
    throw .algorithmMismatch(algorithm.rawValue, keyType: "public")
}

/// A read-only memory BIO over `bytes`, valid only inside `body`:
/// `BIO_new_mem_buf` does not copy, so the bytes must stay pinned while
/// OpenSSL reads them (an array passed straight to the call is only
/// guaranteed alive for the duration of that one call).
func withMemoryBIO<R>(_ bytes: [UInt8], _ body: (OpaquePointer) throws(KeyLoadingError) -> R) throws(KeyLoadingError) -> R {
    let result: Result<R, KeyLoadingError> = bytes.withUnsafeBytes { raw in
        guard let bio = BIO_new_mem_buf(raw.baseAddress, Int32(raw.count)) else {
            return .failure(.openSSL(OpenSSLError.drain("BIO_new_mem_buf")))
        }
        defer { BIO_free(bio) }
        do throws(KeyLoadingError) { return .success(try body(bio)) } catch { return .failure(error) }
    }
    return try result.get()
}
