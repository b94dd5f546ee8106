import Testing
@testable import PortcullisAuth

@Suite struct KeyLoadingTests {
    @Test func jwksSkipsUnusableKeys() throws {
        let keys = try KeySet(jwks: Fixture.bytes("jwks.json"))
        #expect(keys.keys.map(\.keyID) == ["rsa1", "rsa2", "p256", "p384", "ed1"])
        #expect(keys.keys.map(\.algorithm) == [.rs256, .rs256, .es256, .es384, .edDSA])
    }

    @Test func weakRSAKeysAreRefusedWithAClearError() throws {
        #expect(throws: KeyLoadingError.weakKey("RSA key weak is 1024 bits; at least 2048 are required")) {
            try KeySet(jwks: Fixture.bytes("jwks_weak.json"))
        }
        #expect(throws: KeyLoadingError.weakKey("RSA key is 1024 bits; at least 2048 are required")) {
            try KeySet(pemPublicKey: Fixture.text("rsa1024.pub.pem"))
        }
    }

    @Test func shortHMACSecretsAreRefused() {
        #expect(throws: KeyLoadingError.weakKey("HMAC secret is 31 bytes; at least 32 are required")) {
            try KeySet(hmacSecret: String(repeating: "s", count: 31))
        }
    }

    @Test func certificateMapLoads() throws {
        let keys = try KeySet(pemCertificateMap: Fixture.bytes("certs.json"))
        #expect(Set(keys.keys.compactMap(\.keyID)) == ["rsa1", "rsa2"])
        #expect(keys.keys.allSatisfy { $0.algorithm == .rs256 })
    }

    @Test func badDocumentsAreRefused() {
        #expect(throws: KeyLoadingError.self) { try KeySet(jwksJSON: "[]") }
        #expect(throws: KeyLoadingError.self) { try KeySet(jwksJSON: #"{"keys":{}}"#) }
        #expect(throws: KeyLoadingError.self) { try KeySet(pemCertificateMapJSON: #"{"a":"not a cert"}"#) }
        #expect(throws: KeyLoadingError.self) { try KeySet(pemPublicKey: "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n") }
    }

    @Test func ecPointNotOnCurveIsRefused() {
        #expect(throws: KeyLoadingError.self) {
            try KeySet(jwksJSON: #"{"keys":[{"kty":"EC","crv":"P-256","x":"AQAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA","y":"AQAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"}]}"#)
        }
    }

    @Test func duplicateKeyIDsAreRefused() throws {
        let jwk = #"{"kty":"OKP","crv":"Ed25519","kid":"same","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}"#
        #expect(throws: KeyLoadingError.duplicateKeyID("same")) { try KeySet(jwksJSON: #"{"keys":[\#(jwk),\#(jwk)]}"#) }
    }

    @Test func keyTypeMustServeTheAlgorithm() {
        #expect(throws: KeyLoadingError.self) { try VerificationKey(pem: Fixture.text("rsa1.pub.pem"), algorithm: .es256) }
        #expect(throws: KeyLoadingError.self) { try VerificationKey(pem: Fixture.text("p256.pub.pem"), algorithm: .rs256) }
        #expect(throws: KeyLoadingError.self) { try VerificationKey(pem: Fixture.text("ed25519.pub.pem"), algorithm: .hs256) }
    }

    @Test func mintedTokensVerifyForEveryAlgorithm() throws {
        let claims: JSONValue = ["sub": "s", "exp": 2_000_000_000]
        let cases: [(String, JSONAlgorithmCase)] = [
            ("rsa1", .init(algorithm: .rs256, pub: "rsa1.pub.pem", key: "rsa1.key.pem")),
            ("rsa1", .init(algorithm: .rs384, pub: "rsa1.pub.pem", key: "rsa1.key.pem")),
            ("rsa1", .init(algorithm: .rs512, pub: "rsa1.pub.pem", key: "rsa1.key.pem")),
            ("rsa1", .init(algorithm: .ps384, pub: "rsa1.pub.pem", key: "rsa1.key.pem")),
            ("rsa1", .init(algorithm: .ps512, pub: "rsa1.pub.pem", key: "rsa1.key.pem")),
            ("p384", .init(algorithm: .es384, pub: "p384.pub.pem", key: "p384.key.pem")),
            ("ed", .init(algorithm: .edDSA, pub: "ed25519.pub.pem", key: "ed25519.key.pem")),
        ]
        for (kid, c) in cases {
            let key = try VerificationKey(pem: Fixture.text(c.pub), keyID: kid, algorithm: c.algorithm)
            let token = try TokenMinter.sign(claims: claims, key: SigningKey(privateKeyPEM: Fixture.text(c.key), algorithm: c.algorithm), keyID: kid)
            #expect(signatureCheck(token, key: key) == .valid, "\(c.algorithm)")
        }
        for algorithm in [JWSAlgorithm.hs384, .hs512] {
            let secret = Array(String(repeating: "k", count: 64).utf8)
            let token = try TokenMinter.sign(claims: claims, key: SigningKey(hmacSecret: secret, algorithm: algorithm))
            #expect(signatureCheck(token, key: try VerificationKey(hmacSecret: secret, algorithm: algorithm)) == .valid)
        }
    }
}

extension KeyLoadingTests {
    /// The prepared signing contexts (set up once per key, pooled) are what every
    /// signature goes through; each algorithm's signatures verify, ECDSA's DER becomes
    /// fixed-size r ‖ s whatever the lengths of r and s, and a key that does not fit its
    /// algorithm gets no prepared signer.
    @Test func preparedSignersSignForEveryAlgorithm() throws {
        let input = Array("eyJhbGciOiJFUzI1NiJ9.eyJzdWIiOiJzIn0".utf8)
        let cases: [(JWSAlgorithm, String, String)] = [
            (.rs256, "rsa1.pub.pem", "rsa1.key.pem"), (.ps256, "rsa1.pub.pem", "rsa1.key.pem"),
            (.es256, "p256.pub.pem", "p256.key.pem"), (.es384, "p384.pub.pem", "p384.key.pem"),
            (.edDSA, "ed25519.pub.pem", "ed25519.key.pem"),
        ]
        for (algorithm, pub, privateFile) in cases {
            let signing = try SigningKey(privateKeyPEM: Fixture.text(privateFile), algorithm: algorithm)
            #expect(signing.prepared != nil, "\(algorithm)")
            let verifying = try VerificationKey(pem: Fixture.text(pub), algorithm: algorithm)
            // ECDSA: r or s shorter than the coordinate comes up once in 256 signatures per
            // integer; 600 signatures meet it with high odds, the DER test below always.
            let rounds = algorithm.isECDSA ? 600 : 3
            for _ in 0..<rounds {
                let signature = try signing.sign(input)
                #expect(signature.count == (algorithm.curve.map { 2 * $0.coordinateSize } ?? (algorithm == .edDSA ? 64 : 256)))
                let valid = signature.withUnsafeBytes { s in input.withUnsafeBytes { verifying.isValidSignature(s, for: $0) } }
                #expect(valid, "\(algorithm)")
            }
        }
        let hmac = SigningKey(hmacSecret: Array(String(repeating: "k", count: 32).utf8), algorithm: .hs256)
        #expect(hmac.prepared != nil)
        let mac = try hmac.sign(input)
        let hmacKey = try VerificationKey(hmacSecret: Array(String(repeating: "k", count: 32).utf8), algorithm: .hs256)
        #expect(mac.withUnsafeBytes { m in input.withUnsafeBytes { hmacKey.isValidSignature(m, for: $0) } })

        // A P-256 key named RS256 (negative-test tokens): no prepared signer; the one-shot
        // path signs with what the key is (a DER ECDSA signature), as before, and the
        // verifier refuses it as RS256.
        let mismatched = try SigningKey(privateKeyPEM: Fixture.text("p256.key.pem"), algorithm: .rs256)
        #expect(mismatched.prepared == nil)
        let forged = try mismatched.sign(input)
        #expect(forged.first == 0x30)
        let rsa = try VerificationKey(pem: Fixture.text("rsa1.pub.pem"), algorithm: .rs256)
        #expect(!forged.withUnsafeBytes { f in input.withUnsafeBytes { rsa.isValidSignature(f, for: $0) } })
    }

    @Test func ecdsaDERBecomesFixedSizeRawSignatures() {
        func raw(_ der: [UInt8], coordinate: Int = 4) -> [UInt8]? {
            var out = [UInt8](repeating: 0xEE, count: 2 * coordinate)
            let ok = der.withUnsafeBufferPointer { d in out.withUnsafeMutableBufferPointer { ECDSASignature.raw(fromDER: d, coordinate: coordinate, into: $0.baseAddress!) } }
            return ok ? out : nil
        }
        // r with a sign byte (0x00 0x80…), s shorter than the coordinate.
        #expect(raw([0x30, 0x0A, 0x02, 0x05, 0x00, 0x80, 1, 2, 3, 0x02, 0x01, 0x07]) == [0x80, 1, 2, 3, 0, 0, 0, 7])
        #expect(raw([0x30, 0x0C, 0x02, 0x04, 9, 8, 7, 6, 0x02, 0x04, 5, 4, 3, 2]) == [9, 8, 7, 6, 5, 4, 3, 2])
        #expect(raw([0x30, 0x0A, 0x02, 0x05, 1, 2, 3, 4, 5, 0x02, 0x01, 0x07]) == nil)   // r too long
        #expect(raw([0x30, 0x06, 0x02, 0x01, 0x01, 0x03, 0x01, 0x07]) == nil)             // s not an INTEGER
        #expect(raw([0x30, 0x06, 0x02, 0x00, 0x02, 0x01, 0x07]) == nil)                   // empty r
        #expect(raw([0x31, 0x06, 0x02, 0x01, 0x01, 0x02, 0x01, 0x07]) == nil)             // not a SEQUENCE
        #expect(raw([0x30, 0x06, 0x02, 0x01]) == nil)                                      // cut short
    }
}

struct JSONAlgorithmCase {
    let algorithm: JWSAlgorithm
    let pub: String
    let key: String
}
