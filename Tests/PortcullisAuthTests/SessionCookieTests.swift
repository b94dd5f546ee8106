import Testing
@testable import PortcullisAuth

/// NextAuth v4 / Auth.js v5 vectors from the rule book's appendix (secret "secret").
@Suite struct SessionCookieTests {
    static let v4 = "eyJhbGciOiJkaXIiLCJlbmMiOiJBMjU2R0NNIn0..AAECAwQFBgcICQoL.D9w7kt5B9FSTpYnNJhk6eKY6U5qd60sCA_6YEyCW5DMGkn31LVU1jMJUPAZOXSIdYTZBmw96CMm7G6Kpxuoh0dQSW2P0DVJSti13AH-_ThuW83Evff_pzDfu3BvjNakRr1mgfI44nCgeOMCM5h9YclN4nK0jp0U1_WOKd0toSSoDDAYH0iyMak7Cvg7_PXby8nPur3rZmut2q1lUtjpPFlgOZOAwDX6Fzztpl0o40QAfYHe_QA.TtoqWDZIp2VTpUgGDQTVHQ"
    static let v5 = "eyJhbGciOiJkaXIiLCJlbmMiOiJBMjU2Q0JDLUhTNTEyIiwia2lkIjoiN3g5RFVNVmFFVTZnaWFiMGwwT1dEdDRlNFNzUkhfY2J3TW9mMkV6RXl5Nm9uSzVvOHhTUFBCNzk5UlZvcW0ydjZ6Njc0a1FDdjlqb20yVDhTLWExZFEifQ..AAECAwQFBgcICQoLDA0ODw.91MrEt7w8fHlCnLZDd5effpSgqEHzlRfcLNBHscvzroUQKtjrIhMlMrwuIuAvy5Av8PrFq4TQ7eOn6Hwivlo_bu2H9Nf9QZtCq5ATI7tGbRkjMo-yvEOfBtlNU4xctznmc9m6YviMg9o-bMb-qiIUulMYbImJrBeKLXKTCWVnrn8puUYcBAlEL-xtTjUCbUwprBJDBdOjIdgEcRzbZjBo-pb_0YqwB52V3vVgBKttDaDMFfL9LJbSfFYzdZKSyh-.2_xX3dBscigpv50YKkNe46HKwCHiXWN0lvkyRVfSXvQ"
    static let now = 1_700_000_100.0

    static func verifier(v5Secrets: [String] = ["secret"]) throws -> CredentialVerifier {
        var v4 = ProviderConfiguration(name: "web-v4", kind: .nextauth)
        v4.secret = "secret"
        var v5 = ProviderConfiguration(name: "web-v5", kind: .authjs)
        v5.secrets = v5Secrets
        return try CredentialVerifier(providers: [v4, v5], keys: [:])
    }

    static func cookies(_ pairs: [(String, String)]) -> [(name: Substring, value: Substring)] {
        pairs.map { (Substring($0.0), Substring($0.1)) }
    }

    @Test func v4KeyDerivationMatchesVector() throws {
        let key = try hkdfSHA256(secret: Array("secret".utf8), salt: [], info: Array("NextAuth.js Generated Encryption Key".utf8), length: 32)
        #expect(key == hexBytes("9ab5058ebf5be88f82f4aee99d22cf8be7a34a4af1836299d0668f4d83020f5a"))
    }

    @Test func v5KeyDerivationAndThumbprintMatchVector() throws {
        let key = try SessionCookieProvider.authjsKey(secret: "secret", salt: "authjs.session-token", encryption: .a256cbcHS512)
        #expect(key == hexBytes("b1ef6cdd915c44c0a71232574a6a70546a5e16d12bb38df4638e3b96bdd32025131e90695ff072a9d148f1511c7a4981a85b63a628311da1fa7ccfc49c47c2bb"))
        #expect(SessionCookieProvider.thumbprint(key) == "7x9DUMVaEU6giab0l0OWDt4e4SsRH_cbwMof2EzEyy6onK5o8xSPPB799RVoqm2v6z674kQCv9jom2T8S-a1dQ")
        let secure = try SessionCookieProvider.authjsKey(secret: "secret", salt: "__Secure-authjs.session-token", encryption: .a256cbcHS512)
        #expect(secure == hexBytes("0d8bf2d720367891eda6b7cc8f1960cf3fac4c0e5972e05c0ea71f835d01d69a60b8d258a71a473d46b0eec5ed3dfe45a7bcfbe54ccfa14f50206f3af0f777f5"))
    }

    @Test func v4CookieDecrypts() throws {
        let result = try Self.verifier().verifySessionCookies(Self.cookies([("next-auth.session-token", Self.v4)]), providers: nil, now: Self.now)
        let identity = try #require(result.identity)
        #expect(identity.provider == "web-v4")
        #expect(identity.subject == "user_123")
        #expect(identity.expiresAt == 1_702_592_000)
        #expect(identity.tokenID == "00000000-0000-4000-8000-000000000000")
        #expect(identity.claims["email"] == "test@example.com")
        #expect(identity.claims["name"] == "Test User")
        #expect(identity.source == .sessionCookie)
    }

    @Test func v4CookieUnderSecurePrefixDecrypts() throws {
        let result = try Self.verifier().verifySessionCookies(Self.cookies([("__Secure-next-auth.session-token", Self.v4)]), providers: nil, now: Self.now)
        #expect(result.identity?.subject == "user_123")
    }

    @Test func v5CookieDecrypts() throws {
        let result = try Self.verifier().verifySessionCookies(Self.cookies([("authjs.session-token", Self.v5)]), providers: nil, now: Self.now)
        let identity = try #require(result.identity)
        #expect(identity.provider == "web-v5")
        #expect(identity.subject == "user_123")
        #expect(identity.claims["picture"] == "https://example.com/a.png")
    }

    @Test func v5CookieWithRotatedSecretsDecrypts() throws {
        let verifier = try Self.verifier(v5Secrets: ["a-newer-secret-that-is-first-in-the-list", "secret"])
        let result = verifier.verifySessionCookies(Self.cookies([("authjs.session-token", Self.v5)]), providers: nil, now: Self.now)
        #expect(result.identity?.subject == "user_123")
    }

    @Test func v5CookieWithWrongSecretFails() throws {
        let verifier = try Self.verifier(v5Secrets: ["another-secret"])
        let result = verifier.verifySessionCookies(Self.cookies([("authjs.session-token", Self.v5)]), providers: ["web-v5"], now: Self.now)
        // Said as it is: a cookie sealed under another secret cannot be decrypted (its kid is
        // that secret's key thumbprint; it names no signing key to fetch).
        #expect(result.reason == .decryptionFailed)
        #expect(result.failure?.description == "The token could not be decrypted")
    }

    @Test func v5CookieUnderSecureNameFails() throws {
        // The salt is the cookie name, so a cookie moved to the __Secure- name does not decrypt.
        let result = try Self.verifier().verifySessionCookies(Self.cookies([("__Secure-authjs.session-token", Self.v5)]), providers: nil, now: Self.now)
        #expect(result.identity == nil)
    }

    @Test func v4CookieUnderV5NameFails() throws {
        let result = try Self.verifier().verifySessionCookies(Self.cookies([("authjs.session-token", Self.v4)]), providers: nil, now: Self.now)
        #expect(result.identity == nil)
        #expect(result.failure?.httpStatus == 401)
    }

    @Test func v5CookieUnderV4NameFails() throws {
        let result = try Self.verifier().verifySessionCookies(Self.cookies([("next-auth.session-token", Self.v5)]), providers: nil, now: Self.now)
        #expect(result.reason == .algorithmNotAllowed)
    }

    @Test func expiredCookieFails() throws {
        let result = try Self.verifier().verifySessionCookies(Self.cookies([("next-auth.session-token", Self.v4)]), providers: nil, now: 1_702_592_000 + 15)
        #expect(result.reason == .expired)
        let inLeeway = try Self.verifier().verifySessionCookies(Self.cookies([("next-auth.session-token", Self.v4)]), providers: nil, now: 1_702_592_000 + 14)
        #expect(inLeeway.identity != nil)
    }

    @Test func tamperedCookieFails() throws {
        var tampered = Array(Self.v4)
        let index = tampered.count - 30
        tampered[index] = tampered[index] == "A" ? "B" : "A"
        let result = try Self.verifier().verifySessionCookies(Self.cookies([("next-auth.session-token", String(tampered))]), providers: nil, now: Self.now)
        #expect(result.reason == .decryptionFailed)
    }

    @Test func chunkedCookieIsJoinedInNumericOrder() throws {
        let value = Array(Self.v5)
        let chunks = stride(from: 0, to: value.count, by: 100).map { String(value[$0..<min($0 + 100, value.count)]) }
        #expect(chunks.count >= 3)
        var pairs = chunks.enumerated().map { ("authjs.session-token.\($0.offset)", $0.element) }
        pairs.reverse()
        pairs.append(("other", "x"))
        let result = try Self.verifier().verifySessionCookies(Self.cookies(pairs), providers: nil, now: Self.now)
        #expect(result.identity?.subject == "user_123")
    }

    @Test func aMissingChunkIsAnInvalidToken() throws {
        let value = Array(Self.v5)
        let pairs = [("authjs.session-token.0", String(value[0..<100])), ("authjs.session-token.2", String(value[100...]))]
        let result = try Self.verifier().verifySessionCookies(Self.cookies(pairs), providers: ["web-v5"], now: Self.now)
        #expect(result.reason == .incompleteCookie)
        #expect(result.failure?.httpStatus == 401)
        #expect(result.failure?.errorCode == .invalidToken)
    }

    @Test func aChunkTwiceIsHarmlessWhenIdenticalAndAmbiguousWhenNot() throws {
        let value = Array(Self.v5)
        let first = String(value[0..<100]), rest = String(value[100...])
        let same = [("authjs.session-token.0", first), ("authjs.session-token.0", first), ("authjs.session-token.1", rest)]
        #expect(try Self.verifier().verifySessionCookies(Self.cookies(same), providers: nil, now: Self.now).identity?.subject == "user_123")
        let differing = [("authjs.session-token.0", first), ("authjs.session-token.0", "x" + first.dropFirst()), ("authjs.session-token.1", rest)]
        let result = try Self.verifier().verifySessionCookies(Self.cookies(differing), providers: nil, now: Self.now)
        #expect(result.reason == .ambiguousCredential)
        #expect(result.failure?.httpStatus == 400)
    }

    @Test func looseChunkNamesAreIgnored() throws {
        let pairs = [("authjs.session-token.01", Self.v5), ("authjs.session-tokenX", Self.v5)]
        let result = try Self.verifier().verifySessionCookies(Self.cookies(pairs), providers: nil, now: Self.now)
        #expect(result.reason == .noCredential)
        #expect(result.failure?.errorCode == nil)
    }

    @Test func unsuffixedCookieIsTriedBeforeChunks() throws {
        let pairs = [("authjs.session-token.0", "garbage"), ("authjs.session-token", Self.v5)]
        let result = try Self.verifier().verifySessionCookies(Self.cookies(pairs), providers: nil, now: Self.now)
        #expect(result.identity?.subject == "user_123")
    }

    @Test func nextAuthJWEInBearerHeaderIsAccepted() throws {
        let result = try Self.verifier().verifyBearer(Self.v4, now: Self.now)
        #expect(result.identity?.provider == "web-v4")
        #expect(result.identity?.source == .bearer)
        let v5 = try Self.verifier().verifyBearer(Self.v5, now: Self.now)
        #expect(v5.identity?.provider == "web-v5")
    }

    @Test func jweWithEncryptedKeyIsRefused() throws {
        let parts = Self.v4.split(separator: ".", omittingEmptySubsequences: false)
        let token = [parts[0], "AAAA", parts[2], parts[3], parts[4]].joined(separator: ".")
        let result = try Self.verifier().verifyBearer(token, now: Self.now)
        #expect(result.reason == .malformed)
    }

    @Test func cookieHitComesFromCache() throws {
        let verifier = try Self.verifier()
        let cookies = Self.cookies([("next-auth.session-token", Self.v4)])
        _ = verifier.verifySessionCookies(cookies, providers: nil, now: Self.now)
        #expect(verifier.cache.count == 1)
        #expect(verifier.verifySessionCookies(cookies, providers: nil, now: Self.now).identity?.subject == "user_123")
        #expect(verifier.verifySessionCookies(cookies, providers: nil, now: 1_702_592_000 + 15).reason == .expired)
    }
}
