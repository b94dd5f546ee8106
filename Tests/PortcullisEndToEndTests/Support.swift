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

    /// Runs a command to completion; returns (status, stdout, stderr).
    @discardableResult
    static func run(_ path: String, _ arguments: [String], timeout: Double = 60) -> (Int32, String, String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: path)
        process.arguments = arguments
        let dir = FileManager.default.temporaryDirectory
        let outURL = dir.appendingPathComponent("run-\(UUID().uuidString).out")
        let errURL = dir.appendingPathComponent("run-\(UUID().uuidString).err")
        FileManager.default.createFile(atPath: outURL.path, contents: nil)
        FileManager.default.createFile(atPath: errURL.path, contents: nil)
        defer { try? FileManager.default.removeItem(at: outURL); try? FileManager.default.removeItem(at: errURL) }
        process.standardOutput = try? FileHandle(forWritingTo: outURL)
        process.standardError = try? FileHandle(forWritingTo: errURL)
        do { try process.run() } catch { return (-1, "", "\(error)") }
        let deadline = Date().addingTimeInterval(timeout)
        while process.isRunning && Date() < deadline { usleep(20_000) }
        stop(process, signal: SIGKILL)
        let outData = (try? Data(contentsOf: outURL)) ?? Data()
        let errData = (try? Data(contentsOf: errURL)) ?? Data()
        return (process.terminationStatus, String(decoding: outData, as: UTF8.self), String(decoding: errData, as: UTF8.self))
    }

    /// Signals a child and polls until Foundation has seen it exit. (Foundation's
    /// `waitUntilExit` can hang on Linux when many children come and go.)
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
         listen: String? = nil) throws {
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
        process.executableURL = URL(fileURLWithPath: E2E.binary)
        process.arguments = ["run", "--config", configPath]
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

struct TestFailure: Error, CustomStringConvertible {
    let description: String
    init(_ d: String) { description = d }
}

/// A blocking loopback TCP client for exact bytes (smuggling cases, pipelining).
final class RawConnection {
    let fd: Int32

    init(port: UInt16, timeout: Double = 5) throws {
        guard let fd = Loopback.connect(port: port) else { throw TestFailure("connect to \(port) failed") }
        self.fd = fd
        var tv = timeval(tv_sec: Int(timeout), tv_usec: Int((timeout - Double(Int(timeout))) * 1e6))
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
    }

    func send(_ text: String) {
        var bytes = Array(text.utf8)
        var sent = 0
        while sent < bytes.count {
            let n = bytes.withUnsafeMutableBytes { Glibc.send(fd, $0.baseAddress! + sent, $0.count - sent, Int32(MSG_NOSIGNAL)) }
            if n <= 0 { return }
            sent += n
        }
    }

    /// Reads until the peer closes or the timeout passes.
    func readAll() -> String {
        var out = [UInt8]()
        var buf = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = recv(fd, &buf, buf.count, 0)
            if n <= 0 { break }
            out.append(contentsOf: buf[0..<n])
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// Reads until the received text contains `marker`, the peer closes or the timeout passes.
    func read(until marker: String) -> String {
        var out = [UInt8]()
        var buf = [UInt8](repeating: 0, count: 65536)
        while !String(decoding: out, as: UTF8.self).contains(marker) {
            let n = recv(fd, &buf, buf.count, 0)
            if n <= 0 { break }
            out.append(contentsOf: buf[0..<n])
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// Reads exactly `count` responses framed by Content-Length (no chunked support needed here).
    func readResponses(_ count: Int) -> [HTTPResponse] {
        var data = [UInt8]()
        var responses: [HTTPResponse] = []
        var buf = [UInt8](repeating: 0, count: 65536)
        while responses.count < count {
            if let (response, used) = HTTPResponse.parse(data) {
                responses.append(response)
                data.removeFirst(used)
                continue
            }
            let n = recv(fd, &buf, buf.count, 0)
            if n <= 0 { break }
            data.append(contentsOf: buf[0..<n])
        }
        return responses
    }

    /// True when the peer closed the connection (read returns 0) within the timeout.
    func peerClosed() -> Bool {
        var buf = [UInt8](repeating: 0, count: 1024)
        while true {
            let n = recv(fd, &buf, buf.count, 0)
            if n == 0 { return true }
            if n < 0 { return false }
        }
    }

    func close() { Glibc.close(fd) }
    deinit { Glibc.close(fd) }
}

struct HTTPResponse {
    var status: Int
    var headers: [(String, String)]
    var body: String

    func header(_ name: String) -> String? {
        headers.first { $0.0.lowercased() == name.lowercased() }?.1
    }

    static func parse(_ data: [UInt8]) -> (HTTPResponse, Int)? {
        guard let end = findHeadEnd(data) else { return nil }
        let head = String(decoding: data[0..<end], as: UTF8.self)
        var lines = head.components(separatedBy: "\r\n")
        let statusLine = lines.removeFirst().split(separator: " ")
        guard statusLine.count >= 2, let status = Int(statusLine[1]) else { return nil }
        var headers: [(String, String)] = []
        for line in lines where !line.isEmpty {
            let parts = line.split(separator: ":", maxSplits: 1)
            headers.append((String(parts[0]), parts.count > 1 ? parts[1].trimmingCharacters(in: .whitespaces) : ""))
        }
        let length = Int(headers.first { $0.0.lowercased() == "content-length" }?.1 ?? "0") ?? 0
        let total = end + 4 + length
        guard data.count >= total else { return nil }
        return (HTTPResponse(status: status, headers: headers, body: String(decoding: data[(end + 4)..<total], as: UTF8.self)), total)
    }

    static func findHeadEnd(_ data: [UInt8]) -> Int? {
        guard data.count >= 4 else { return nil }
        for i in 0...(data.count - 4) where data[i] == 13 && data[i + 1] == 10 && data[i + 2] == 13 && data[i + 3] == 10 {
            return i
        }
        return nil
    }
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
