import Foundation
import PortcullisTestSupport
#if canImport(Glibc)
import Glibc
#endif

/// Helpers that run real processes on 127.0.0.1: the gateway binary, Python upstream
/// apps, curl and wrk. Nothing here talks to any other address.
enum E2E {
    static let packageRoot: URL = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// The `portcullis` binary next to the test bundle (swift test builds it).
    static let binary: String = {
        var dir = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
        for _ in 0..<3 {
            let candidate = dir.appendingPathComponent("portcullis").path
            if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
            dir = dir.deletingLastPathComponent()
        }
        return packageRoot.appendingPathComponent(".build/debug/portcullis").path
    }()

    static let echoScript = packageRoot.appendingPathComponent("Tests/PortcullisEndToEndTests/Fixtures/echo_upstream.py").path

    /// Runs a command to completion; returns (status, stdout, stderr): the exit code, or the
    /// signal's number when a signal ended it (-1 when it could not start).
    ///
    /// Spawned with `posix_spawn` and reaped with `waitpid` here, not with Foundation's
    /// `Process`: its `run()` crashed the test process now and then on Linux (a bad pointer
    /// in a `memmove` inside `Process.run`, seen in CI) while its own monitor thread handled
    /// other children. Most of the suite's children come through here (curl above all).
    @discardableResult
    static func run(_ path: String, _ arguments: [String], timeout: Double = 60,
                    environment: [String: String] = [:]) -> (Int32, String, String) {
        let dir = FileManager.default.temporaryDirectory
        let outPath = dir.appendingPathComponent("run-\(UUID().uuidString).out").path
        let errPath = dir.appendingPathComponent("run-\(UUID().uuidString).err").path
        defer { unlink(outPath); unlink(errPath) }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, outPath, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        posix_spawn_file_actions_addopen(&actions, 2, errPath, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        // Nothing else of the test process's: a child that inherited its sockets ran out of
        // descriptors (wrk: connect errors), as Foundation's Process closes them too.
        // (closefrom is not visible to Swift here: every descriptor open now is listed. One
        // closed meanwhile is skipped by glibc: it ignores EBADF for a close action.)
        for name in (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? [] {
            if let fd = Int32(name), fd > 2 { posix_spawn_file_actions_addclose(&actions, fd) }
        }
        let argv: [UnsafeMutablePointer<CChar>?] = ([path] + arguments).map { strdup($0) } + [nil]
        let variables = ProcessInfo.processInfo.environment.merging(environment) { $1 }
        let envp: [UnsafeMutablePointer<CChar>?] = variables.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer { argv.forEach { free($0) }; envp.forEach { free($0) } }
        var pid: pid_t = 0
        let spawned = posix_spawn(&pid, path, &actions, nil, argv, envp)
        guard spawned == 0 else { return (-1, "", "posix_spawn \(path): \(String(cString: strerror(spawned)))") }
        var status: Int32 = 0
        let deadline = Date().addingTimeInterval(timeout)
        var reaped = false
        while !reaped {
            let r = waitpid(pid, &status, WNOHANG)
            if r == pid || (r < 0 && errno != EINTR) { reaped = true; break }
            if Date() >= deadline {
                kill(pid, SIGKILL)
                while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
                reaped = true
                break
            }
            usleep(2_000)
        }
        let signal = status & 0x7f
        let code: Int32 = signal == 0 ? (status >> 8) & 0xff : signal
        let out = (try? Data(contentsOf: URL(fileURLWithPath: outPath))) ?? Data()
        let err = (try? Data(contentsOf: URL(fileURLWithPath: errPath))) ?? Data()
        return (code, String(decoding: out, as: UTF8.self), String(decoding: err, as: UTF8.self))
    }

    /// `portcullis check-config` on `yaml`: "" when it passes, else its standard error.
    static func configErrors(_ yaml: String) -> String {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("check-\(UUID().uuidString).yaml").path
        try? yaml.write(toFile: path, atomically: true, encoding: .utf8)
        defer { unlink(path) }
        let (status, _, err) = run(binary, ["check-config", path])
        return status == 0 ? "" : err
    }

    /// Signals a child and polls until Foundation has seen it exit. (Foundation's
    /// `waitUntilExit` can hang on Linux when many children come and go.)
    /// User plus system CPU time of `pid` so far, in clock ticks (`/proc/PID/stat`).
    static func cpuTicks(_ pid: Int32) -> Int {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
              let close = stat.lastIndex(of: ")") else { return 0 }
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        // After the command: state is field 3; utime and stime are fields 14 and 15.
        guard fields.count > 13 else { return 0 }
        return (Int(fields[11]) ?? 0) + (Int(fields[12]) ?? 0)
    }

    static func stop(_ process: Process, signal: Int32, timeout: Double = 10) {
        if process.isRunning { kill(process.processIdentifier, signal) }
        waitForExit(process, timeout: timeout)
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            waitForExit(process, timeout: timeout)
        }
    }

    static func waitForExit(_ process: Process, timeout: Double = 10) {
        let end = Date().addingTimeInterval(timeout)
        while process.isRunning && Date() < end { usleep(10_000) }
    }

    static func curl(_ arguments: [String]) -> (status: Int, body: String) {
        let (_, out, _) = run("/usr/bin/curl", ["-s", "-o", "-", "-w", "\n%{http_code}", "--max-time", "10"] + arguments)
        let lines = out.split(separator: "\n", omittingEmptySubsequences: false)
        let status = Int(lines.last ?? "") ?? 0
        return (status, lines.dropLast().joined(separator: "\n"))
    }
}

/// A real Python upstream app (Fixtures/echo_upstream.py).
final class EchoUpstream {
    let port: UInt16
    let process = Process()

    /// Over TLS when `tls` names a certificate and key (and, with `clientCA`, it
    /// demands a client certificate issued by that CA).
    let tls: Bool

    init(name: String = "app", tls: (certificate: String, key: String)? = nil, clientCA: String? = nil) throws {
        port = Loopback.freePort()
        self.tls = tls != nil
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", E2E.echoScript, "\(port)", name]
            + (tls.map { [$0.certificate, $0.key] } ?? []) + (clientCA.map { [$0] } ?? [])
        process.standardOutput = FileHandle.nullDevice
        try process.run()
        guard Loopback.waitForPort(port) else { throw TestFailure("upstream did not start on \(port)") }
    }

    /// Configuration that sends every path to this upstream without auth (the body after
    /// `listen`/`admin` for tests about the proxy itself).
    var openRoute: String {
        """
        upstreams:
          app: {url: "\(tls ? "https" : "http")://127.0.0.1:\(port)"}
        routes:
          - {path: /, upstream: app, auth: none}
        """
    }

    /// Paths the upstream received since the last call.
    func seen() throws -> [String] {
        let (status, body) = E2E.curl(tls ? ["-k", "https://127.0.0.1:\(port)/__seen"] : ["http://127.0.0.1:\(port)/__seen"])
        guard status == 200 else { throw TestFailure("__seen answered \(status)") }
        return try JSONSerialization.jsonObject(with: Data(body.utf8)) as? [String] ?? []
    }

    deinit {
        E2E.stop(process, signal: SIGKILL)
    }
}

/// The real gateway binary with a generated configuration.
final class GatewayProcess {
    let port: UInt16
    let adminPort: UInt16
    let process = Process()
    let configPath: String
    let logPath: String

    /// `body` is the configuration after `listen`/`admin` (upstreams, routes, …).
    /// `listen` replaces the default plain listener (`- {address: "127.0.0.1:PORT"}`);
    /// it may use `PORT` for the gateway port chosen here.
    init(_ body: String, workers: Int = 2, adminToken: String? = nil, metricsPublic: Bool = false,
         listen: String? = nil, environment: [String: String] = [:], launcher: [String] = []) throws {
        port = Loopback.freePort()
        adminPort = Loopback.freePort()
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("portcullis-e2e-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        configPath = dir.appendingPathComponent("gateway.yaml").path
        logPath = dir.appendingPathComponent("gateway.log").path
        let yaml = """
        listen:
        \(listen?.replacingOccurrences(of: "PORT", with: "\(port)") ?? "  - {address: \"127.0.0.1:\(port)\"}")
        admin: {address: "127.0.0.1:\(adminPort)"\(adminToken.map { ", token: \"\($0)\"" } ?? "")\(metricsPublic ? ", metrics_public: true" : "")}
        workers: \(workers)
        access_log: stdout
        \(body)
        """
        try yaml.write(toFile: configPath, atomically: true, encoding: .utf8)
        FileManager.default.createFile(atPath: logPath, contents: nil)
        // `launcher`: a command the binary runs under (`prlimit --fsize=N`), first.
        process.executableURL = URL(fileURLWithPath: launcher.first ?? E2E.binary)
        process.arguments = launcher.dropFirst() + (launcher.isEmpty ? [] : [E2E.binary]) + ["run", "--config", configPath]
        if !environment.isEmpty {
            process.environment = ProcessInfo.processInfo.environment.merging(environment) { _, new in new }
        }
        let log = FileHandle(forWritingAtPath: logPath)!
        process.standardOutput = log
        process.standardError = log
        try process.run()
        guard Loopback.waitForPort(adminPort) else { throw TestFailure("gateway did not start: \(self.log)") }
    }

    var url: String { "http://127.0.0.1:\(port)" }

    /// `portcullis mint` against this gateway's configuration: its output,
    /// trimmed (one credential per line); throws with stderr when it fails.
    func mint(_ arguments: [String], format: String = "header") throws -> String {
        let (status, out, err) = E2E.run(E2E.binary, ["mint", "--config", configPath, "--format", format] + arguments)
        guard status == 0 else { throw TestFailure("mint \(arguments.joined(separator: " ")): \(err)") }
        return out.trimmingCharacters(in: .whitespacesAndNewlines)
    }
    var log: String { (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "" }

    func stop() { E2E.stop(process, signal: SIGTERM) }

    /// Sends `signal` (SIGHUP reloads certificates) to the running gateway.
    func send(_ signal: Int32) { kill(process.processIdentifier, signal) }

    /// Waits until the log contains `text` (bounded).
    func waitForLog(_ text: String, timeout: Double = 10) -> Bool {
        waitUntil(timeout) { self.log.contains(text) }
    }

    deinit { stop() }
}


/// Parses an echo upstream JSON body.
struct Echo {
    let method: String
    let path: String
    let headers: [(String, String)]
    let body: String

    init(_ text: String) throws {
        guard let object = try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any] else {
            throw TestFailure("not an echo body: \(text)")
        }
        method = object["method"] as? String ?? ""
        path = object["path"] as? String ?? ""
        body = object["body"] as? String ?? ""
        headers = (object["headers"] as? [[String]] ?? []).map { ($0[0], $0[1]) }
    }

    func values(_ name: String) -> [String] {
        headers.filter { $0.0.lowercased() == name.lowercased() }.map(\.1)
    }

    func has(_ name: String) -> Bool { !values(name).isEmpty }
}
