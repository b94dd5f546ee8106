import Foundation
import PortcullisTestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// `portcullis demo` (the README's first command runs it through deploy/demo.sh): it runs
/// with Config/demo.yaml, tells its story on standard output and keeps the gateway's log on
/// standard error; every step of the story gets the answer it announces.
@Suite(.serialized) struct DemoEndToEndTests {
    /// `portcullis demo-apps`: the demo's apps and key host alone (the Compose file's `apps`
    /// container); a gateway elsewhere reaches them; SIGTERM ends it with status 0.
    @Test func theDemoAppsRunAlone() throws {
        for port: UInt16 in [3001, 3002, 3003, 3004] {
            #expect(!Loopback.waitForPort(port, timeout: 0.2), "port \(port) is taken; demo-apps needs it")
        }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: E2E.binary)
        process.arguments = ["demo-apps", "--host", "127.0.0.1"]
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        defer { E2E.stop(process, signal: SIGKILL) }
        #expect(Loopback.waitForPort(3004))
        for (port, name) in [(3001, "visits"), (3002, "notes"), (3003, "books")] {
            let (status, body) = E2E.curl(["http://127.0.0.1:\(port)/hello"])
            #expect(status == 200 && body.contains(name), "\(port): \(status) \(body)")
        }
        let keys = E2E.curl(["http://127.0.0.1:3004/oauth2/v3/certs"])
        #expect(keys.status == 200 && keys.body.contains("\"kid\":\"demo-g1\""), "\(keys)")
        kill(process.processIdentifier, SIGTERM)
        E2E.waitForExit(process, timeout: 10)
        #expect(!process.isRunning && process.terminationStatus == 0)
    }

    @Test func theDemoTellsItsStoryAndEveryStepHoldsTrue() throws {
        // The demo listens on fixed ports (8080, 9901, 3001-3004): fail clearly when one is taken.
        for port: UInt16 in [8080, 9901, 3001, 3002, 3003, 3004] {
            #expect(!Loopback.waitForPort(port, timeout: 0.2), "port \(port) is taken; the demo needs it")
        }
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("demo-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        let out = dir.appendingPathComponent("story.txt").path
        let err = dir.appendingPathComponent("gateway.log").path
        FileManager.default.createFile(atPath: out, contents: nil)
        FileManager.default.createFile(atPath: err, contents: nil)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: E2E.binary)
        process.arguments = ["demo", "--config", E2E.packageRoot.appendingPathComponent("Config/demo.yaml").path]
        process.environment = ProcessInfo.processInfo.environment.merging(
            ["PORTCULLIS_DEMO_ACCESS_LOG": dir.appendingPathComponent("access.log").path]) { _, new in new }
        process.standardOutput = FileHandle(forWritingAtPath: out)!
        process.standardError = FileHandle(forWritingAtPath: err)!
        try process.run()
        defer { E2E.stop(process, signal: SIGTERM) }
        func story() -> String { (try? String(contentsOfFile: out, encoding: .utf8)) ?? "" }
        #expect(waitUntil(20) { story().contains("Ctrl-C stops") }, "\(story())")
        let text = story()
        // Each step: its title, then the status line.
        func answer(after title: String) -> String? {
            guard let range = text.range(of: title) else { return nil }
            return text[range.upperBound...].split(separator: "\n").first { $0.hasPrefix("  -> ") }.map(String.init)
        }
        #expect(text.contains("configuration: ") && text.contains("Config/demo.yaml"))
        #expect(answer(after: "No credential on a protected route")?.hasPrefix("  -> 401") == true)
        #expect(answer(after: "The iOS app's Bearer token")?.hasPrefix("  -> 200") == true)
        #expect(answer(after: "A Google ID token")?.hasPrefix("  -> 200") == true, "\(text)")
        #expect(answer(after: "exchanges its Google ID token in the body")?.hasPrefix("  -> 200") == true)
        #expect(answer(after: "no Google ID token")?.hasPrefix("  -> 401") == true)
        #expect(answer(after: "A refresh call carries its token in the body")?.hasPrefix("  -> 200") == true)
        // Sessions: exchange, the access token, refresh, a reuse ending the session, the devices.
        #expect(answer(after: "becomes the gateway's own session")?.hasPrefix("  -> 200") == true, "\(text)")
        #expect(answer(after: "is accepted like any provider's")?.hasPrefix("  -> 200") == true)
        #expect(answer(after: "the old refresh token is spent")?.hasPrefix("  -> 200") == true)
        #expect(answer(after: "a reuse, so the whole session ends")?.contains("400") == true)
        #expect(answer(after: "newest access token is refused at once")?.hasPrefix("  -> 401") == true)
        #expect(answer(after: "The device list")?.contains("Ada's iPad") == true && text.contains("\"current\":true"))
        #expect(answer(after: "refresh route refuses it in the body")?.contains("revoked") == true)
        #expect(answer(after: "the logged-out token is refused")?.hasPrefix("  -> 401") == true)
        #expect(answer(after: "is undone")?.contains("\"found\":true") == true)
        #expect(answer(after: "the token works again")?.hasPrefix("  -> 200") == true)
        // The story and the gateway's log stay apart.
        #expect(!text.contains("\"level\":"), "no log line in the story")
        let log = (try? String(contentsOfFile: err, encoding: .utf8)) ?? ""
        #expect(log.contains("portcullis started"))
    }

    @Test func theEmbeddedDemoConfigurationIsConfigDemoYaml() throws {
        let file = try String(contentsOf: E2E.packageRoot.appendingPathComponent("Config/demo.yaml"), encoding: .utf8)
        let source = try String(contentsOf: E2E.packageRoot.appendingPathComponent("Sources/Portcullis/DemoConfiguration.swift"),
                                encoding: .utf8)
        let body = file.split(separator: "\n", omittingEmptySubsequences: false).dropLast()
            .map { $0.isEmpty ? "" : "    " + $0 }.joined(separator: "\n")
        #expect(source.contains("public static let yaml = \"\"\"\n" + body + "\n    \"\"\""), "keep them equal")
    }
}
