import Foundation
import PortcullisTestSupport
import Testing

/// The sessions' journal (`store.state_dir/sessions.jsonl`) is the revocations' journal
/// (`LineJournal`), review finding #33.4: a failed write is cut off and not acknowledged (a
/// logout whose "ended" line fails answers 503 and the session stays, as on disk; a sign-in
/// that cannot be written answers 503), nothing acknowledged before or after is lost across a
/// restart, and a line an older version glued onto a torn one is read back.
@Suite(.serialized) struct SessionJournalEndToEndTests {
    static func config(_ upstream: EchoUpstream, stateDir: String) -> String {
        """
        \(AuthFixtures.providers)
        sessions:
          issuer: "https://api.example.test"
          accept: [google]
          refresh_token: {secret: "\(SessionsEndToEndTests.secret)"}
          require_tls: false
        store: {state_dir: "\(stateDir)"}
        upstreams:
          app: {url: "http://127.0.0.1:\(upstream.port)"}
        routes:
          - {path: /api, upstream: app, auth: required}
        """
    }

    static func logout(_ g: GatewayProcess, _ access: String) -> (status: Int, body: String) {
        E2E.curl(["-X", "POST", "-H", "Authorization: Bearer \(access)", "\(g.url)/auth/logout"])
    }

    static func signIn(_ g: GatewayProcess, sub: String) throws -> (status: Int, pair: SessionsEndToEndTests.Pair?) {
        let (status, body) = try SessionsEndToEndTests.exchange(g, sub: sub)
        return (status, SessionsEndToEndTests.pair(body))
    }

    @Test func aFailedEndedWriteIsNotAcknowledgedAndLosesNothing() throws {
        let stateDir = FileManager.default.temporaryDirectory.appendingPathComponent("sessions-fsize-\(UUID().uuidString)").path
        let file = stateDir + "/sessions.jsonl"
        let upstream = try EchoUpstream()
        let config = Self.config(upstream, stateDir: stateDir)

        // One session line's size, measured on this build's format (same user, device, digits).
        var probe: GatewayProcess? = try GatewayProcess(config)
        let probed = try #require(probe)
        _ = try Self.signIn(probed, sub: "100")
        let line = JournalEndToEndTests.size(file)
        probe?.stop()
        probe = nil
        try FileManager.default.removeItem(atPath: stateDir)
        let ended = "{\"ended\":\"\(String(repeating: "0", count: 32))\"}\n".utf8.count

        // Room for two sessions and one "ended" line, not a second one: the second logout's
        // line crosses the file-size limit part-way (EFBIG; SIGXFSZ is ignored).
        var limited: GatewayProcess? = try GatewayProcess(config, launcher: ["/usr/bin/prlimit", "--fsize=\(2 * line + ended + ended / 2)"])
        let g1 = try #require(limited)
        let a = try #require(try Self.signIn(g1, sub: "101").pair)
        let b = try #require(try Self.signIn(g1, sub: "102").pair)
        // (A line's length varies by a byte or two with the ID token's id; the limit leaves room for that.)
        #expect(abs(JournalEndToEndTests.size(file) - 2 * line) <= 8, "\(JournalEndToEndTests.size(file)) against \(2 * line)")
        #expect(Self.logout(g1, a.access).status == 204)
        let acknowledged = JournalEndToEndTests.size(file)
        let failed = Self.logout(g1, b.access)
        #expect(failed.status == 503 && failed.body.contains("temporarily_unavailable"), "not acknowledged: \(failed)")
        #expect(JournalEndToEndTests.size(file) == acknowledged, "the partial line was cut off")
        #expect(SessionsEndToEndTests.api(g1, b.access).status == 200, "the session stays, as on disk")
        let refused = try Self.signIn(g1, sub: "103")
        #expect(refused.status == 503 && refused.pair == nil, "a sign-in that cannot be written is not acknowledged")
        #expect(JournalEndToEndTests.size(file) == acknowledged)
        #expect(g1.process.isRunning)
        // (The gateway's own log file is under the same file-size limit, so it is not read here.)
        #expect(try JournalEndToEndTests.lines(file).count == 3)
        g1.stop()
        limited = nil

        // Without the limit: A stays logged out, B is alive and its logout now succeeds, a new
        // sign-in is kept, and a second restart still has all of it.
        var second: GatewayProcess? = try GatewayProcess(config)
        let g2 = try #require(second)
        #expect(SessionsEndToEndTests.refresh(g2, a.refresh).status == 400, "the acknowledged logout held")
        let bNext = try #require(SessionsEndToEndTests.pair(SessionsEndToEndTests.refresh(g2, b.refresh).body), "B was never ended")
        let d = try #require(try Self.signIn(g2, sub: "104").pair)
        #expect(Self.logout(g2, bNext.access).status == 204)
        g2.stop()
        second = nil
        let g3 = try GatewayProcess(config)
        #expect(SessionsEndToEndTests.refresh(g3, bNext.refresh).status == 400)
        #expect(SessionsEndToEndTests.refresh(g3, d.refresh).status == 200, "the session after the failure survived")
        #expect(try JournalEndToEndTests.lines(file).allSatisfy { $0.hasPrefix("{\"id\":") || $0.hasPrefix("{\"ended\":") })
    }

    /// An older version appended after the remains of a failed write: the acknowledged line
    /// at the end of the glued one is read back (with a warning), not refused.
    @Test func aLineGluedOntoTornRemainsIsReadBack() throws {
        let stateDir = FileManager.default.temporaryDirectory.appendingPathComponent("sessions-glued-\(UUID().uuidString)").path
        let file = stateDir + "/sessions.jsonl"
        let upstream = try EchoUpstream()
        let config = Self.config(upstream, stateDir: stateDir)
        var first: GatewayProcess? = try GatewayProcess(config)
        let started = try #require(first)
        let pair = try #require(try Self.signIn(started, sub: "201").pair)
        first?.stop()
        first = nil
        let text = try String(contentsOfFile: file, encoding: .utf8)
        try ("{\"id\":\"0123456789abcdef0123456789abcdef\",\"user\":\"goo" + text).write(toFile: file, atomically: true, encoding: .utf8)
        let g = try GatewayProcess(config)
        #expect(g.waitForLog("the remains of a failed write"), "\(g.log)")
        #expect(SessionsEndToEndTests.refresh(g, pair.refresh).status == 200)
    }
}
