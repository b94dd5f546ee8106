import Foundation
import Testing
import PortcullisAuth
import PortcullisCore
@testable import PortcullisKeys

extension PortcullisKeysTests {
    @Suite struct KeyManagerTests {
        @Test func initialFetchInstallsKeysAndATokenVerifies() async throws {
            let server = try KeyServer()
            defer { server.stop() }
            try server.setState(["publish": ["rsa-a", "ec-a"], "cache_control": "public, max-age=1200"])
            let verifier = try TestIssuer.verifier()
            #expect(verifier.check(try server.token(kid: "rsa-a")).failure?.reason == .keysUnavailable)
            let events = EventLog()
            let manager = try KeyManager.make(server: server, verifier: verifier, events: events)
            defer { manager.shutdown() }
            await manager.started()
            #expect(verifier.check(try server.token(kid: "rsa-a")).identity?.subject == "user-1")
            #expect(verifier.check(try server.token(kid: "ec-a")).identity?.subject == "user-1")
            let status = manager.providerStatus
            #expect(status.kids == ["rsa-a", "ec-a"])
            #expect(status.source == server.url)
            #expect(status.health == .fresh && status.origin == .fetched && status.lastError == nil)
            let fetchedAt = try #require(status.fetchedAt), expiresAt = try #require(status.expiresAt)
            #expect(abs(expiresAt - fetchedAt - 1200) < 0.001)
            #expect(abs(fetchedAt - WallClock.nowSeconds()) < 10)
            #expect(try await server.count() == 1)
            #expect(events.all.contains { if case .keysInstalled(_, ["rsa-a", "ec-a"], .fetched, _) = $0 { true } else { false } })
        }

        @Test func maxAgeIsRespectedAndClampedOnRealFetches() async throws {
            let server = try KeyServer(keys: ["rsa-a": "RS256"])
            defer { server.stop() }
            let manager = try KeyManager.make(server: server, verifier: try TestIssuer.verifier(),
                                              configuration: quickConfiguration(minimumTTL: 60, maximumTTL: 3600))
            defer { manager.shutdown() }
            await manager.started()
            func ttl() -> Double { manager.providerStatus.expiresAt! - manager.providerStatus.fetchedAt! }
            #expect(abs(ttl() - 600) < 0.001)  // the server's default max-age=600
            for (cacheControl, age, expected) in [("max-age=100000", nil, 3600.0), ("max-age=5", nil, 60.0),
                                                   ("public, max-age=1000", 400, 600.0), (nil, nil, 3600.0)] as [(String?, Int?, Double)] {
                var state: [String: Any] = ["cache_control": cacheControl as Any? ?? NSNull()]
                if let age { state["age"] = age }
                try server.setState(state)
                let outcome = await manager.refreshed()
                #expect(outcome == .unchanged)
                #expect(abs(ttl() - expected) < 0.001, "\(String(describing: cacheControl)) age \(String(describing: age))")
            }
        }

        @Test func secondInstanceUsesTheSharedCacheWithoutFetching() async throws {
            let server = try KeyServer(keys: ["rsa-a": "RS256"])
            defer { server.stop() }
            let cache = InProcessKeyCache()
            let first = try KeyManager.make(server: server, verifier: try TestIssuer.verifier(), cache: cache)
            defer { first.shutdown() }
            await first.started()
            #expect(try await server.count() == 1)

            let verifier = try TestIssuer.verifier()
            let second = try KeyManager.make(server: server, verifier: verifier, cache: cache)
            defer { second.shutdown() }
            await second.started()
            #expect(try await server.count() == 1)
            #expect(verifier.check(try server.token(kid: "rsa-a")).identity != nil)
            let status = second.providerStatus
            #expect(status.origin == .sharedCache)
            #expect(status.fetchedAt == first.providerStatus.fetchedAt)
            #expect(second.counters().fetches == 0 && second.counters().sharedCacheLoads == 1)
        }

        @Test func rotationDropsCachedVerificationsOfARemovedKey() async throws {
            let server = try KeyServer(keys: ["rsa-a": "RS256", "rsa-b": "RS256"])
            defer { server.stop() }
            try server.setState(["publish": ["rsa-a", "rsa-b"]])
            let verifier = try TestIssuer.verifier()
            let manager = try KeyManager.make(server: server, verifier: verifier)
            defer { manager.shutdown() }
            await manager.started()
            let old = try server.token(kid: "rsa-a"), new = try server.token(kid: "rsa-b")
            #expect(verifier.check(old).identity != nil)
            #expect(verifier.check(old).identity != nil)  // now a verified-token cache hit

            try server.setState(["publish": ["rsa-b"]])
            #expect(await manager.refreshed() == .changed)
            #expect(manager.providerStatus.kids == ["rsa-b"])
            #expect(verifier.check(old).failure?.reason == .unknownKey)
            #expect(verifier.check(new).identity != nil)
        }

        @Test func refreshRunsAheadOfExpiry() async throws {
            let server = try KeyServer(keys: ["rsa-a": "RS256"])
            defer { server.stop() }
            try server.setState(["cache_control": "max-age=2"])
            var configuration = quickConfiguration(minimumTTL: 1)
            configuration.refreshFraction = 0.5
            configuration.refreshJitterFraction = 0
            let manager = try KeyManager.make(server: server, verifier: try TestIssuer.verifier(), configuration: configuration)
            defer { manager.shutdown() }
            await manager.started()
            let firstExpiry = manager.providerStatus.expiresAt!
            // Refresh at 1 s, before the 2 s expiry: the keys never go stale.
            #expect(await eventually(within: 5) { manager.providerStatus.expiresAt! > firstExpiry })
            #expect(try await server.count() >= 2)
            #expect(manager.providerStatus.health == .fresh)
            #expect(manager.counters().staleTransitions == 0)
        }

        @Test func certificateMapAndInlineSourcesLoad() async throws {
            let server = try KeyServer(keys: ["rsa-a": "RS256"])
            defer { server.stop() }
            try server.setState(["format": "pem"])
            let verifier = try TestIssuer.verifier()
            let manager = try KeyManager(verifier: verifier,
                                         providers: [ManagedKeyProvider(name: TestIssuer.provider,
                                                                        source: .url(server.url, format: .pemCertificateMap))],
                                         fetchLoop: testLoop)
            defer { manager.shutdown() }
            await manager.started()
            #expect(verifier.check(try server.token(kid: "rsa-a")).identity != nil)

            // An inline JWKS needs no fetch.
            try server.setState([:])
            let jwks = try await get(server.url).get().body
            let before = try await server.count()
            let inlineVerifier = try TestIssuer.verifier()
            let inline = try KeyManager(verifier: inlineVerifier,
                                        providers: [ManagedKeyProvider(name: TestIssuer.provider, source: .document(jwks, format: .jwks))],
                                        fetchLoop: testLoop)
            defer { inline.shutdown() }
            await inline.started()
            #expect(inlineVerifier.check(try server.token(kid: "rsa-a")).identity != nil)
            #expect(try await server.count() == before)
            #expect(inline.providerStatus.origin == .inline && inline.providerStatus.source == "inline")
        }

        @Test func keysAreFetchedOverHTTPS() async throws {
            let server = try KeyServer(keys: ["ec-a": "ES256"], tlsNames: "IP:127.0.0.1")
            defer { server.stop() }
            let verifier = try TestIssuer.verifier()
            var configuration = KeyManagerConfiguration()
            configuration.fetch.caFile = server.caFile
            let manager = try KeyManager.make(server: server, verifier: verifier, configuration: configuration)
            defer { manager.shutdown() }
            await manager.started()
            #expect(manager.providerStatus.source.hasPrefix("https://"))
            #expect(verifier.check(try server.token(kid: "ec-a")).identity != nil)
        }

        @Test func defaultSourcesFollowTheRuleBook() throws {
            #expect(try KeySource.forProvider("g", kind: .google) == .url("https://www.googleapis.com/oauth2/v3/certs", format: .jwks))
            #expect(try KeySource.forProvider("a", kind: .apple) == .url("https://appleid.apple.com/auth/keys", format: .jwks))
            #expect(try KeySource.forProvider("f", kind: .firebase) == .url(KeySource.firebaseURL, format: .pemCertificateMap))
            #expect(try KeySource.forProvider("f", kind: .firebase, jwksURL: "http://127.0.0.1:9/jwks") == .url("http://127.0.0.1:9/jwks", format: .jwks))
            #expect(try KeySource.forProvider("h", kind: .hs256) == nil)
            #expect(throws: KeyManagerConfigurationError.missingKeySource(provider: "o")) { try KeySource.forProvider("o", kind: .oidc) }
            #expect(throws: KeyManagerConfigurationError.self) { try KeySource.forProvider("o", kind: .oidc, jwksURL: "ftp://x") }
        }

        @Test func unknownProviderAndBadInlineKeysAreRefusedAtInit() throws {
            let verifier = try TestIssuer.verifier()
            #expect(throws: KeyManagerConfigurationError.unknownProvider("nope")) {
                try KeyManager(verifier: verifier, providers: [ManagedKeyProvider(name: "nope", source: .url("http://127.0.0.1:1/", format: .jwks))],
                               fetchLoop: testLoop)
            }
            #expect(throws: KeyManagerConfigurationError.self) {
                try KeyManager(verifier: verifier, providers: [ManagedKeyProvider(name: TestIssuer.provider,
                                                                                  source: .document(Array("{}".utf8), format: .jwks))],
                               fetchLoop: testLoop)
            }
        }
    }
}
