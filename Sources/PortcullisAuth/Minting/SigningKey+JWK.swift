internal import COpenSSL

extension SigningKey {
    /// The public half as a JWK (RFC 7517) with `kid`, `alg` and `use: sig`: members in
    /// RFC 7638 order first. nil for HMAC keys (a secret is never published).
    public func publicJWK(keyID: String) -> JSONValue? {
        guard let members = thumbprintMembers() else { return nil }
        return .object(members.map { ($0.0, JSONValue.string($0.1)) }
            + [("kid", .string(keyID)), ("alg", .string(algorithm.rawValue)), ("use", .string("sig"))])
    }

    /// The RFC 7638 JWK thumbprint (base64url SHA-256 of the required members in
    /// lexicographic order): a `kid` that every instance derives alike from the key.
    /// For an HMAC key, a base64url SHA-256 over a label and the secret, cut to 16 bytes
    /// (names the key without publishing anything usable).
    public var thumbprint: String {
        if case .hmac(let secret) = material {
            return Base64URL.encode(Self.sha256(Array("portcullis assertion kid\u{0}".utf8) + secret).prefix(16))
        }
        let members = thumbprintMembers() ?? []
        let canonical = JSONValue.object(members.map { ($0.0, JSONValue.string($0.1)) }).serialized
        return Base64URL.encode(Self.sha256(Array(canonical.utf8)))
    }

    /// Required JWK members, sorted by name (RFC 7638 §3.2).
    private func thumbprintMembers() -> [(String, String)]? {
        guard case .privateKey(let key) = material else { return nil }
        if algorithm.isRSA {
            guard let n = Self.bigNumber(key.pointer, "n", size: nil), let e = Self.bigNumber(key.pointer, "e", size: nil) else { return nil }
            return [("e", Base64URL.encode(e)), ("kty", "RSA"), ("n", Base64URL.encode(n))]
        }
        if let curve = algorithm.curve {
            let size = curve.coordinateSize
            guard let x = Self.bigNumber(key.pointer, "qx", size: size), let y = Self.bigNumber(key.pointer, "qy", size: size) else { return nil }
            return [("crv", curve.jwkName), ("kty", "EC"), ("x", Base64URL.encode(x)), ("y", Base64URL.encode(y))]
        }
        if algorithm == .edDSA {
            var out = [UInt8](repeating: 0, count: 32)
            var length = 0
            guard EVP_PKEY_get_octet_string_param(key.pointer, "pub", &out, 32, &length) == 1, length == 32 else {
                OpenSSLError.clearQueue()
                return nil
            }
            return [("crv", "Ed25519"), ("kty", "OKP"), ("x", Base64URL.encode(out))]
        }
        return nil
    }

    private static func bigNumber(_ key: OpaquePointer, _ name: String, size: Int?) -> [UInt8]? {
        var bn: OpaquePointer?
        guard EVP_PKEY_get_bn_param(key, name, &bn) == 1, let bn else { OpenSSLError.clearQueue(); return nil }
        defer { BN_free(bn) }
        let length = size ?? Int((BN_num_bits(bn) + 7) / 8)
        var out = [UInt8](repeating: 0, count: length)
        guard BN_bn2binpad(bn, &out, Int32(length)) == Int32(length) else { return nil }
        return out
    }

    /// SHA-256 through the digest context the verifier uses (cold path: key load).
    private static func sha256(_ bytes: [UInt8]) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: 64)
        let length = bytes.withUnsafeBytes { input in
            out.withUnsafeMutableBufferPointer { DigestContext()?.digest(.sha256, input, into: $0.baseAddress!) }
        }
        return Array(out.prefix(length ?? 0))
    }
}

/// Base64url without padding (RFC 7515 §2), for callers outside this module.
public enum JWTText {
    public static func base64URL(_ bytes: [UInt8]) -> String { Base64URL.encode(bytes) }

    /// The bytes of base64url text (nil when it is not base64url).
    public static func bytes(base64URL text: Substring) -> [UInt8]? { Base64URL.decode(Array(text.utf8)) }

    /// `count` random bytes from OpenSSL's CSPRNG, base64url (a `jti`).
    public static func randomID(bytes count: Int = 16) -> String {
        var out = [UInt8](repeating: 0, count: count)
        if RAND_bytes(&out, Int32(count)) != 1 {
            for i in out.indices { out[i] = UInt8.random(in: 0...255) }
        }
        return Base64URL.encode(out)
    }
}

extension SigningKey {
    /// The modulus size of an RSA key (nil for other keys).
    public var rsaBits: Int? {
        guard case .privateKey(let key) = material, algorithm.isRSA else { return nil }
        return key.bits
    }
}

/// SHA-256 as lower-case hex, for cold paths outside this module (the configuration
/// file's hash on `/readyz` and in reload verdicts).
public enum SHA256Hex {
    public static func of(_ bytes: [UInt8]) -> String {
        var out = [UInt8](repeating: 0, count: 64)
        let length = bytes.withUnsafeBytes { input in
            out.withUnsafeMutableBufferPointer { DigestContext()?.digest(.sha256, input, into: $0.baseAddress!) }
        } ?? 0
        let hex = Array("0123456789abcdef".utf8)
        var text = [UInt8]()
        text.reserveCapacity(length * 2)
        for byte in out.prefix(length) {
            text.append(hex[Int(byte >> 4)])
            text.append(hex[Int(byte & 0xF)])
        }
        return String(decoding: text, as: UTF8.self)
    }
}
