import Testing
@testable import PortcullisAuth

/// `VerifiedIdentity` shares its storage between copies (copy-on-write):
/// it must still behave as a value.
@Suite struct VerifiedIdentityTests {
    static func identity() -> VerifiedIdentity {
        VerifiedIdentity(provider: "app", subject: "user-1", issuer: "app", expiresAt: 10, issuedAt: 1, tokenID: "j",
                         sessionID: nil, claims: ["email": "a@example.com"], listClaims: ["roles": ["a", "b"]], source: .bearer)
    }

    @Test func mutatingACopyLeavesTheOriginal() {
        let original = Self.identity()
        var copy = original
        copy.subject = "user-2"
        copy.claims["email"] = "b@example.com"
        copy.credentialHash = "00"
        #expect(original.subject == "user-1")
        #expect(original.claims == ["email": "a@example.com"])
        #expect(original.credentialHash == nil)
        #expect(copy.subject == "user-2")
        #expect(copy.claims == ["email": "b@example.com"])
        #expect(copy != original)
    }

    @Test func equalityComparesFields() {
        var other = Self.identity()
        #expect(other == Self.identity())
        other.listClaims["roles"]?.append("c")
        #expect(other != Self.identity())
        other.listClaims["roles"] = ["a", "b"]
        #expect(other == Self.identity())
    }

    @Test func aCallerMutatingItsCopyDoesNotChangeTheCachedIdentity() throws {
        var app = ProviderConfiguration(name: "app", kind: .hs256)
        app.secret = AppTokenTests.secret
        app.issuer = "app"
        app.audiences = ["mobile"]
        let verifier = try CredentialVerifier(providers: [app], keys: [:])
        let token = try AppTokenTests.token()
        var first = try #require(verifier.verifyBearer(token, now: AppTokenTests.now).identity)
        first.subject = "changed"
        first.claims["x"] = "y"
        let second = try #require(verifier.verifyBearer(token, now: AppTokenTests.now).identity)
        #expect(verifier.cacheStatistics().hits == 1)
        #expect(second.subject == "user-1")
        #expect(second.claims["x"] == nil)
    }
}
