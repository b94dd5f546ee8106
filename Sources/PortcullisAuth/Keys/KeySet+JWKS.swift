extension KeySet {
    /// Loads a JWK Set (RFC 7517 §5): `{"keys":[...]}`.
    ///
    /// - RSA (`n`, `e`), EC P-256/P-384 (`x`, `y`, exact lengths, point
    ///   validated), OKP Ed25519 (`x`).
    /// - Keys with an unknown `kty`, `crv` or `alg`, with `use` other than
    ///   `sig`, or with missing members are skipped (RFC 7517 §5).
    /// - A key's `alg`, when present, is the only algorithm it serves; an RSA
    ///   key without `alg` serves `defaultRSAAlgorithm`.
    /// - An RSA key under 2048 bits fails the whole set with `.weakKey`.
    public init(jwks bytes: [UInt8], defaultRSAAlgorithm: JWSAlgorithm = .rs256) throws(KeyLoadingError) {
        let document: JSONDocument
        do { document = try JSONDocument.parsingObject(bytes) } catch { throw .invalidDocument("JWKS is not a JSON object (\(error))") }
        guard let keysIndex = document.member(0, "keys"), document[keysIndex].kind == .array else {
            throw .invalidDocument("JWKS has no \"keys\" array")
        }
        var loaded = [VerificationKey]()
        for element in document.elements(keysIndex) where document[element].kind == .object {
            if let key = try KeySet.loadJWK(document, element, defaultRSAAlgorithm: defaultRSAAlgorithm) {
                loaded.append(key)
            }
        }
        try self.init(keys: loaded)
    }

    /// Loads a JWK Set from its JSON text.
    public init(jwksJSON: String, defaultRSAAlgorithm: JWSAlgorithm = .rs256) throws(KeyLoadingError) {
        try self.init(jwks: Array(jwksJSON.utf8), defaultRSAAlgorithm: defaultRSAAlgorithm)
    }

    /// One JWK, or nil when it is to be skipped.
    private static func loadJWK(_ document: JSONDocument, _ object: Int, defaultRSAAlgorithm: JWSAlgorithm) throws(KeyLoadingError) -> VerificationKey? {
        func string(_ name: StaticString) -> String? { document.member(object, name).flatMap { document.string($0) } }
        func bytes(_ name: StaticString) -> [UInt8]? { string(name).flatMap { Base64URL.decode($0) } }

        guard let kty = string("kty") else { return nil }
        if let use = document.member(object, "use"), document.string(use) != "sig" { return nil }
        let kid = string("kid")
        var algorithm: JWSAlgorithm?
        if let alg = document.member(object, "alg") {
            guard let name = document.string(alg), let known = JWSAlgorithm(rawValue: name) else { return nil }
            algorithm = known
        }

        switch kty {
        case "RSA":
            guard let n = bytes("n"), let e = bytes("e"), !n.isEmpty, !e.isEmpty else { return nil }
            let algorithm = algorithm ?? defaultRSAAlgorithm
            guard algorithm.isRSA else { return nil }
            let key = try EVPKey.rsa(modulus: n, exponent: e)
            guard key.bits >= 2048 else { throw .weakKey("RSA key \(kid ?? "(no kid)") is \(key.bits) bits; at least 2048 are required") }
            return VerificationKey(keyID: kid, verifier: try RSAVerifier(key: key, algorithm: algorithm))
        case "EC":
            let curve: ECCurve
            switch string("crv") {
            case "P-256": curve = .p256
            case "P-384": curve = .p384
            default: return nil
            }
            let algorithm = algorithm ?? (curve == .p256 ? .es256 : .es384)
            guard algorithm.curve == curve else { return nil }
            guard let x = bytes("x"), let y = bytes("y"),
                  x.count == curve.coordinateSize, y.count == curve.coordinateSize else { return nil }
            let key = try EVPKey.ec(curve: curve, x: x, y: y)
            return VerificationKey(keyID: kid, verifier: try ECDSAVerifier(key: key, algorithm: algorithm))
        case "OKP":
            guard string("crv") == "Ed25519", algorithm == nil || algorithm == .edDSA,
                  let x = bytes("x"), x.count == 32 else { return nil }
            return VerificationKey(keyID: kid, verifier: try EdDSAVerifier(key: try EVPKey.ed25519(x)))
        default:
            return nil  // "oct" and unknown types are never used from a JWKS
        }
    }

    /// Loads a PEM certificate map `{"kid": "-----BEGIN CERTIFICATE-----..."}`
    /// as Google (oauth2/v1/certs) and Firebase (securetoken x509) publish.
    /// RSA keys serve `rsaAlgorithm` (RS256 for both).
    public init(pemCertificateMap bytes: [UInt8], rsaAlgorithm: JWSAlgorithm = .rs256) throws(KeyLoadingError) {
        let document: JSONDocument
        do { document = try JSONDocument.parsingObject(bytes) } catch { throw .invalidDocument("certificate map is not a JSON object (\(error))") }
        var loaded = [VerificationKey]()
        for (kid, value) in document.members(0) {
            guard let pem = document.string(value) else { throw .invalidMember(kid: kid, member: kid) }
            let key = try EVPKey.pemCertificate(pem)
            guard let algorithm = key.defaultAlgorithm(rsa: rsaAlgorithm) else { throw .unsupported("key type in certificate \(kid)") }
            loaded.append(VerificationKey(keyID: kid, verifier: try makeVerifier(key: key, algorithm: algorithm)))
        }
        try self.init(keys: loaded)
    }

    /// Loads a PEM certificate map from its JSON text.
    public init(pemCertificateMapJSON: String, rsaAlgorithm: JWSAlgorithm = .rs256) throws(KeyLoadingError) {
        try self.init(pemCertificateMap: Array(pemCertificateMapJSON.utf8), rsaAlgorithm: rsaAlgorithm)
    }
}
