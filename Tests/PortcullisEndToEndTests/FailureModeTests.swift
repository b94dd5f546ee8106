import Foundation
import Testing
import PortcullisTestSupport
#if canImport(Glibc)
import Glibc
#endif

/// Failing dependencies and operations: refused upstream, exhausted pool,
/// configuration errors, graceful shutdown.
@Suite(.serialized)
struct FailureModeTests {
    /// Its log readers go away: standard output and standard error are pipes whose reading
    /// ends closed (EPIPE on every write), or files past a file-size limit (EFBIG). Every
    /// log line and access-log line is dropped; the gateway keeps serving and exits cleanly.
    @Test(arguments: ["closed pipes", "file-size limit"])
    func aGatewayWhoseLogsCannotBeWrittenKeepsServing(_ how: String) throws {
        let upstream = try EchoUpstream()
        let adminToken = "admin-token-0123456789abcdef"
        let launcher = how == "closed pipes"
            // Both streams into a process substitution that exits at once; then the gateway.
            ? ["/bin/bash", "-c", "exec 1> >(exec true) 2>&1; sleep 0.2; exec \"$@\"", "bash"]
            : ["/usr/bin/prlimit", "--fsize=600"]
        let g = try GatewayProcess(upstream.openRoute, adminToken: adminToken, launcher: launcher)
        for i in 0..<30 {
            #expect(E2E.curl(["\(g.url)/x\(i)"]).status == 200)  // access-log lines
            // Admin requests log on standard error (a revocation each).
            #expect(E2E.curl(["-X", "POST", "-H", "Authorization: Bearer \(adminToken)", "-d", #"{"subject":"s\#(i)"}"#,
                              "http://127.0.0.1:\(g.adminPort)/revocations"]).status == 201)
        }
        #expect(g.process.isRunning, "\(how): \(g.log.suffix(500))")
        g.stop()
        #expect(g.process.terminationReason == .exit && g.process.terminationStatus == 0,
                "\(how): exit \(g.process.terminationStatus) \(g.process.terminationReason == .uncaughtSignal ? "by signal" : "")")
    }

    @Test func refusedUpstreamGets502AndIsLoggedOnce() throws {
        let deadPort = Loopback.freePort()
        let g = try GatewayProcess("""
        upstreams:
          dead: {url: "http://127.0.0.1:\(deadPort)"}
        routes:
          - {path: /, upstream: dead, auth: none}
        """, workers: 1)
        for _ in 0..<3 {
            let (status, body) = E2E.curl(["\(g.url)/x"])
            #expect(status == 502)
            #expect(body.contains("refused"))
        }
        // Logged once: the line has been written by the time a fourth request was answered on the
        // same (single) loop after it; then no second one.
        #expect(g.waitForLog("upstream unreachable"))
        #expect(E2E.curl(["\(g.url)/x"]).status == 502)
        #expect(g.waitForLog("\"path\":\"/x\"") && g.log.components(separatedBy: "upstream unreachable").count - 1 == 1, "\(g.log.suffix(1500))")
    }

    /// An upstream whose response heads are refused, arriving over several reads: each is a
    /// 502 and the gateway lives on (a refusal after a buffered partial head used to crash it).
    @Test func badResponseHeadsInPiecesAre502AndTheGatewayLivesOn() throws {
        let badPort = Loopback.freePort()
        let bad = Process()
        bad.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        bad.arguments = ["python3", E2E.packageRoot.appendingPathComponent("Tests/PortcullisEndToEndTests/Fixtures/bad_upstream.py").path,
                         "\(badPort)"]
        try bad.run()
        defer { E2E.stop(bad, signal: SIGKILL) }
        #expect(Loopback.waitForPort(badPort))
        let good = try EchoUpstream()
        let g = try GatewayProcess("""
        upstreams:
          bad: {url: "http://127.0.0.1:\(badPort)"}
          good: {url: "http://127.0.0.1:\(good.port)"}
        routes:
          - {path: /bad, upstream: bad, auth: none}
          - {path: /, upstream: good, auth: none}
        """, workers: 1)
        for _ in 0..<3 {
            #expect(E2E.curl(["\(g.url)/bad/x"]).status == 502)
            #expect(E2E.curl(["\(g.url)/alive"]).status == 200, "the gateway is still up")
        }
    }

    @Test func exhaustedPoolGets503() throws {
        let upstream = try EchoUpstream()
        let g = try GatewayProcess("""
        upstreams:
          app: {url: "http://127.0.0.1:\(upstream.port)", max_connections: 1, max_pending: 0}
        routes:
          - {path: /, upstream: app, auth: none}
        """, workers: 1)
        let slow = try RawConnection(port: g.port)
        slow.send("GET /slow/1500 HTTP/1.1\r\nHost: x\r\n\r\n")
        usleep(300_000)
        let (status, body) = E2E.curl(["\(g.url)/fast"])
        #expect(status == 503)
        #expect(body.contains("no free connection"))
        #expect(slow.readResponses(1).first?.status == 200)
    }

    /// Out of descriptors, a listener stops asking the poller (no spinning), logs once,
    /// and takes the connections that waited in the kernel's queue as soon as descriptors
    /// free up, without needing a new connection to arrive first.
    @Test func outOfDescriptorsBacksOffAndAcceptsQueuedConnectionsLater() throws {
        let upstream = try EchoUpstream()
        let g = try GatewayProcess(upstream.openRoute, workers: 1)
        let pid = g.process.processIdentifier
        #expect(E2E.curl(["\(g.url)/warm"]).status == 200)  // the pooled upstream connection exists
        usleep(100_000)
        let open = (try FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd")).count
        let (rc, _, err) = E2E.run("/usr/bin/prlimit", ["--pid", "\(pid)", "--nofile=\(open + 2):\(open + 2)"])
        try #require(rc == 0, "prlimit: \(err)")

        let first = try RawConnection(port: g.port)
        let second = try RawConnection(port: g.port)
        first.send("GET /a HTTP/1.1\r\nHost: x\r\n\r\n")
        second.send("GET /b HTTP/1.1\r\nHost: x\r\n\r\n")
        #expect(first.readResponses(1).first?.status == 200)
        #expect(second.readResponses(1).first?.status == 200)
        // No descriptor is left for a third: it waits in the kernel's accept queue.
        let queued = try RawConnection(port: g.port, timeout: 10)
        queued.send("GET /c HTTP/1.1\r\nHost: x\r\n\r\n")
        #expect(g.waitForLog("cannot accept connections", timeout: 5))
        // The listener does not spin while it cannot accept.
        let before = E2E.cpuTicks(pid)
        usleep(1_000_000)
        let spent = E2E.cpuTicks(pid) - before
        #expect(spent < 30, "the gateway used \(spent) of 100 CPU ticks in a second while out of descriptors")

        first.close()
        // Served without any new connection arriving.
        #expect(queued.readResponses(1).first?.status == 200)
        #expect(g.waitForLog("accepting connections again", timeout: 5))
        #expect(g.log.components(separatedBy: "cannot accept connections").count - 1 == 1, "\(g.log)")
        second.close()
    }

    @Test func gracefulShutdownFinishesInFlightRequests() throws {
        let upstream = try EchoUpstream()
        let g = try GatewayProcess("""
        \(upstream.openRoute)
        timeouts: {shutdown_grace: 5s}
        """)
        let c = try RawConnection(port: g.port)
        c.send("GET /slow/800 HTTP/1.1\r\nHost: x\r\n\r\n")
        usleep(200_000)
        kill(g.process.processIdentifier, SIGTERM)
        let r = c.readResponses(1)
        #expect(r.first?.status == 200)
        #expect(r.first?.header("Connection") == "close")
        E2E.waitForExit(g.process)
        #expect(g.process.terminationStatus == 0)
        #expect(!Loopback.waitForPort(g.port, timeout: 0.3))
    }

    @Test func checkConfigReportsFileLineKeyAndReason() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("pc-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        let bad = dir.appendingPathComponent("bad.yaml").path
        try """
        upstreams:
          app: {url: "http://127.0.0.1:3001"}
        routes:
          - {path: /, upstream: app, auth: requird}
        """.write(toFile: bad, atomically: true, encoding: .utf8)
        let (status, _, err) = E2E.run(E2E.binary, ["check-config", bad])
        #expect(status != 0)
        #expect(err.contains("\(bad):4: routes[0].auth: expected required, optional or none; got 'requird'"), "\(err)")

        let unknown = dir.appendingPathComponent("unknown.yaml").path
        try """
        upstreams:
          app: {url: "http://127.0.0.1:3001", max_conections: 3}
        routes:
          - {path: /, upstream: app}
        """.write(toFile: unknown, atomically: true, encoding: .utf8)
        let (s2, _, e2) = E2E.run(E2E.binary, ["check-config", unknown])
        #expect(s2 != 0)
        #expect(e2.contains("upstreams.app.max_conections: unknown key"), "\(e2)")

        let secret = dir.appendingPathComponent("secret.yaml").path
        try """
        admin: {address: "127.0.0.1:9901", token: "${PORTCULLIS_TEST_UNSET_VAR}"}
        upstreams:
          app: {url: "http://127.0.0.1:3001"}
        routes:
          - {path: /, upstream: app}
        """.write(toFile: secret, atomically: true, encoding: .utf8)
        let (s3, _, e3) = E2E.run(E2E.binary, ["check-config", secret])
        #expect(s3 != 0)
        #expect(e3.contains("admin.token: environment variable PORTCULLIS_TEST_UNSET_VAR is not set"), "\(e3)")

        let examples = E2E.packageRoot.appendingPathComponent("Config")
        for name in try FileManager.default.contentsOfDirectory(atPath: examples.path) where name.hasSuffix(".yaml") {
            let (s, out, e) = E2E.run("/usr/bin/env", ["PORTCULLIS_ADMIN_TOKEN=0123456789abcdef0123", "AUTH_SECRET=an-example-secret-of-at-least-32-bytes!!",
                                                       E2E.binary, "check-config", examples.appendingPathComponent(name).path])
            #expect(s == 0, "Config/\(name): \(out) \(e)")
        }
    }
}
