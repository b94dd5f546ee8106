import Foundation
import Testing
@testable import PortcullisAuth

/// The mobile HS256 app token (rule book §5) and the attacks the issue lists.
@Suite struct AppTokenTests {
    static let secret = "an-auth-secret-of-at-least-32-bytes!!"
    static let now = 1_700_000_100.0

    static func claims(exp: Int64 = 1_700_003_600, iat: Int64 = 1_700_000_000, extra: [(String, JSONValue)] = []) -> JSONValue {
        .object([("sub", "user-1"), ("iss", "app"), ("aud", "mobile"), ("iat", .integer(iat)), ("exp", .integer(exp))] + extra)
    }

    static func verifier(issuer: String? = "app", audiences: [String] = ["mobile"]) throws -> CredentialVerifier {
        var app = ProviderConfiguration(name: "app", kind: .hs256)
        app.secret = secret
        app.issuer = issuer
        app.audiences = audiences
        var rsa = ProviderConfiguration(name: "rsa", kind: .oidc)
        rsa.issuer = "app"
        rsa.audiences = ["mobile"]
        rsa.algorithms = ["RS256", "ES256"]
        let keys = try KeySet(keys: [
            VerificationKey(pem: Fixture.text("rsa1.pub.pem"), keyID: "rsa1"),
            VerificationKey(pem: Fixture.text("p256.pub.pem"), keyID: "p256"),
        ])
        return try CredentialVerifier(providers: [app, rsa], keys: ["rsa": keys])
    }

    static func token(_ claims: JSONValue = claims()) throws -> String {
        try TokenMinter.hs256(secret: secret, claims: claims)
    }

    @Test func validAppToken() throws {
        let result = try Self.verifier().verifyBearer(Self.token(), now: Self.now)
        let identity = try #require(result.identity)
        #expect(identity.provider == "app")
        #expect(identity.subject == "user-1")
        #expect(identity.expiresAt == 1_700_003_600)
        #expect(identity.source == .bearer)
    }

    /// A claim set with more tokens than the parser's first (stack) token
    /// buffer holds is parsed again with room for all of them.
    @Test func largeClaimSetVerifies() throws {
        let roles: JSONValue = .array((0..<200).map { .string("role-\($0)") })
        let token = try Self.token(Self.claims(extra: [("roles", roles), ("email", "a@example.com")]))
        let identity = try #require(try Self.verifier().verifyBearer(token, now: Self.now).identity)
        #expect(identity.subject == "user-1")
        #expect(identity.claims["email"] == "a@example.com")
    }

    @Test func issuerAndAudienceAreOptional() throws {
        let verifier = try Self.verifier(issuer: nil, audiences: [])
        let token = try TokenMinter.hs256(secret: Self.secret, claims: ["sub": "u", "exp": 1_700_003_600])
        #expect(verifier.verifyBearer(token, now: Self.now).identity?.subject == "u")
    }

    @Test func oneSecretCanServeSeveralHMACAlgorithms() throws {
        var app = ProviderConfiguration(name: "app", kind: .hs256)
        app.secret = String(repeating: "k", count: 64)
        app.algorithms = ["HS256", "HS512"]
        let verifier = try CredentialVerifier(providers: [app], keys: [:])
        for algorithm in [JWSAlgorithm.hs256, .hs512] {
            let token = try TokenMinter.sign(claims: Self.claims(), key: SigningKey(hmacSecret: Array(app.secret!.utf8), algorithm: algorithm))
            #expect(verifier.verifyBearer(token, now: Self.now).identity?.subject == "user-1", "\(algorithm)")
        }
        let hs384 = try TokenMinter.sign(claims: Self.claims(), key: SigningKey(hmacSecret: Array(app.secret!.utf8), algorithm: .hs384))
        #expect(verifier.verifyBearer(hs384, now: Self.now).reason == .algorithmNotAllowed)
    }

    @Test func boundKeyIDIsEnforced() throws {
        var app = ProviderConfiguration(name: "app", kind: .hs256)
        app.secret = Self.secret
        app.keyID = "v1"
        let verifier = try CredentialVerifier(providers: [app], keys: [:])
        #expect(verifier.verifyBearer(try TokenMinter.hs256(secret: Self.secret, claims: Self.claims(), keyID: "v1"), now: Self.now).identity != nil)
        #expect(verifier.verifyBearer(try TokenMinter.hs256(secret: Self.secret, claims: Self.claims(), keyID: "v2"), now: Self.now).reason == .unknownKey)
    }

    @Test func algNoneIsRefused() throws {
        let header = Base64URL.encode(Array(#"{"alg":"none","typ":"JWT"}"#.utf8))
        let payload = Base64URL.encode(Array(Self.claims().serialized.utf8))
        for token in ["\(header).\(payload).", "\(header).\(payload)"] {
            let result = try Self.verifier().verifyBearer(token, now: Self.now)
            #expect(result.identity == nil)
            #expect(result.failure?.httpStatus == 401)
        }
        #expect(try Self.verifier().verifyBearer("\(header).\(payload).", now: Self.now).reason == .algorithmNotAllowed)
    }

    @Test func hs256SignedWithRSAPublicKeyPEMIsRefused() throws {
        // The classic RS→HS confusion: HMAC keyed with the RSA public key's PEM bytes.
        let forged = try TokenMinter.sign(claims: Self.claims(), key: SigningKey(hmacSecret: Array(Fixture.text("rsa1.pub.pem").utf8)), keyID: "rsa1")
        let result = try Self.verifier().verifyBearer(forged, now: Self.now)
        #expect(result.identity == nil)
        let rsaOnly = try Self.verifier().verifyBearer(forged, providers: ["rsa"], now: Self.now)
        #expect(rsaOnly.identity == nil && rsaOnly.failure?.httpStatus == 401)
        // The RSA provider turned its algorithm down; the refusal names the HMAC provider
        // whose tokens it looks like (no signature was checked for that one).
        #expect(rsaOnly.reason == .providerNotAccepted && rsaOnly.failure?.provider != "rsa")
    }

    @Test func rs256TokenVerifiesAndCannotBeRelabelled() throws {
        let token = try TokenMinter.rs256(privateKeyPEM: Fixture.text("rsa1.key.pem"), claims: Self.claims(), keyID: "rsa1")
        #expect(try Self.verifier().verifyBearer(token, now: Self.now).identity?.provider == "rsa")
        let es = try TokenMinter.es256(privateKeyPEM: Fixture.text("p256.key.pem"), claims: Self.claims(), keyID: "p256")
        #expect(try Self.verifier().verifyBearer(es, now: Self.now).identity?.provider == "rsa")
        // The ES256 key's kid on an RS256 token: the key's algorithm wins.
        let relabelled = try TokenMinter.rs256(privateKeyPEM: Fixture.text("rsa1.key.pem"), claims: Self.claims(), keyID: "p256")
        #expect(try Self.verifier().verifyBearer(relabelled, now: Self.now).reason == .algorithmNotAllowed)
    }

    /// ECDSA signatures have two valid forms, (r, s) and (r, n − s). Both verify, so the hash
    /// that names a token without `jti` for revocation is of the signing input, which the
    /// signature cannot change (the whole token's hash, kept as the legacy one, differs).
    @Test func bothFormsOfAnECDSASignatureNameTheSameCredential() throws {
        let token = try TokenMinter.es256(privateKeyPEM: Fixture.text("p256.key.pem"), claims: Self.claims(), keyID: "p256")
        let parts = token.split(separator: ".")
        var signature = try #require(Base64URL.decode(String(parts[2])))
        #expect(signature.count == 64)
        // s' = n - s over the P-256 group order, big-endian.
        let order: [UInt8] = [0xFF, 0xFF, 0xFF, 0xFF, 0x00, 0x00, 0x00, 0x00, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
                              0xBC, 0xE6, 0xFA, 0xAD, 0xA7, 0x17, 0x9E, 0x84, 0xF3, 0xB9, 0xCA, 0xC2, 0xFC, 0x63, 0x25, 0x51]
        var borrow = 0
        for i in stride(from: 31, through: 0, by: -1) {
            let difference = Int(order[i]) - Int(signature[32 + i]) - borrow
            signature[32 + i] = UInt8((difference + 256) % 256)
            borrow = difference < 0 ? 1 : 0
        }
        let flipped = "\(parts[0]).\(parts[1]).\(Base64URL.encode(signature))"
        #expect(flipped != token)
        let verifier = try Self.verifier()
        let original = try #require(verifier.verifyBearer(token, now: Self.now).identity)
        let other = try #require(verifier.verifyBearer(flipped, now: Self.now).identity, "OpenSSL accepts both forms")
        #expect(original.credentialHash != nil)
        #expect(original.credentialHash == other.credentialHash)
        #expect(original.legacyCredentialHash != other.legacyCredentialHash)
    }

    @Test func unknownKeyID() throws {
        let token = try TokenMinter.rs256(privateKeyPEM: Fixture.text("rsa1.key.pem"), claims: Self.claims(), keyID: "nope")
        #expect(try Self.verifier().verifyBearer(token, providers: ["rsa"], now: Self.now).reason == .unknownKey)
    }

    @Test func hs256WithWrongSecret() throws {
        let token = try TokenMinter.hs256(secret: "a-different-secret-of-32-bytes-or-more", claims: Self.claims())
        #expect(try Self.verifier().verifyBearer(token, now: Self.now).reason == .signatureInvalid)
    }

    @Test func expired() throws {
        let token = try Self.token()
        #expect(try Self.verifier().verifyBearer(token, now: 1_700_003_600 + 15).reason == .expired)
        #expect(try Self.verifier().verifyBearer(token, now: 1_700_003_600 + 14).identity != nil)
    }

    @Test func missingExpiry() throws {
        let token = try TokenMinter.hs256(secret: Self.secret, claims: ["sub": "u", "iss": "app", "aud": "mobile"])
        #expect(try Self.verifier().verifyBearer(token, now: Self.now).reason == .missingExpiry)
    }

    @Test func notYetValid() throws {
        let token = try Self.token(Self.claims(extra: [("nbf", 1_700_000_200)]))
        #expect(try Self.verifier().verifyBearer(token, now: Self.now).reason == .notYetValid)
    }

    @Test func lifetimeOverThirtyDays() throws {
        let token = try Self.token(Self.claims(exp: 1_700_000_000 + 31 * 86_400))
        #expect(try Self.verifier().verifyBearer(token, now: Self.now).reason == .lifetimeTooLong)
    }

    @Test func wrongIssuer() throws {
        let token = try Self.token(.object([("sub", "u"), ("iss", "evil"), ("aud", "mobile"), ("exp", 1_700_003_600)]))
        #expect(try Self.verifier().verifyBearer(token, now: Self.now).reason == .issuerNotAccepted)
    }

    @Test func wrongAudience() throws {
        let token = try Self.token(.object([("sub", "u"), ("iss", "app"), ("aud", ["web", "other"]), ("exp", 1_700_003_600)]))
        #expect(try Self.verifier().verifyBearer(token, now: Self.now).reason == .audienceNotAccepted)
        let array = try Self.token(.object([("sub", "u"), ("iss", "app"), ("aud", ["web", "mobile"]), ("exp", 1_700_003_600)]))
        #expect(try Self.verifier().verifyBearer(array, now: Self.now).identity != nil)
    }

    @Test func missingSubject() throws {
        let token = try Self.token(.object([("iss", "app"), ("aud", "mobile"), ("exp", 1_700_003_600)]))
        #expect(try Self.verifier().verifyBearer(token, now: Self.now).reason == .subjectInvalid)
    }

    @Test func tamperedHeaderPayloadAndSignature() throws {
        let token = try Self.token()
        let parts = token.split(separator: ".").map(String.init)
        let otherHeader = Base64URL.encode(Array(#"{"alg":"HS256","typ":"JWT","x":1}"#.utf8))
        let otherPayload = Base64URL.encode(Array(Self.claims(extra: [("admin", true)]).serialized.utf8))
        var signature = Array(parts[2])
        signature[5] = signature[5] == "A" ? "B" : "A"
        for forged in ["\(otherHeader).\(parts[1]).\(parts[2])", "\(parts[0]).\(otherPayload).\(parts[2])",
                       "\(parts[0]).\(parts[1]).\(String(signature))"] {
            #expect(try Self.verifier().verifyBearer(forged, now: Self.now).reason == .signatureInvalid)
        }
    }

    @Test func truncatedAndMalformedShapes() throws {
        let token = try Self.token()
        let parts = token.split(separator: ".").map(String.init)
        let cases: [String: AuthFailure.Reason] = [
            String(token.dropLast(2)): .badEncoding,
            String(token.dropLast(4)): .signatureInvalid,
            "\(parts[0]).\(parts[1])": .malformed,
            "\(parts[0]).\(parts[1]).\(parts[2]).x": .malformed,
            "\(parts[0])..\(parts[2])": .malformed,
            "a.b.c.d.e.f": .malformed,
        ]
        for (input, reason) in cases {
            #expect(try Self.verifier().verifyBearer(input, now: Self.now).reason == reason, "\(input)")
        }
        #expect(try Self.verifier().verifyBearer("", now: Self.now).reason == .noCredential)
    }

    @Test func paddedOrNonCanonicalBase64URLIsRefused() throws {
        let token = try Self.token()
        let parts = token.split(separator: ".").map(String.init)
        let standard = parts[2].replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        var refused = ["\(parts[0]).\(parts[1]).\(parts[2])=", "\(parts[0]) .\(parts[1]).\(parts[2])",
                       "\(parts[0]).\(parts[1]).\(parts[2].dropLast())\n"]
        if standard != parts[2] { refused.append("\(parts[0]).\(parts[1]).\(standard)") }
        // 43 characters carry 258 bits for a 32-byte MAC: the last character's 2 low bits must be zero.
        let last = parts[2].last!
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
        let nonCanonical = alphabet[alphabet.firstIndex(of: last)! | 1]
        refused.append("\(parts[0]).\(parts[1]).\(parts[2].dropLast())\(nonCanonical)")
        for input in refused {
            let result = try Self.verifier().verifyBearer(input, now: Self.now)
            #expect(result.identity == nil, "\(input)")
        }
    }

    @Test func oversizedTokenIsRefused() throws {
        let token = try Self.token(Self.claims(extra: [("pad", .string(String(repeating: "x", count: 20_000)))]))
        #expect(try Self.verifier().verifyBearer(token, now: Self.now).reason == .tooLarge)
    }

    @Test func duplicateClaimIsRefused() throws {
        let raw = Array(#"{"sub":"user-1","iss":"app","aud":"mobile","exp":1700003600,"sub":"admin"}"#.utf8)
        let token = try TokenMinter.sign(rawHeader: Array(#"{"alg":"HS256"}"#.utf8), rawClaims: raw, key: SigningKey(hmacSecret: Array(Self.secret.utf8)))
        #expect(try Self.verifier().verifyBearer(token, now: Self.now).reason == .badJSON)
        let escaped = Array(#"{"sub":"user-1","iss":"app","aud":"mobile","exp":1700003600,"s\u0075b":"admin"}"#.utf8)
        let token2 = try TokenMinter.sign(rawHeader: Array(#"{"alg":"HS256"}"#.utf8), rawClaims: escaped, key: SigningKey(hmacSecret: Array(Self.secret.utf8)))
        #expect(try Self.verifier().verifyBearer(token2, now: Self.now).reason == .badJSON)
    }

    @Test func duplicateHeaderMemberIsRefused() throws {
        let token = try TokenMinter.sign(rawHeader: Array(#"{"alg":"HS256","alg":"none"}"#.utf8),
                                         rawClaims: Array(Self.claims().serialized.utf8), key: SigningKey(hmacSecret: Array(Self.secret.utf8)))
        #expect(try Self.verifier().verifyBearer(token, now: Self.now).reason == .badJSON)
    }

    @Test func critIsRefused() throws {
        for crit: JSONValue in [["exp"], [], ["b64"]] {
            let token = try TokenMinter.sign(header: .object([("alg", "HS256"), ("crit", crit)]), claims: Self.claims(),
                                             key: SigningKey(hmacSecret: Array(Self.secret.utf8)))
            #expect(try Self.verifier().verifyBearer(token, now: Self.now).reason == .unsupportedHeader)
        }
    }

    /// Header member names and the `alg` value are matched after
    /// unescaping: an escaped `crit`/`zip` is still refused, an escaped
    /// `alg` name or value still selects HS256, and `alg` values that only
    /// resemble a known name (longer than any, a different case) are refused.
    @Test func escapedHeaderNamesAndValuesAreMatchedUnescaped() throws {
        let key = SigningKey(hmacSecret: Array(Self.secret.utf8))
        let claims = Array(Self.claims().serialized.utf8)
        func reason(_ header: String) throws -> AuthFailure.Reason? {
            let token = try TokenMinter.sign(rawHeader: Array(header.utf8), rawClaims: claims, key: key)
            return try Self.verifier().verifyBearer(token, now: Self.now).reason
        }
        #expect(try reason(#"{"alg":"HS256"}"#) == nil)
        #expect(try reason(#"{"alg":"HS256"}"#) == nil)
        #expect(try reason(#"{"alg":"HS256","crit":["exp"]}"#) == .unsupportedHeader)
        #expect(try reason(#"{"alg":"HS256","zip":"DEF"}"#) == .unsupportedHeader)
        #expect(try reason(#"{"alg":"hs256"}"#) == .algorithmNotAllowed)
        #expect(try reason(#"{"alg":"HS256HS256HS256HS256"}"#) == .algorithmNotAllowed)
        #expect(try reason(#"{"alg":"HS256\u0000"}"#) == .algorithmNotAllowed)
        #expect(try reason(#"{"typ":"JWT"}"#) == .malformed)
    }

    @Test func typMustBeJWTWhenPresent() throws {
        let key = SigningKey(hmacSecret: Array(Self.secret.utf8))
        #expect(try Self.verifier().verifyBearer(TokenMinter.sign(claims: Self.claims(), key: key, type: "jwt"), now: Self.now).identity != nil)
        #expect(try Self.verifier().verifyBearer(TokenMinter.sign(claims: Self.claims(), key: key, type: nil), now: Self.now).identity != nil)
        #expect(try Self.verifier().verifyBearer(TokenMinter.sign(claims: Self.claims(), key: key, type: "at+jwt"), now: Self.now).reason == .typeNotAccepted)
    }

    @Test func escapedTypIsComparedUnescaped() throws {
        let key = SigningKey(hmacSecret: Array(Self.secret.utf8))
        let claims = Array(Self.claims().serialized.utf8)
        let escaped = try TokenMinter.sign(rawHeader: Array(#"{"alg":"HS256","typ":"J\u0057t"}"#.utf8), rawClaims: claims, key: key)
        #expect(try Self.verifier().verifyBearer(escaped, now: Self.now).identity != nil)
        let longer = try TokenMinter.sign(rawHeader: Array(#"{"alg":"HS256","typ":"JWTX"}"#.utf8), rawClaims: claims, key: key)
        #expect(try Self.verifier().verifyBearer(longer, now: Self.now).reason == .typeNotAccepted)
    }

    @Test func escapedClaimNamesAreStillChecked() throws {
        // "\u0065xp" is "exp": an expired token stays expired however the name is spelled.
        let raw = Array(#"{"sub":"user-1","iss":"app","aud":"mobile","\u0065xp":1700000000}"#.utf8)
        let token = try TokenMinter.sign(rawHeader: Array(#"{"alg":"HS256"}"#.utf8), rawClaims: raw, key: SigningKey(hmacSecret: Array(Self.secret.utf8)))
        #expect(try Self.verifier().verifyBearer(token, now: Self.now).reason == .expired)
    }

    @Test func credentialHashIsTheHexSHA256PrefixOfTheSigningInput() throws {
        let token = try Self.token()
        let identity = try #require(try Self.verifier().verifyBearer(token, now: Self.now).identity)
        let signingInput = token[..<token.lastIndex(of: ".")!]
        let digest = digestBytes(.sha256, Array(signingInput.utf8))
        #expect(identity.credentialHash == digest.prefix(16).map { String(format: "%02x", $0) }.joined())
        // The whole token's (what revocations named it by before) is checked too.
        let whole = digestBytes(.sha256, Array(token.utf8))
        #expect(identity.legacyCredentialHash == whole.prefix(16).map { String(format: "%02x", $0) }.joined())
        // A token with a jti is revoked by it: no hash is computed.
        let withID = try Self.token(Self.claims(extra: [("jti", "t-1")]))
        let named = try #require(try Self.verifier().verifyBearer(withID, now: Self.now).identity)
        #expect(named.tokenID == "t-1")
        #expect(named.credentialHash == nil)
        #expect(named.legacyCredentialHash == nil)
        // SHA-256("abc"), FIPS 180-2 appendix B.1.
        #expect(Array("abc".utf8).withUnsafeBytes { CredentialHash.hex(of: $0) } == "ba7816bf8f01cfea414140de5dae2223")
    }

    @Test func embeddedKeysInHeaderAreIgnored() throws {
        // A jwk header carrying the attacker's own key changes nothing.
        let token = try TokenMinter.sign(header: .object([("alg", "HS256"), ("jwk", ["kty": "oct", "k": "AAAA"]), ("jku", "https://evil.example/jwks")]),
                                         claims: Self.claims(), key: SigningKey(hmacSecret: Array("attacker-secret-of-32-bytes-long!!".utf8)))
        #expect(try Self.verifier().verifyBearer(token, now: Self.now).reason == .signatureInvalid)
    }

    @Test func shortOrZeroES256SignatureIsRefused() throws {
        let token = try TokenMinter.es256(privateKeyPEM: Fixture.text("p256.key.pem"), claims: Self.claims(), keyID: "p256")
        let parts = token.split(separator: ".").map(String.init)
        let zero = Base64URL.encode([UInt8](repeating: 0, count: 64))
        let short = Base64URL.encode(Array(Base64URL.decode(parts[2])!.prefix(63)))
        let order = ECCurve.p256.order
        let rIsN = Base64URL.encode(order + Array(Base64URL.decode(parts[2])!.suffix(32)))
        let der = Base64URL.encode(ECDSAVerifierDER.of(Base64URL.decode(parts[2])!))
        for signature in [zero, short, rIsN, der, ""] {
            let result = try Self.verifier().verifyBearer("\(parts[0]).\(parts[1]).\(signature)", now: Self.now)
            #expect(result.reason == .signatureInvalid, "\(signature)")
        }
    }

    @Test func wrongCurveKeyIsRefusedAtLoad() throws {
        #expect(throws: KeyLoadingError.self) { try VerificationKey(pem: Fixture.text("p384.pub.pem"), algorithm: .es256) }
        // A P-384 JWK labelled ES256 is skipped.
        let jwks = try KeySet(jwks: Fixture.bytes("jwks.json"))
        #expect(jwks.keys.first { $0.keyID == "p384" }?.algorithm == .es384)
    }

    @Test func es256TokenAgainstP384KeyIsRefused() throws {
        var oidc = ProviderConfiguration(name: "o", kind: .oidc)
        oidc.issuer = "app"
        oidc.audiences = ["mobile"]
        oidc.algorithms = ["ES256", "ES384"]
        let verifier = try CredentialVerifier(providers: [oidc], keys: ["o": KeySet(pemPublicKey: Fixture.text("p384.pub.pem"), keyID: "p256")])
        let token = try TokenMinter.es256(privateKeyPEM: Fixture.text("p256.key.pem"), claims: Self.claims(), keyID: "p256")
        #expect(verifier.verifyBearer(token, now: Self.now).reason == .algorithmNotAllowed)
    }
}

/// DER form of a raw ECDSA signature, to show DER is not accepted in a JWS.
enum ECDSAVerifierDER {
    static func of(_ raw: [UInt8]) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: 80)
        let length = raw.withUnsafeBytes { bytes in
            ECDSAVerifier.encodeDER(r: UnsafeRawBufferPointer(rebasing: bytes[0..<32]), s: UnsafeRawBufferPointer(rebasing: bytes[32..<64]),
                                    into: &out)
        }
        return Array(out.prefix(length))
    }
}
