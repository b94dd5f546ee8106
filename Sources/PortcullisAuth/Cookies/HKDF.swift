internal import COpenSSL

/// HKDF-SHA-256 (RFC 5869) through OpenSSL's EVP_KDF "HKDF". An empty salt
/// is omitted, which RFC 5869 §2.2 defines as a salt of HashLen zero bytes.
/// Load time only: session-cookie keys are derived once per secret and name.
func hkdfSHA256(secret: [UInt8], salt: [UInt8], info: [UInt8], length: Int) throws(KeyLoadingError) -> [UInt8] {
    guard let kdf = EVP_KDF_fetch(nil, "HKDF", nil) else { throw .openSSL(OpenSSLError.drain("EVP_KDF_fetch(HKDF)")) }
    defer { EVP_KDF_free(kdf) }
    guard let context = EVP_KDF_CTX_new(kdf) else { throw .openSSL(OpenSSLError.drain("EVP_KDF_CTX_new")) }
    defer { EVP_KDF_CTX_free(context) }
    var output = [UInt8](repeating: 0, count: length)
    var secret = secret, salt = salt, info = info
    let ok = secret.withUnsafeMutableBytes { key in
            salt.withUnsafeMutableBytes { saltBytes in
                info.withUnsafeMutableBytes { infoBytes in
                    var params = [
                        OSSL_PARAM_construct_utf8_string(ParameterNames.digest, ParameterNames.sha256, 0),
                        OSSL_PARAM_construct_octet_string(ParameterNames.key, key.baseAddress, key.count),
                        OSSL_PARAM_construct_octet_string(ParameterNames.info, infoBytes.baseAddress, infoBytes.count),
                    ]
                    if saltBytes.count > 0 {
                        params.append(OSSL_PARAM_construct_octet_string(ParameterNames.salt, saltBytes.baseAddress, saltBytes.count))
                    }
                    params.append(OSSL_PARAM_construct_end())
                    return EVP_KDF_derive(context, &output, length, &params) == 1
                }
            }
        }
    guard ok else { throw .openSSL(OpenSSLError.drain("EVP_KDF_derive(HKDF)")) }
    return output
}
