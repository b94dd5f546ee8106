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

    /// A masked client frame (RFC 6455 §5.3) with `payloadCount` bytes of `fill`.
    static func clientFrame(_ opcode: UInt8, _ payload: [UInt8]) -> [UInt8] {
        let key: [UInt8] = [0x0A, 0x0B, 0x0C, 0x0D]
        return [0x80 | opcode, 0x80 | UInt8(payload.count)] + key
            + payload.enumerated().map { $0.element ^ key[$0.offset & 3] }
    }

    /// The frames in `bytes` as (opcode, unmasked payload); nil when they do not parse.
    static func frames(_ bytes: [UInt8]) -> [(UInt8, [UInt8])]? {
        var out: [(UInt8, [UInt8])] = []
        var i = 0
        while i < bytes.count {
            guard i + 2 <= bytes.count, bytes[i + 1] & 0x7F < 126 else { return nil }
            let opcode = bytes[i] & 0x0F, masked = bytes[i + 1] & 0x80 != 0, count = Int(bytes[i + 1] & 0x7F)
            i += 2
            let key = masked ? Array(bytes[i..<(i + 4)]) : [0, 0, 0, 0]
            if masked { i += 4 }
            guard i + count <= bytes.count else { return nil }
            out.append((opcode, bytes[i..<(i + count)].enumerated().map { $0.element ^ key[$0.offset & 3] }))
            i += count
        }
        return out
    }

    static let goingAway: [UInt8] = [0x88, 12, 0x03, 0xE9] + Array("going away".utf8)

    /// SIGTERM with WebSockets open: when the drain delay ends, each gets a Close with 1001
    /// toward the client and toward the app, between two frames (a frame under way finishes
    /// first), nothing after it; the client's Close in answer ends the tunnel and the
    /// process exits without waiting out the grace.
    @Test func webSocketsAreClosedWith1001WhenTheDrainDelayEnds() throws {
        let upstream = try EchoUpstream()
        let g = try GatewayProcess(upstream.openRoute + "\nshutdown: {drain_delay: 1s, grace: 30s}")
        func upgrade(_ c: RawConnection) {
            c.send("GET /ws/upgrade HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
            #expect(c.readMessage(bodyless: true)?.status == 101)
        }
        let idle = try RawConnection(port: g.port, timeout: 10)
        upgrade(idle)
        let hello = Self.clientFrame(0x1, Array("hello".utf8))
        idle.send(bytes: hello)
        #expect(idle.read(count: hello.count) == hello)  // the echo: a whole frame back
        let midFrame = try RawConnection(port: g.port, timeout: 10)
        upgrade(midFrame)
        let long = Self.clientFrame(0x2, Array("0123456789".utf8))
        midFrame.send(bytes: Array(long[..<11]))  // head, key and 5 of 10 bytes
        #expect(midFrame.read(count: 11) == Array(long[..<11]))

        let signalled = Date()
        g.send(SIGTERM)
        // The idle one: the Close arrives when the delay ends, not before.
        #expect(idle.read(count: Self.goingAway.count) == Self.goingAway)
        let after = Date().timeIntervalSince(signalled)
        #expect(after >= 0.9 && after < 5, "Close after \(after) s")
        // The one mid-frame: nothing while its frame is unfinished...
        #expect(midFrame.staysQuiet(for: 0.5))
        midFrame.send(bytes: Array(long[11...]))
        // ...then the rest of the frame, then the Close.
        #expect(midFrame.read(count: 5 + Self.goingAway.count) == Array(long[11...]) + Self.goingAway)
        // Nothing more once the Close was sent, though the client still sends data frames.
        midFrame.send(bytes: Self.clientFrame(0x1, Array("late".utf8)))
        #expect(midFrame.staysQuiet(for: 0.3))
        // The clients answer; the tunnels end and the gateway exits well inside the grace.
        for c in [idle, midFrame] {
            c.send(bytes: Self.clientFrame(0x8, [0x03, 0xE9]))
            #expect(c.peerClosed())
        }
        E2E.waitForExit(g.process, timeout: 10)
        #expect(!g.process.isRunning && g.process.terminationStatus == 0)
        #expect(Date().timeIntervalSince(signalled) < 10)

        // The app got the client's frames, then the gateway's masked Close with 1001, last.
        let tunnels = try upstream.seen().filter { $0.hasPrefix("/__tunnel/") }
        #expect(tunnels.count == 2, "\(tunnels)")
        for tunnel in tunnels {
            let hex = Array(tunnel.dropFirst("/__tunnel/".count).utf8)
            let bytes = stride(from: 0, to: hex.count, by: 2).map { UInt8(String(decoding: hex[$0..<($0 + 2)], as: UTF8.self), radix: 16)! }
            let frames = Self.frames(bytes)
            #expect(frames != nil, "the app got whole frames: \(tunnel)")
            guard let frames, let last = frames.last else { continue }
            #expect(last.0 == 0x8 && Array(last.1) == [0x03, 0xE9] + Array("going away".utf8), "\(frames)")
            #expect(frames.dropLast().allSatisfy { $0.0 != 0x8 }, "only the gateway's Close reached the app")
            #expect(frames.count == 2, "the client's frame, then the Close: \(frames)")
        }
    }

    /// SIGTERM under load (wrk on HTTP/1.1, h2load on h2c): `/readyz` answers 503 within
    /// 100 ms, asked on a keep-alive connection; no request is refused or fails during the
    /// drain delay; requests in flight when the delay ends all complete; the process exits 0
    /// once they did, well inside the grace.
    @Test func sigtermUnderLoadRefusesNothingAndFinishesWhatIsInFlight() throws {
        let upstream = try EchoUpstream()
        let g = try GatewayProcess(upstream.openRoute + "\nshutdown: {drain_delay: 4s, grace: 20s}",
                                   listen: "  - {address: \"127.0.0.1:PORT\", h2c: true}")
        let dir = NSTemporaryDirectory() + "portcullis-sigterm-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        let loads: [(String, [String])] = [
            ("wrk", ["/usr/bin/wrk", "-t1", "-c8", "-d3s", "--timeout", "5s", "\(g.url)/load"]),
            ("h2load", ["/usr/bin/h2load", "-c4", "-m8", "-D", "3", "\(g.url)/load"]),
        ]
        let pids = try loads.map { name, argv in try RedisProcess.spawn(argv, stdout: "\(dir)/\(name).out") }
        defer { for pid in pids { kill(pid, SIGKILL); var s: Int32 = 0; waitpid(pid, &s, 0) } }
        let probe = try RawConnection(port: g.adminPort, timeout: 5)
        func readiness() -> Int {
            probe.send("GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n")
            return probe.readResponses(1).first?.status ?? 0
        }
        #expect(readiness() == 200)
        sleep(1)  // the load runs
        let signalled = Date()
        g.send(SIGTERM)
        var status = readiness()
        while status == 200 && Date().timeIntervalSince(signalled) < 2 { status = readiness() }
        let turned = Date().timeIntervalSince(signalled)
        #expect(status == 503 && turned < 0.1, "readiness \(status) after \(Int(turned * 1000)) ms")
        // The load tools end 2 s into the 4 s delay: everything they sent was answered 2xx.
        for pid in pids { _ = waitUntil(15) { var s: Int32 = 0; return waitpid(pid, &s, WNOHANG) == pid } }
        for (name, _) in loads {
            let output = (try? String(contentsOfFile: "\(dir)/\(name).out", encoding: .utf8)) ?? ""
            if name == "wrk" {
                #expect(output.contains("requests in") && !output.contains("Non-2xx") && !output.contains("Socket errors"),
                        "\(output)")
            } else {
                #expect(output.contains(" 0 failed, 0 errored, 0 timeout"), "\(output)")
                #expect(output.range(of: #"status codes: [1-9]\d* 2xx, 0 3xx, 0 4xx, 0 5xx"#, options: .regularExpression) != nil,
                        "\(output)")
            }
        }
        // Requests sent just before the delay ends, answered after it: every one completes.
        while Date().timeIntervalSince(signalled) < 3.6 { usleep(20_000) }
        let inFlight = try (0..<8).map { _ in try RawConnection(port: g.port, timeout: 10) }
        for c in inFlight { c.send("GET /slow/1500 HTTP/1.1\r\nHost: x\r\n\r\n") }
        for c in inFlight {
            let response = c.readResponses(1).first
            #expect(response?.status == 200, "\(String(describing: response))")
            #expect(response?.header("connection")?.lowercased() == "close", "keep-alive ends once the delay is over")
        }
        #expect(Date().timeIntervalSince(signalled) >= 4, "answered after the delay ended")
        E2E.waitForExit(g.process, timeout: 10)
        #expect(!g.process.isRunning && g.process.terminationStatus == 0)
        #expect(Date().timeIntervalSince(signalled) < 10, "exited once the in-flight requests were done")
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

    /// `workers: 0` respects the CPU affinity: under `taskset -c 0` the gateway runs one loop,
    /// not one per CPU online (the cgroup quota: `CPUBudgetTests`).
    @Test func workersZeroRespectsTheCPUAffinity() throws {
        let upstream = try EchoUpstream()
        let g = try GatewayProcess(upstream.openRoute, workers: 0, launcher: ["/usr/bin/taskset", "-c", "0"])
        #expect(waitUntil(5) { g.log.contains("\"loops\":\"1\"") }, "\(g.log.suffix(600))")
        #expect(E2E.curl(["\(g.url)/x"]).status == 200)
    }

    /// `portcullis health`: readiness by default, liveness with `--live`; exit 0 only on 200.
    @Test func theHealthSubcommandProbesTheAdminListener() throws {
        let upstream = try EchoUpstream()
        let g = try GatewayProcess(upstream.openRoute + "\nshutdown: {drain_delay: 30s}")
        let ready = E2E.run(E2E.binary, ["health", "--config", g.configPath])
        #expect(ready.0 == 0 && ready.1.hasPrefix("/readyz 200"), "\(ready)")
        // It asks the running gateway, not the file: an edit not reloaded yet (an error in
        // another section, a secret the probe's environment lacks) does not fail the probe.
        let text = try String(contentsOfFile: g.configPath, encoding: .utf8)
        try (text + "\nproviders:\n  - {name: app, type: hs256, secret: {env: PORTCULLIS_SECRET_THE_PROBE_LACKS}}\nlog_level: loud\n")
            .write(toFile: g.configPath, atomically: true, encoding: .utf8)
        let edited = E2E.run(E2E.binary, ["health", "--config", g.configPath])
        #expect(edited.0 == 0 && edited.1.hasPrefix("/readyz 200"), "\(edited)")
        try text.write(toFile: g.configPath, atomically: true, encoding: .utf8)
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
