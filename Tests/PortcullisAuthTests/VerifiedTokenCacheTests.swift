import Dispatch
import Testing
@testable import PortcullisAuth
import PortcullisCore

@Suite struct VerifiedTokenCacheTests {
    static let secret = "an-auth-secret-of-at-least-32-bytes!!"

    static func verifier(capacity: Int = 1024) throws -> CredentialVerifier {
        var app = ProviderConfiguration(name: "app", kind: .hs256)
        app.secret = secret
        return try CredentialVerifier(providers: [app], keys: [:], cacheCapacity: capacity)
    }

    static func token(_ sub: String, exp: Int64 = 1_700_003_600) throws -> String {
        try TokenMinter.hs256(secret: secret, claims: ["sub": .string(sub), "iat": 1_700_000_000, "exp": .integer(exp)])
    }

    @Test func hitReturnsTheSameIdentityAndRechecksExpiry() throws {
        let verifier = try Self.verifier()
        let token = try Self.token("a")
        let first = verifier.verifyBearer(token, now: 1_700_000_100)
        #expect(verifier.cache.count == 1)
        #expect(verifier.verifyBearer(token, now: 1_700_000_200) == first)
        #expect(verifier.verifyBearer(token, now: 1_700_003_600 + 15).reason == .expired)
    }

    /// `lookUpBearer` answers a hit only for bytes verified before, from a provider the
    /// caller allows, unexpired; `verifyBearer(after:)` then stores under the lookup's key.
    /// Only credentials of the compact alphabet are ever stored, so a hit stands for a
    /// syntax check (the gateway skips its token68 scan on one).
    @Test func aLookupHitsOnlyWhatWasVerifiedAndOnlyCompactCredentialsAreKept() throws {
        let verifier = try Self.verifier()
        let token = Array(try Self.token("a").utf8)
        try token.withUnsafeBytes { bytes in
            let miss = verifier.lookUpBearer(bytes, providers: nil, now: 1_700_000_100)
            #expect(miss.identity == nil)
            let verified = try #require(verifier.verifyBearer(bytes, providers: nil, now: 1_700_000_100, after: miss).identity)
            #expect(verifier.lookUpBearer(bytes, providers: nil, now: 1_700_000_200).identity == verified)
            #expect(verifier.lookUpBearer(bytes, providers: ["other"], now: 1_700_000_200).identity == nil)
            #expect(verifier.lookUpBearer(bytes, providers: ["app"], now: 1_700_003_600 + 15).identity == nil)  // expired
            #expect(verifier.lookUpBearer(UnsafeRawBufferPointer(rebasing: bytes.dropLast()), providers: nil,
                                          now: 1_700_000_200).identity == nil)
        }
        let compact = Array("eyJhbGciOiJIUzI1NiJ9.e30.abc-_09XYZ".utf8)
        #expect(compact.withUnsafeBytes { CredentialVerifier.isCompactAlphabet($0) })
        for other in ["a b", "a=", "a+b", "a/b", "a~", "é", "a\u{0}"] {
            #expect(!Array(other.utf8).withUnsafeBytes { CredentialVerifier.isCompactAlphabet($0) }, "\(other)")
        }
    }

    @Test func failuresAreNotCached() throws {
        let verifier = try Self.verifier()
        _ = verifier.verifyBearer(try Self.token("a"), now: 1_800_000_000)
        #expect(verifier.cache.count == 0)
    }

    @Test func cacheIsBounded() throws {
        let verifier = try Self.verifier(capacity: 32)
        for index in 0..<200 { _ = verifier.verifyBearer(try Self.token("user\(index)"), now: 1_700_000_100) }
        #expect(verifier.cache.count <= 32)
    }

    @Test func zeroCapacityDisablesTheCache() throws {
        let verifier = try Self.verifier(capacity: 0)
        #expect(verifier.verifyBearer(try Self.token("a"), now: 1_700_000_100).identity != nil)
        #expect(verifier.cache.count == 0)
    }

    @Test func keysAreKeyedHashesNotTokens() throws {
        let cache = VerifiedTokenCache(capacity: 16, providerCount: 1)
        let other = VerifiedTokenCache(capacity: 16, providerCount: 1)
        let token = Array(try Self.token("a").utf8)
        let a = token.withUnsafeBytes { cache.key(bearer: $0) }
        let b = token.withUnsafeBytes { other.key(bearer: $0) }
        #expect(a != b)  // per-process (here per-cache) random key
        #expect(a == token.withUnsafeBytes { cache.key(bearer: $0) })
    }

    @Test func sipHashMatchesReferenceVector() {
        // SipHash-2-4-128 reference (Aumasson & Bernstein vectors_sip128): key 00..0f, message 00..0e.
        let key = (UInt64(0x0706050403020100), UInt64(0x0F0E0D0C0B0A0908))
        var hasher = SipHash128(key: key)
        let message = [UInt8](0..<15)
        message.withUnsafeBytes { hasher.update($0) }
        let (low, high) = hasher.finalize()
        var bytes = [UInt8]()
        withUnsafeBytes(of: low.littleEndian) { bytes += $0 }
        withUnsafeBytes(of: high.littleEndian) { bytes += $0 }
        #expect(bytes == hexBytes("5493e99933b0a8117e08ec0f97cfc3d9"))
        // Streaming in odd pieces gives the same digest.
        var pieces = SipHash128(key: key)
        message.withUnsafeBytes { raw in
            pieces.update(UnsafeRawBufferPointer(rebasing: raw[0..<3]))
            pieces.update(UnsafeRawBufferPointer(rebasing: raw[3..<12]))
            pieces.update(UnsafeRawBufferPointer(rebasing: raw[12...]))
        }
        #expect(pieces.finalize() == (low, high))
    }

    @Test func sipHashOneThreeStreamsConsistently() {
        // Found by the fuzzer: the unrolled 1-3 loop must respect a partial
        // tail (the domain byte) and never read past the input.
        let key = (UInt64(1), UInt64(2))
        let message = [UInt8](0..<81)
        var whole = SipHash128.cacheHasher(key: key)
        message.withUnsafeBytes { whole.update($0) }
        let expected = whole.finalize()
        for split in [1, 7, 9, 80] {
            var pieces = SipHash128.cacheHasher(key: key)
            message.withUnsafeBytes { raw in
                pieces.update(UnsafeRawBufferPointer(rebasing: raw[0..<split]))
                pieces.update(UnsafeRawBufferPointer(rebasing: raw[split...]))
            }
            #expect(pieces.finalize() == expected, "split \(split)")
        }
    }

    @Test func concurrentVerificationIsConsistent() throws {
        let verifier = try Self.verifier(capacity: 64)
        let tokens = try (0..<8).map { try Self.token("user\($0)") }
        let rsa = try KeySet(pemPublicKey: Fixture.text("rsa1.pub.pem"), keyID: "rsa1")
        var oidc = ProviderConfiguration(name: "o", kind: .oidc)
        oidc.issuer = "i"
        oidc.audiences = ["a"]
        let rsaVerifier = try CredentialVerifier(providers: [oidc], keys: ["o": rsa], cacheCapacity: 0)
        let rsaToken = try TokenMinter.rs256(privateKeyPEM: Fixture.text("rsa1.key.pem"),
                                             claims: ["iss": "i", "aud": "a", "sub": "r", "exp": 1_700_003_600], keyID: "rsa1")
        let failures = LockedValue(0)
        DispatchQueue.concurrentPerform(iterations: 400) { index in
            let token = tokens[index % tokens.count]
            if verifier.verifyBearer(token, now: 1_700_000_100).identity?.subject != "user\(index % tokens.count)" {
                failures.withLock { $0 += 1 }
            }
            if index % 4 == 0, rsaVerifier.verifyBearer(rsaToken, now: 1_700_000_100).identity?.subject != "r" {
                failures.withLock { $0 += 1 }
            }
        }
        #expect(failures.withLock { $0 } == 0)
    }
}
