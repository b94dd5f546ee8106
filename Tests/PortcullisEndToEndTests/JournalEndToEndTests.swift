import Foundation
import PortcullisTestSupport
import Testing

/// The embedded store's journal (`store.state_dir`) when a write fails part-way (#25.5): the
/// failed line is cut off before anything else is acknowledged, what was acknowledged before
/// and after survives a restart, and the gateway keeps serving. Two real causes: a full
/// tmpfs (`ENOSPC` after part of the line) and a file-size limit (`EFBIG`, where `SIGXFSZ`
/// would end a process that does not ignore it).
@Suite(.serialized) struct JournalEndToEndTests {
    static let adminToken = "admin-token-0123456789abcdef"

    static func config(stateDir: String, upstream: EchoUpstream) -> String {
        """
        providers:
          - {name: app, type: hs256, secret: "\(AppFitEndToEndTests.secret)"}
        store: {state_dir: "\(stateDir)"}
        upstreams:
          app: {url: "http://127.0.0.1:\(upstream.port)"}
        routes:
          - {path: /, upstream: app, auth: required}
        """
    }

    static func revoke(_ gateway: GatewayProcess, jti: String) -> (status: Int, body: String) {
        let r = E2E.curl(["-X", "POST", "-H", "Authorization: Bearer \(adminToken)", "-d", #"{"jti":"\#(jti)"}"#,
                          "http://127.0.0.1:\(gateway.adminPort)/revocations"])
        return (r.status, r.body)
    }

    static func status(_ gateway: GatewayProcess, jti: String) throws -> Int {
        let token = try AppFitEndToEndTests.mint(#"{"sub": "u-\#(jti)", "jti": "\#(jti)", "exp": "+3600", "iat": "-10"}"#)
        return E2E.curl(["-H", "Authorization: Bearer \(token)", "\(gateway.url)/x"]).status
    }

    static func size(_ path: String) -> Int {
        ((try? FileManager.default.attributesOfItem(atPath: path))?[.size] as? NSNumber)?.intValue ?? -1
    }

    /// Every line of the file is a whole revocation line (what a start requires).
    static func lines(_ path: String) throws -> [String] {
        let text = try String(contentsOfFile: path, encoding: .utf8)
        #expect(text.isEmpty || text.hasSuffix("\n"), "no torn tail: \(text.suffix(80))")
        return text.split(separator: "\n").map(String.init)
    }

    @Test func aFullDiskCutsTheFailedLineOffAndLosesNothingAcknowledged() throws {
        let mountPoint = FileManager.default.temporaryDirectory.appendingPathComponent("journal-tmpfs-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: mountPoint, withIntermediateDirectories: true)
        let (mounted, _, mountError) = E2E.run("/bin/mount", ["-t", "tmpfs", "-o", "size=64k", "tmpfs", mountPoint])
        try #require(mounted == 0, "mounting a small tmpfs needs root (deploy/test.sh runs as root): \(mountError)")
        defer { _ = E2E.run("/bin/umount", ["-l", mountPoint]) }
        let stateDir = mountPoint + "/state"
        let file = stateDir + "/revocations.jsonl"
        let upstream = try EchoUpstream()
        let config = Self.config(stateDir: stateDir, upstream: upstream)

        var first: GatewayProcess? = try GatewayProcess(config, adminToken: Self.adminToken)
        let g1 = try #require(first)
        #expect(Self.revoke(g1, jti: "before-full").status == 201)
        // Lines up to 150 bytes short of the journal's first 4 KiB page (ids are at most 512 bytes).
        let overhead = Self.size(file) - "before-full".count
        var filled = 0
        while Self.size(file) < 4096 - 150 {
            filled += 1
            let prefix = "fill-\(filled)-"
            let room = 4096 - 150 - Self.size(file) - overhead - prefix.count
            try #require(Self.revoke(g1, jti: prefix + String(repeating: "f", count: max(1, min(490, room)))).status == 201)
        }
        let acknowledgedSize = Self.size(file)
        #expect(acknowledgedSize == 4096 - 150, "\(acknowledgedSize)")

        // Fill every free page: the journal's own page keeps 150 bytes of room, so a ~560-byte
        // line is written in part and then fails with ENOSPC.
        let filler = mountPoint + "/filler"
        let (dd, _, _) = E2E.run("/bin/dd", ["if=/dev/zero", "of=\(filler)", "bs=4096", "count=64"])
        #expect(dd != 0, "dd stops at a full disk")
        let refused = Self.revoke(g1, jti: String(repeating: "L", count: 512))
        #expect(refused.status == 503 && refused.body.contains("No space left on device"), "not acknowledged: \(refused)")
        #expect(Self.size(file) == acknowledgedSize, "the partial line was cut off")

        // While the disk is still full, a line that fits is acknowledged, whole, after the
        // last good one (before the fix it failed, and after space came back it was glued
        // onto the partial line: the next start refused the file).
        #expect(Self.revoke(g1, jti: "while-full").status == 201)
        try FileManager.default.removeItem(atPath: filler)
        #expect(Self.revoke(g1, jti: "after-full").status == 201)
        #expect(try Self.status(g1, jti: "other") == 200, "the gateway kept serving")
        // Logged once when writes start failing, once when they work again.
        #expect(g1.log.components(separatedBy: "revocations cannot be persisted").count == 2, "\(g1.log.suffix(2000))")
        #expect(g1.log.contains("No space left on device") && g1.log.contains("revocations are persisted again"))
        #expect(!g1.log.contains(String(repeating: "L", count: 64)), "the refused id is not logged")
        let written = try Self.lines(file)
        #expect(written.count == 3 + filled && written.allSatisfy { $0.hasPrefix("{\"kind\":\"token\"") && $0.hasSuffix("}") }, "\(written)")
        g1.stop()
        first = nil

        let g2 = try GatewayProcess(config, adminToken: Self.adminToken)
        #expect(g2.waitForLog("\"entries\":\"\(3 + filled)\""), "every acknowledged line is read back: \(g2.log)")
        for jti in ["before-full", "while-full", "after-full"] {
            #expect(try Self.status(g2, jti: jti) == 401, "\(jti) is still revoked after the restart")
        }
        #expect(try Self.status(g2, jti: "other") == 200)
    }

    @Test func aFileSizeLimitFailsTheWriteWithoutEndingTheProcess() throws {
        let stateDir = FileManager.default.temporaryDirectory.appendingPathComponent("journal-fsize-\(UUID().uuidString)").path
        let file = stateDir + "/revocations.jsonl"
        let upstream = try EchoUpstream()
        let config = Self.config(stateDir: stateDir, upstream: upstream)
        // 1 KiB: two lines fit (~600 bytes), a third of ~560 bytes crosses the limit part-way
        // (EFBIG, and SIGXFSZ).
        var first: GatewayProcess? = try GatewayProcess(config, adminToken: Self.adminToken,
                                                        launcher: ["/usr/bin/prlimit", "--fsize=1024"])
        let g1 = try #require(first)
        #expect(Self.revoke(g1, jti: "first").status == 201)
        #expect(Self.revoke(g1, jti: String(repeating: "A", count: 500)).status == 201)
        let acknowledgedSize = Self.size(file)
        let refused = Self.revoke(g1, jti: String(repeating: "F", count: 500))
        #expect(refused.status == 503 && refused.body.contains("File too large"), "not acknowledged: \(refused)")
        #expect(g1.process.isRunning, "SIGXFSZ did not end the process: \(g1.log.suffix(1000))")
        #expect(Self.size(file) == acknowledgedSize, "the partial line was cut off")
        #expect(Self.revoke(g1, jti: "second").status == 201)
        #expect(try Self.status(g1, jti: "first") == 401)
        #expect(try Self.status(g1, jti: "unrevoked") == 200)
        #expect(try Self.lines(file).count == 3)
        g1.stop()
        first = nil

        let g2 = try GatewayProcess(config, adminToken: Self.adminToken)
        #expect(g2.waitForLog("\"entries\":\"3\""), "\(g2.log)")
        #expect(try Self.status(g2, jti: "first") == 401 && (try Self.status(g2, jti: "second")) == 401)
    }
}
