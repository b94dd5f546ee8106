import Foundation
import Testing
import PortcullisAuth
import PortcullisIO
@testable import PortcullisKeys

extension PortcullisKeysTests {
    @Suite struct UnknownKeyRefetchTests {
        @Test func burstAcrossTwoInstancesFetchesExactlyOnce() async throws {
            let server = try KeyServer(keys: ["rsa-a": "RS256", "rsa-b": "RS256"])
            defer { server.stop() }
            try server.setState(["publish": ["rsa-a"]])
            let cache = InProcessKeyCache()
            let verifierA = try TestIssuer.verifier(), verifierB = try TestIssuer.verifier()
            let a = try KeyManager.make(server: server, verifier: verifierA, cache: cache)
            let b = try KeyManager.make(server: server, verifier: verifierB, cache: cache)
            defer { a.shutdown(); b.shutdown() }
            await a.started()
            await b.started()
            #expect(try await server.count(reset: true) == 1)
            let fetchesBefore = a.counters().fetches + b.counters().fetches

            try server.setState(["publish": ["rsa-a", "rsa-b"]])
            let rotated = try server.token(kid: "rsa-b")
            #expect(verifierA.check(rotated).failure?.reason == .unknownKey)
            #expect(verifierB.check(rotated).failure?.reason == .unknownKey)

            // 50 parked requests, half on each instance, each resuming on its own loop.
            let loops = [EventLoop(index: 91), EventLoop(index: 92)]
            let loopKey = DispatchSpecificKey<Int>()
            for loop in loops { loop.queue.setSpecific(key: loopKey, value: loop.index) }
            let outcomes = await withTaskGroup(of: (RefetchOutcome, Bool).self) { group in
                for i in 0..<50 {
                    let manager = i % 2 == 0 ? a : b
                    let loop = loops[i % 2]
                    group.addTask {
                        await withCheckedContinuation { continuation in
                            manager.refetchForUnknownKey(provider: TestIssuer.provider, on: loop) { outcome in
                                // Resumed on the caller's loop, as a parked request would be.
                                continuation.resume(returning: (outcome, DispatchQueue.getSpecific(key: loopKey) == loop.index))
                            }
                        }
                    }
                }
                return await group.reduce(into: []) { $0.append($1) }
            }
            #expect(outcomes.count == 50)
            #expect(outcomes.allSatisfy { $0.1 }, "a completion ran off its caller's loop")
            #expect(outcomes.allSatisfy { $0.0 == .changed }, "\(outcomes.map(\.0))")
            #expect(try await server.count() == 1)
            #expect(verifierA.check(rotated).identity != nil)
            #expect(verifierB.check(rotated).identity != nil)
            let counters = [a.counters(), b.counters()]
            #expect(counters[0].fetches + counters[1].fetches - fetchesBefore == 1)
            #expect(counters[0].refetchesFollowed + counters[1].refetchesFollowed == 1)
            #expect(counters[0].refetchesCoalesced + counters[1].refetchesCoalesced == 48)
        }

        @Test func minimumRefetchIntervalIsRespected() async throws {
            let server = try KeyServer(keys: ["rsa-a": "RS256"])
            defer { server.stop() }
            let cache = InProcessKeyCache()
            let configuration = quickConfiguration(minimumRefetchInterval: 1)
            let a = try KeyManager.make(server: server, verifier: try TestIssuer.verifier(), cache: cache, configuration: configuration)
            let b = try KeyManager.make(server: server, verifier: try TestIssuer.verifier(), cache: cache, configuration: configuration)
            defer { a.shutdown(); b.shutdown() }
            await a.started()
            await b.started()
            _ = try await server.count(reset: true)

            #expect(await a.refetched() == .unchanged)  // fetched: the same document
            #expect(try await server.count() == 1)
            #expect(await a.refetched() == .throttled)  // this instance, within the interval
            // The other instance, within the interval: the claim is taken, so it
            // reloads the shared cache (where A's document is) and does not fetch.
            #expect(await b.refetched() == .unchanged)
            #expect(await b.refetched() == .throttled)
            #expect(try await server.count() == 1)

            try await Task.sleep(nanoseconds: 1_100_000_000)
            #expect(await a.refetched() == .unchanged)
            #expect(try await server.count() == 2)
            #expect(a.counters().refetchesThrottled == 1)
        }

        @Test func refetchForInlineOrUnknownProvider() async throws {
            let manager = try KeyManager(verifier: try TestIssuer.verifier(), providers: [], fetchLoop: testLoop)
            #expect(await manager.refetched() == .failed(.unknownProvider(TestIssuer.provider)))
        }
    }
}

