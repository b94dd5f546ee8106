import Testing
@testable import PortcullisKeys

extension PortcullisKeysTests {
    @Suite struct CacheLifetimeTests {
        let configuration = KeyManagerConfiguration(minimumTTL: 300, maximumTTL: 86_400, defaultTTL: 3600)

        func ttl(_ cacheControl: String?, age: String? = nil, expires: String? = nil, now: Double = 1_700_000_000) -> Double {
            CacheLifetime.ttl(cacheControl: cacheControl, age: age, expires: expires, now: now, configuration: configuration)
        }

        @Test func maxAgeMinusAgeIsTheTTL() {
            #expect(ttl("public, max-age=19845, must-revalidate, no-transform") == 19845)
            #expect(ttl("max-age=20000", age: "1000") == 19000)
            #expect(ttl("max-age=\"7200\"") == 7200)
        }

        @Test func ttlIsClampedToFloorAndCeiling() {
            #expect(ttl("max-age=10") == 300)
            #expect(ttl("max-age=1000", age: "990") == 300)
            #expect(ttl("max-age=9999999") == 86_400)
            #expect(ttl("no-store") == 300)
            #expect(ttl("no-cache, max-age=3000") == 300)
        }

        @Test func expiresIsUsedWithoutMaxAgeAndDefaultOtherwise() {
            // 2023-11-14 22:13:20 GMT is 1_700_000_000.
            #expect(CacheLifetime.httpDate("Tue, 14 Nov 2023 22:13:20 GMT") == 1_700_000_000)
            #expect(ttl(nil, expires: "Tue, 14 Nov 2023 23:13:20 GMT") == 3600)
            #expect(ttl("public", expires: "not a date") == 3600)
            #expect(ttl(nil) == 3600)
        }
    }
}
