/// Mints compact JWS strings: for our tests, the load harness and the
/// `portcullis mint` command. Header members are written in the order given.
public enum TokenMinter {
    /// `header.payload.signature` with the header `{"alg":…,"typ":"JWT"[,"kid":…]}`.
    public static func sign(claims: JSONValue, key: SigningKey, keyID: String? = nil, type: String? = "JWT") throws(KeyLoadingError) -> String {
        var header: [(String, JSONValue)] = [("alg", .string(key.algorithm.rawValue))]
        if let type { header.append(("typ", .string(type))) }
        if let keyID { header.append(("kid", .string(keyID))) }
        return try sign(header: .object(header), claims: claims, key: key)
    }

    /// Signs with an explicit header (negative tests: any `alg`, `crit`, …).
    public static func sign(header: JSONValue, claims: JSONValue, key: SigningKey) throws(KeyLoadingError) -> String {
        try sign(rawHeader: header.serializedBytes, rawClaims: claims.serializedBytes, key: key)
    }

    /// Signs exact header and claim bytes (duplicate members, odd JSON, …).
    public static func sign(rawHeader: [UInt8], rawClaims: [UInt8], key: SigningKey) throws(KeyLoadingError) -> String {
        try sign(encodedHeader: encodedHeader(rawHeader), rawClaims: rawClaims, key: key)
    }

    /// The base64url of a header, for `sign(encodedHeader:…)` (a signer whose header is
    /// the same for every token encodes it once).
    public static func encodedHeader(_ rawHeader: [UInt8]) -> [UInt8] {
        var out = [UInt8]()
        Base64URL.encode(rawHeader, appendingTo: &out)
        return out
    }

    /// `header.payload.signature` from an already encoded header, built in one buffer (the
    /// signature is written on the stack, copied once, and encoded onto the end).
    public static func sign(encodedHeader: [UInt8], rawClaims: [UInt8], key: SigningKey) throws(KeyLoadingError) -> String {
        var token = [UInt8]()
        token.reserveCapacity(encodedHeader.count + (rawClaims.count + 2) / 3 * 4 + 2 + 700)
        token += encodedHeader
        token.append(UInt8(ascii: "."))
        Base64URL.encode(rawClaims, appendingTo: &token)
        let signature = try token.withUnsafeBytes { input in
            Result { () throws(KeyLoadingError) in try key.withSignature(of: input) { Array($0) } }
        }.get()
        token.append(UInt8(ascii: "."))
        Base64URL.encode(signature, appendingTo: &token)
        return String(decoding: token, as: UTF8.self)
    }

    /// An HS256 app token signed with the UTF-8 bytes of `secret`
    /// (as jose's `SignJWT` with `TextEncoder` does).
    public static func hs256(secret: String, claims: JSONValue, keyID: String? = nil) throws(KeyLoadingError) -> String {
        try sign(claims: claims, key: SigningKey(hmacSecret: Array(secret.utf8), algorithm: .hs256), keyID: keyID)
    }

    /// RS256 from a PEM RSA private key.
    public static func rs256(privateKeyPEM: String, claims: JSONValue, keyID: String? = nil) throws(KeyLoadingError) -> String {
        try sign(claims: claims, key: SigningKey(privateKeyPEM: privateKeyPEM, algorithm: .rs256), keyID: keyID)
    }

    /// ES256 from a PEM P-256 private key.
    public static func es256(privateKeyPEM: String, claims: JSONValue, keyID: String? = nil) throws(KeyLoadingError) -> String {
        try sign(claims: claims, key: SigningKey(privateKeyPEM: privateKeyPEM, algorithm: .es256), keyID: keyID)
    }

    /// EdDSA from a PEM Ed25519 private key.
    public static func edDSA(privateKeyPEM: String, claims: JSONValue, keyID: String? = nil) throws(KeyLoadingError) -> String {
        try sign(claims: claims, key: SigningKey(privateKeyPEM: privateKeyPEM, algorithm: .edDSA), keyID: keyID)
    }
}
