import Testing
@testable import PortcullisAuth

/// Provider presets against tokens minted by Fixtures/make_fixtures.py (Python `cryptography`).
@Suite struct ProviderTests {
    static let now = Fixture.now

    static func verifier(_ configure: (inout [ProviderConfiguration]) -> Void = { _ in }) throws -> CredentialVerifier {
        var google = ProviderConfiguration(name: "google", kind: .google)
        google.audiences = ["ios.apps.googleusercontent.com", "web.apps.googleusercontent.com"]
        var apple = ProviderConfiguration(name: "apple", kind: .apple)
        apple.audiences = ["com.example.app", "com.example.web"]
        var firebase = ProviderConfiguration(name: "firebase", kind: .firebase)
        firebase.projectID = "demo-project"
        var oidc = ProviderConfiguration(name: "oidc", kind: .oidc)
        oidc.issuer = "https://issuer.example"
        oidc.audiences = ["api"]
        oidc.algorithms = ["ES256", "ES384", "EdDSA", "PS256"]
        var providers = [google, apple, firebase, oidc]
        configure(&providers)
        let jwks = try KeySet(jwks: Fixture.bytes("jwks.json"))
        let certificates = try KeySet(pemCertificateMap: Fixture.bytes("certs.json"))
        var keys: [String: KeySet] = [:]
        for provider in providers {
            switch provider.name {
            case "google", "firebase": keys[provider.name] = certificates
            case "apple", "oidc": keys[provider.name] = jwks
            default: break
            }
        }
        return try CredentialVerifier(providers: providers, keys: keys)
    }

    @Test func googleIDTokenFromCertificateMap() throws {
        let result = try Self.verifier().verifyBearer(Fixture.tokens["google"]!, now: Self.now)
        let identity = try #require(result.identity)
        #expect(identity.provider == "google")
        #expect(identity.subject == "110169484474386276334")
        #expect(identity.issuer == "https://accounts.google.com")
        #expect(identity.claims["email"] == "ada@example.com")
        #expect(identity.claims["email_verified"] == "true")
        #expect(identity.claims["hd"] == "example.com")
    }

    @Test func googleHostedDomainMustMatch() throws {
        let wrong = try Self.verifier { $0[0].hostedDomain = "other.com" }
        #expect(wrong.verifyBearer(Fixture.tokens["google"]!, now: Self.now).reason == .hostedDomainMismatch)
        #expect(wrong.verifyBearer(Fixture.tokens["google"]!, now: Self.now).failure?.httpStatus == 403)
        let right = try Self.verifier { $0[0].hostedDomain = "example.com" }
        #expect(right.verifyBearer(Fixture.tokens["google"]!, now: Self.now).identity != nil)
    }

    @Test func googleAudienceMustBeConfigured() throws {
        let verifier = try Self.verifier { $0[0].audiences = ["web.apps.googleusercontent.com"] }
        #expect(verifier.verifyBearer(Fixture.tokens["google"]!, providers: ["google"], now: Self.now).reason == .audienceNotAccepted)
    }

    @Test func googleAuthorizedPartyMustBeConfigured() throws {
        let verifier = try Self.verifier { $0[0].audiences = ["ios.apps.googleusercontent.com"] }
        #expect(verifier.verifyBearer(Fixture.tokens["google"]!, now: Self.now).reason == .authorizedPartyNotAccepted)
    }

    @Test func googleAllowsThreeHundredSecondsOfSkew() throws {
        let verifier = try Self.verifier()
        #expect(verifier.verifyBearer(Fixture.tokens["google"]!, now: 1_700_003_600 + 299).identity != nil)
        #expect(try Self.verifier().verifyBearer(Fixture.tokens["google"]!, now: 1_700_003_600 + 300).reason == .expired)
        #expect(try Self.verifier().verifyBearer(Fixture.tokens["google"]!, now: 1_700_000_000 - 301).reason == .issuedInFuture)
    }

    @Test func googleRequiredClaim() throws {
        let verifier = try Self.verifier { $0[0].requiredClaims = ["email_verified": .equalsBool(true)] }
        #expect(verifier.verifyBearer(Fixture.tokens["google"]!, now: Self.now).identity != nil)
        let strict = try Self.verifier { $0[0].requiredClaims = ["email": .equals("someone@else.com")] }
        #expect(strict.verifyBearer(Fixture.tokens["google"]!, now: Self.now).reason == .requiredClaimMismatch)
    }

    @Test func appleIdentityTokenWithNonce() throws {
        let verifier = try Self.verifier { $0[1].requiredClaims = ["email_verified": .equalsBool(true)] }
        let token = Fixture.tokens["apple"]!
        let ok = verifier.verifyBearer(token, now: Self.now, appleRawNonce: "raw-nonce-123")
        #expect(ok.identity?.provider == "apple")
        #expect(ok.identity?.subject == "001234.abcdef.1234")
        #expect(verifier.verifyBearer(token, now: Self.now, appleRawNonce: "another").reason == .nonceMismatch)
        #expect(verifier.verifyBearer(token, now: Self.now).identity != nil)
    }

    @Test func appleAudienceIsBundleOrServicesID() throws {
        let verifier = try Self.verifier { $0[1].audiences = ["com.example.web"] }
        #expect(verifier.verifyBearer(Fixture.tokens["apple"]!, providers: ["apple"], now: Self.now).reason == .audienceNotAccepted)
    }

    @Test func firebaseIDToken() throws {
        let result = try Self.verifier().verifyBearer(Fixture.tokens["firebase"]!, now: Self.now)
        #expect(result.identity?.provider == "firebase")
        #expect(result.identity?.subject == "uid123")
        #expect(result.identity?.claims["email_verified"] == "false")
    }

    @Test func firebaseWrongProjectIsRefused() throws {
        let verifier = try Self.verifier { $0[2].projectID = "other-project" }
        let result = verifier.verifyBearer(Fixture.tokens["firebase"]!, providers: ["firebase"], now: Self.now)
        #expect(result.reason == .issuerNotAccepted)
    }

    @Test func jwkAlgorithmBindsTheKey() throws {
        // rsa1's JWK says RS256, so a PS256 token under kid rsa1 cannot use it.
        #expect(try Self.verifier().verifyBearer(Fixture.tokens["ps256"]!, now: Self.now).reason == .algorithmNotAllowed)
    }

    @Test func ps256WithAPEMKeyBoundToPS256() throws {
        var oidc = ProviderConfiguration(name: "oidc", kind: .oidc)
        oidc.issuer = "https://issuer.example"
        oidc.audiences = ["api"]
        oidc.algorithms = ["PS256"]
        let keys = try KeySet(pemPublicKey: Fixture.text("rsa1.pub.pem"), keyID: "rsa1", algorithm: .ps256)
        let verifier = try CredentialVerifier(providers: [oidc], keys: ["oidc": keys])
        #expect(verifier.verifyBearer(Fixture.tokens["ps256"]!, now: Self.now).identity?.subject == "ps-user")
    }

    @Test(arguments: ["es256", "es384", "eddsa"])
    func oidcAlgorithms(token: String) throws {
        let result = try Self.verifier().verifyBearer(Fixture.tokens[token]!, now: Self.now)
        #expect(result.identity?.provider == "oidc", "\(token): \(String(describing: result.failure))")
    }

    @Test func oidcAlgorithmOutsideAllowListIsRefused() throws {
        let verifier = try Self.verifier { $0[3].algorithms = ["RS256"] }
        #expect(verifier.verifyBearer(Fixture.tokens["es256"]!, now: Self.now).reason == .algorithmNotAllowed)
    }

    @Test func providerFilterLimitsWhichAreTried() throws {
        let verifier = try Self.verifier()
        #expect(verifier.verifyBearer(Fixture.tokens["google"]!, providers: ["apple"], now: Self.now).identity == nil)
        #expect(verifier.verifyBearer(Fixture.tokens["google"]!, providers: ["google"], now: Self.now).identity != nil)
        // A cache hit still honours the filter.
        #expect(verifier.verifyBearer(Fixture.tokens["google"]!, providers: ["apple"], now: Self.now).identity == nil)
    }

    @Test func missingKeysGiveKeysUnavailable() throws {
        var google = ProviderConfiguration(name: "google", kind: .google)
        google.audiences = ["ios.apps.googleusercontent.com", "web.apps.googleusercontent.com"]
        let verifier = try CredentialVerifier(providers: [google], keys: [:])
        #expect(verifier.verifyBearer(Fixture.tokens["google"]!, now: Self.now).reason == .keysUnavailable)
        #expect(verifier.updateKeys(provider: "google", keys: try KeySet(pemCertificateMap: Fixture.bytes("certs.json"))))
        let after = verifier.verifyBearer(Fixture.tokens["google"]!, now: Self.now)
        #expect(after.identity != nil, "\(String(describing: after.failure))")
    }

    @Test func keyRotationDropsCachedVerifications() throws {
        let verifier = try Self.verifier()
        let token = Fixture.tokens["google"]!
        #expect(verifier.verifyBearer(token, now: Self.now).identity != nil)
        #expect(verifier.cache.count == 1)
        // Google rotates rsa1 out: the cached verification must not survive.
        verifier.updateKeys(provider: "google", keys: try KeySet(pemPublicKey: Fixture.text("rsa2.pub.pem"), keyID: "rsa2"))
        #expect(verifier.cache.count == 0)
        #expect(verifier.verifyBearer(token, now: Self.now).reason == .unknownKey)
    }

    @Test func configurationErrorsAreTyped() {
        #expect(throws: AuthConfigurationError.missingSetting(provider: "g", setting: "audiences")) {
            try CredentialVerifier(providers: [ProviderConfiguration(name: "g", kind: .google)], keys: [:])
        }
        #expect(throws: AuthConfigurationError.missingSetting(provider: "f", setting: "project_id")) {
            try CredentialVerifier(providers: [ProviderConfiguration(name: "f", kind: .firebase)], keys: [:])
        }
        var short = ProviderConfiguration(name: "app", kind: .hs256)
        short.secret = "too-short"
        #expect(throws: AuthConfigurationError.self) { try CredentialVerifier(providers: [short], keys: [:]) }
        #expect(throws: AuthConfigurationError.unknownProvider("nobody")) {
            try CredentialVerifier(providers: [], keys: ["nobody": .empty])
        }
    }
}

func jsonString(_ text: String) -> String { JSONValue.string(text).serialized }
