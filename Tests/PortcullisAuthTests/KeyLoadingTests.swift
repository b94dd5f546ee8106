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

struct JSONAlgorithmCase {
    let algorithm: JWSAlgorithm
    let pub: String
    let key: String
}
