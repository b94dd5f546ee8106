import Foundation
import PortcullisTestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// A lifecycle orchestrators can trust (#26.2), through the real binary: readiness that
/// waits for keys at start (`keys.prefetch`), SIGTERM that turns readiness off at once and
/// keeps serving for `shutdown.drain_delay`, and `portcullis health` for images without curl.
@Suite(.serialized) struct LifecycleEndToEndTests {
    static func readyz(_ g: GatewayProcess) -> (status: Int, body: String) {
        E2E.curl(["http://127.0.0.1:\(g.adminPort)/readyz"])
    }

    static func keyedGateway(_ host: KeyHost, _ upstream: EchoUpstream, extra: String = "") throws -> GatewayProcess {
        try GatewayProcess("""
        providers:
          - {name: corp, type: oidc, issuer: "https://id.example.test", audiences: ["api"], jwks_url: "http://127.0.0.1:\(host.port)/jwks"}
        \(extra)
        upstreams:
          app: {url: "http://127.0.0.1:\(upstream.port)"}
        routes:
          - {path: /, upstream: app, auth: required}
        """)
    }

    static func hostState(_ host: KeyHost, _ json: String) throws {
        try json.write(toFile: "\(host.directory)/state.json", atomically: true, encoding: .utf8)
    }

    /// `keys.prefetch: required` (the default): not ready, with the provider named, until its
    /// keys were installed once; then ready, and a token it signs passes.
    @Test func readinessWaitsForEveryProvidersKeysAtStart() throws {
        let host = try KeyHost(kids: ["k1"])
        try Self.hostState(host, #"{"status": 500}"#)
        let upstream = try EchoUpstream()
        let g = try Self.keyedGateway(host, upstream)
        let early = Self.readyz(g)
        #expect(early.status == 503 && early.body.contains("keys not fetched yet: corp"), "\(early)")
        sleep(2)  // the first fetch and a retry failed
        #expect(Self.readyz(g).status == 503)
        try host.publish(["k1"])
        #expect(waitUntil(10) { Self.readyz(g).status == 200 }, "\(g.log.suffix(800))")
        let token = try KeysAndRevocationEndToEndTests.mint(g, key: host.keyPath("k1"), kid: "k1")
        #expect(E2E.curl(["-H", token, "\(g.url)/a"]).status == 200)
    }

    /// `keys.prefetch: best_effort`: not ready while the first fetch is under way; ready once
    /// it finished, even when it failed.
    @Test func bestEffortReadinessWaitsOnlyForTheFirstAttempt() throws {
        let host = try KeyHost(kids: ["k1"])
        try Self.hostState(host, #"{"status": 500, "hang_seconds": 2}"#)
        let upstream = try EchoUpstream()
        let g = try Self.keyedGateway(host, upstream, extra: "keys: {prefetch: best_effort}")
        let early = Self.readyz(g)
        #expect(early.status == 503 && early.body.contains("first key fetches in progress"), "\(early)")
        #expect(waitUntil(8) { Self.readyz(g).status == 200 }, "ready after the failed first attempt: \(g.log.suffix(800))")
        #expect(g.log.contains("500") || g.log.contains("fetch"), "the failure is logged")
    }

    /// SIGTERM: `/readyz` answers 503 at once; for `drain_delay` new connections and requests
    /// are still served; a request in flight when the delay ends finishes within the grace;
    /// then the process exits 0.
    @Test func sigtermTurnsReadinessOffAtOnceAndServesThroughTheDrainDelay() throws {
        let upstream = try EchoUpstream()
        let g = try GatewayProcess(upstream.openRoute + "\nshutdown: {drain_delay: 2s, grace: 5s}")
        #expect(Self.readyz(g).status == 200)
        let signalled = Date()
        g.send(SIGTERM)
        #expect(waitUntil(2) { Self.readyz(g).status == 503 })
        let turned = Date().timeIntervalSince(signalled)
        #expect(turned < 1, "readiness turned off after \(turned) s")
        #expect(Self.readyz(g).body.contains("draining"))
        // Inside the delay: every new request on a new connection is served.
        var served = 0
        while Date().timeIntervalSince(signalled) < 1.2 {
            if E2E.curl(["\(g.url)/during"]).status == 200 { served += 1 } else { Issue.record("refused during the delay") }
        }
        #expect(served > 3)
        // In flight across the end of the delay: finishes.
        let slow = E2E.curl(["\(g.url)/slow/2500"])
        #expect(slow.status == 200, "\(slow)")
        E2E.waitForExit(g.process, timeout: 10)
        #expect(!g.process.isRunning && g.process.terminationStatus == 0)
        let elapsed = Date().timeIntervalSince(signalled)
        #expect(elapsed >= 2, "the delay was kept: \(elapsed) s")
        #expect(g.log.contains("\"drain_delay_seconds\":\"2.0\"") && g.log.contains("draining") && g.log.contains("stopped"))
    }

    /// A second SIGTERM or SIGINT during the drain delay ends it.
    @Test(arguments: [SIGTERM, SIGINT])
    func aSecondSignalEndsTheDrainDelay(second: Int32) throws {
        let upstream = try EchoUpstream()
        let g = try GatewayProcess(upstream.openRoute + "\nshutdown: {drain_delay: 60s, grace: 5s}")
        g.send(SIGTERM)
        #expect(waitUntil(2) { Self.readyz(g).status == 503 })
        #expect(E2E.curl(["\(g.url)/still"]).status == 200)
        let at = Date()
        g.send(second)
        E2E.waitForExit(g.process, timeout: 10)
        #expect(!g.process.isRunning && g.process.terminationStatus == 0)
        #expect(Date().timeIntervalSince(at) < 5)
        #expect(g.log.contains("a second signal ends the drain delay"))
    }

    /// `portcullis health`: readiness by default, liveness with `--live`; exit 0 only on 200.
    @Test func theHealthSubcommandProbesTheAdminListener() throws {
        let upstream = try EchoUpstream()
        let g = try GatewayProcess(upstream.openRoute + "\nshutdown: {drain_delay: 30s}")
        let ready = E2E.run(E2E.binary, ["health", "--config", g.configPath])
        #expect(ready.0 == 0 && ready.1.hasPrefix("/readyz 200"), "\(ready)")
        let byAddress = E2E.run(E2E.binary, ["health", "--address", "127.0.0.1:\(g.adminPort)", "--live"])
        #expect(byAddress.0 == 0 && byAddress.1.hasPrefix("/healthz 200"), "\(byAddress)")
        g.send(SIGTERM)
        #expect(waitUntil(2) { Self.readyz(g).status == 503 })
        let draining = E2E.run(E2E.binary, ["health", "--config", g.configPath])
        #expect(draining.0 == 1 && draining.1.contains("503") && draining.1.contains("draining"), "\(draining)")
        #expect(E2E.run(E2E.binary, ["health", "--config", g.configPath, "--live"]).0 == 0, "alive while draining")
        let nobody = E2E.run(E2E.binary, ["health", "--address", "127.0.0.1:\(Loopback.freePort())"])
        #expect(nobody.0 == 1 && nobody.2.contains("no answer"), "\(nobody)")
        #expect(E2E.run(E2E.binary, ["health"]).0 != 0, "needs --config or --address")
    }

    @Test(arguments: [
        ("shutdown: {grace: 5s}\ntimeouts: {shutdown_grace: 5s}", "either shutdown.grace or timeouts.shutdown_grace"),
        ("shutdown: {drain_delay: soon}", "shutdown.drain_delay"),
        ("shutdown: {delay: 5s}", "shutdown.delay"),
        ("keys: {prefetch: always}", "keys.prefetch"),
    ])
    func lifecycleSettingsAreCheckedAtStart(_ yaml: String, _ expected: String) throws {
        let (status, _, err) = E2E.run(E2E.binary, ["check-config", try AppFitEndToEndTests.writeConfig("""
        upstreams:
          app: {url: "http://127.0.0.1:1"}
        routes:
          - {path: /, upstream: app, auth: none}
        \(yaml)
        """)])
        #expect(status != 0 && err.contains(expected), "\(err)")
    }
}
