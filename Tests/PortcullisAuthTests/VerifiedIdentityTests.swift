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

    /// Forwarded claims are a list in the provider's order; `claim(_:)`
    /// finds the first of a name, `claims` is the same pairs as a dictionary,
    /// and equality ignores order but counts repeats (and is symmetric).
    @Test func claimListLookupAndEquality() throws {
        func identity(_ claims: [(String, String)]) -> VerifiedIdentity {
            VerifiedIdentity(provider: "app", subject: "s", issuer: nil, expiresAt: 10, issuedAt: nil, tokenID: nil, sessionID: nil,
                             claimList: claims.map { IdentityClaim(name: $0.0, value: $0.1) }, source: .bearer)
        }
        let ordered = identity([("email", "a@example.com"), ("hd", "example.com")])
        #expect(ordered.claim("hd") == "example.com")
        #expect(ordered.claim("missing") == nil)
        #expect(ordered.claims == ["email": "a@example.com", "hd": "example.com"])
        #expect(ordered == identity([("hd", "example.com"), ("email", "a@example.com")]))
        let repeated = identity([("a", "1"), ("a", "1")]), mixed = identity([("a", "1"), ("b", "2")])
        #expect(repeated != mixed)
        #expect(mixed != repeated)
        #expect(identity([("a", "1"), ("a", "2")]).claim("a") == "1")

        var app = ProviderConfiguration(name: "app", kind: .hs256)
        app.secret = AppTokenTests.secret
        app.issuer = "https://issuer.example.com/with/a/long/path"
        app.audiences = ["mobile"]
        app.forwardedClaims = ["hd", "email", "hd"]
        let verifier = try CredentialVerifier(providers: [app], keys: [:])
        let token = try TokenMinter.hs256(secret: AppTokenTests.secret, claims: [
            "sub": "user-1", "iss": "https://issuer.example.com/with/a/long/path", "aud": "mobile", "exp": 1_700_003_600,
            "email": "a@example.com", "hd": "example.com",
        ])
        let verified = try #require(verifier.verifyBearer(token, now: 1_700_000_100).identity)
        #expect(verified.issuer == "https://issuer.example.com/with/a/long/path")
        #expect(verified.claimList == [IdentityClaim(name: "hd", value: "example.com"), IdentityClaim(name: "email", value: "a@example.com")],
                "configured order, a name listed twice forwarded once")
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
