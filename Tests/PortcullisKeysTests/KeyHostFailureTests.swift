import Foundation
import Testing
import PortcullisAuth
@testable import PortcullisKeys

extension PortcullisKeysTests {
    @Suite struct KeyHostFailureTests {
        @Test func failingHostKeepsTheOldKeysAndReportsTheError() async throws {
            let server = try KeyServer(keys: ["rsa-a": "RS256"])
            defer { server.stop() }
            let verifier = try TestIssuer.verifier()
            let events = EventLog()
            let manager = try KeyManager.make(server: server, verifier: verifier, configuration: quickConfiguration(), events: events)
            defer { manager.shutdown() }
            await manager.started()
            let token = try server.token(kid: "rsa-a")

            try server.setState(["status": 500])
            guard case .failed(.httpStatus(500, _)) = await manager.refreshed() else {
                Issue.record("expected a 500 failure")
                return
            }
            #expect(verifier.check(token).identity != nil)
            let status = manager.providerStatus
            #expect(status.kids == ["rsa-a"] && status.health == .fresh)
            // The first retry comes 0.2 s later, so a slow machine may already see it here.
            #expect(status.consecutiveFailures >= 1)
            #expect(status.lastError?.contains("500") == true)
            #expect(events.all.contains { if case .fetchFailed(_, .httpStatus(500, _), 1, _) = $0 { true } else { false } })

            // Retries back off (0.2 s, 0.4 s, 0.5 s cap) and recover when the host does.
            #expect(await eventually(within: 5) { manager.providerStatus.consecutiveFailures >= 3 })
            try server.setState([:])
            #expect(await eventually(within: 5) { manager.providerStatus.consecutiveFailures == 0 })
            #expect(manager.providerStatus.lastError == nil)
        }

        @Test func hangingHostDoesNotBlockTheLoopAndOldKeysKeepWorking() async throws {
            let server = try KeyServer(keys: ["rsa-a": "RS256"])
            defer { server.stop() }
            let verifier = try TestIssuer.verifier()
            let manager = try KeyManager.make(server: server, verifier: verifier, configuration: quickConfiguration(totalTimeout: 0.6))
            defer { manager.shutdown() }
            await manager.started()
            let token = try server.token(kid: "rsa-a")

            try server.setState(["hang_seconds": 8])
            let ticks = LoopTicks(on: testLoop)
            let started = Date()
            async let outcome = manager.refreshedAt()
            // While the fetch hangs, every request verifies with the old keys (a count of
            // attempts, not of what fits in a time window: a loaded machine runs fewer).
            var verifiedWhileHanging = 0
            for _ in 0..<10 {
                if verifier.check(token).identity != nil { verifiedWhileHanging += 1 }
                try await Task.sleep(nanoseconds: 20_000_000)
            }
            let (result, answered) = await outcome
            let elapsed = answered.timeIntervalSince(started)
            let count = ticks.stop()
            guard case .failed(.transport(.timedOut)) = result else {
                Issue.record("expected a timeout, got \(result)")
                return
            }
            // Ended by the 0.6 s timeout, long before the host would have answered (not a
            // bound on how late a loaded machine runs the timer).
            #expect(elapsed < 8)
            #expect(verifiedWhileHanging == 10)
            #expect(count >= Int(elapsed * 100 / 4), "the loop timer fired only \(count) times in \(elapsed) s")
            #expect(verifier.check(token).identity != nil)
        }

        @Test func staleKeysAreServedForStaleForThenDroppedAndRecover() async throws {
            let server = try KeyServer(keys: ["rsa-a": "RS256"])
            defer { server.stop() }
            try server.setState(["cache_control": "max-age=1"])
            let verifier = try TestIssuer.verifier()
            let events = EventLog()
            var configuration = quickConfiguration(minimumTTL: 1, staleFor: 1.5)
            configuration.refreshJitterFraction = 0
            let manager = try KeyManager.make(server: server, verifier: verifier, configuration: configuration, events: events)
            defer { manager.shutdown() }
            await manager.started()
            let token = try server.token(kid: "rsa-a")
            try server.setState(["status": 500])

            #expect(await eventually(within: 3) { manager.providerStatus.health == .stale })
            #expect(verifier.check(token).identity != nil)  // served stale
            #expect(events.all.contains { if case .servingStale = $0 { true } else { false } })

            #expect(await eventually(within: 4) { manager.providerStatus.health == .unavailable })
            #expect(verifier.check(token).failure?.reason == .keysUnavailable)
            #expect(manager.providerStatus.kids.isEmpty)
            #expect(events.all.contains(.keysDropped(provider: TestIssuer.provider)))
            #expect(manager.counters().keyDrops == 1)

            try server.setState(["cache_control": "max-age=60"])
            #expect(await eventually(within: 4) { manager.providerStatus.health == .fresh })
            #expect(verifier.check(token).identity != nil)
            #expect(events.all.contains(.recovered(provider: TestIssuer.provider)))
        }

        @Test func bodyCapAppliesToKeyDocuments() async throws {
            let server = try KeyServer(keys: ["rsa-a": "RS256"])
            defer { server.stop() }
            try server.setState(["pad_bytes": 50_000, "framing": "chunked"])
            let manager = try KeyManager.make(server: server, verifier: try TestIssuer.verifier(),
                                              configuration: quickConfiguration(maxBody: 16 * 1024))
            defer { manager.shutdown() }
            await manager.started()
            let status = manager.providerStatus
            #expect(status.health == .pending && status.kids.isEmpty)
            #expect(status.lastError?.contains("larger than 16384 bytes") == true)
        }
    }
}
