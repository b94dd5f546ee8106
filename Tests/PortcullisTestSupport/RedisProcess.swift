import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Shared by the Redis, Store and end-to-end test targets.
///
/// Real `redis-server` / sentinel processes on free 127.0.0.1 ports, started with
/// posix_spawn (Foundation.Process has hung on Linux when many children come and
/// go). Nothing here listens on or contacts any other address.
public final class RedisProcess: @unchecked Sendable {
    // @unchecked Sendable: used from one test at a time (suites are serialized).
    public let port: UInt16
    public let directory: String
    private let arguments: [String]
    public private(set) var pid: pid_t = 0

    /// `redis-cli` flags for a TLS server (empty for a plain one).
    private var cliTLS: [String] = []

    /// A plain server: `redis-server --port N --save "" --appendonly no` plus `extra`.
    public init(extra: [String] = []) throws {
        port = Loopback.freePort()
        directory = RedisProcess.makeDirectory()
        arguments = ["/usr/bin/redis-server", "--port", "\(port)", "--bind", "127.0.0.1", "--save", "",
                     "--appendonly", "no", "--dir", directory, "--protected-mode", "no"] + extra
        try launch()
    }

    /// A TLS-only server (`--port 0 --tls-port N`) with this certificate; clients
    /// are not asked for certificates.
    public init(tlsCertificate: String, key: String, ca: String) throws {
        port = Loopback.freePort()
        directory = RedisProcess.makeDirectory()
        arguments = ["/usr/bin/redis-server", "--port", "0", "--tls-port", "\(port)", "--bind", "127.0.0.1",
                     "--tls-cert-file", tlsCertificate, "--tls-key-file", key, "--tls-ca-cert-file", ca,
                     "--tls-auth-clients", "no", "--save", "", "--appendonly", "no", "--dir", directory,
                     "--protected-mode", "no"]
        cliTLS = ["--tls", "--cacert", ca]
        try launch()
    }

    /// A sentinel watching `masterPort` as `name`, with a short down-after.
    public init(sentinelFor name: String, masterPort: UInt16, downAfterMilliseconds: Int = 1000) throws {
        port = Loopback.freePort()
        directory = RedisProcess.makeDirectory()
        let config = """
        port \(port)
        bind 127.0.0.1
        dir \(directory)
        sentinel monitor \(name) 127.0.0.1 \(masterPort) 1
        sentinel down-after-milliseconds \(name) \(downAfterMilliseconds)
        sentinel failover-timeout \(name) 4000
        sentinel parallel-syncs \(name) 1
        """
        let path = directory + "/sentinel.conf"
        try config.write(toFile: path, atomically: true, encoding: .utf8)
        arguments = ["/usr/bin/redis-server", path, "--sentinel"]
        try launch()
    }

    deinit { stop() }

    public func launch() throws {
        pid = try RedisProcess.spawn(arguments, stdout: directory + "/out.log")
        guard Loopback.waitForPort(port) else {
            throw RedisTestFailure("redis on \(port) did not start: \(log)")
        }
    }

    /// SIGKILL and reap.
    public func stop() {
        guard pid > 0 else { return }
        kill(pid, SIGKILL)
        var status: Int32 = 0
        waitpid(pid, &status, 0)
        pid = 0
    }

    /// Same port, same arguments.
    public func restart() throws {
        stop()
        try launch()
    }

    public var log: String { (try? String(contentsOfFile: directory + "/out.log", encoding: .utf8)) ?? "" }

    /// Runs `redis-cli -p <port> args…` and returns its stdout (trimmed).
    @discardableResult
    /// How many times this server ran `command` (lowercase, as `INFO commandstats` names it;
    /// failed calls included).
    public func calls(of command: String) -> Int {
        let line = cli(["INFO", "commandstats"]).split(whereSeparator: \.isNewline).first { $0.hasPrefix("cmdstat_\(command):") }
        return line?.split(separator: ",").first?.split(separator: "=").last.flatMap { Int($0) } ?? 0
    }

    public func cli(_ args: [String]) -> String {
        RedisProcess.capture(["/usr/bin/redis-cli", "-h", "127.0.0.1", "-p", "\(port)"] + cliTLS + args)
    }

    // MARK: Helpers

    public static func makeDirectory() -> String {
        var template = Array((NSTemporaryDirectory() + "/portcullis-redis-XXXXXX").utf8CString)
        return template.withUnsafeMutableBufferPointer { String(cString: mkdtemp($0.baseAddress!)) }
    }

    public static func spawn(_ argv: [String], stdout path: String?) throws -> pid_t {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        if let path {
            posix_spawn_file_actions_addopen(&actions, 1, path, O_WRONLY | O_CREAT | O_APPEND, 0o644)
            posix_spawn_file_actions_adddup2(&actions, 1, 2)
        }
        // Nothing else of the test process's: wrk sizes its event loop by its connection
        // count and fails a connection whose descriptor lands past it (a "connect" error)
        // when it inherited the test's sockets.
        for name in (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? [] {
            if let fd = Int32(name), fd > 2 { posix_spawn_file_actions_addclose(&actions, fd) }
        }
        var cArgs = argv.map { strdup($0) } + [nil]
        defer { for p in cArgs { free(p) } }
        var pid: pid_t = 0
        let rc = posix_spawn(&pid, argv[0], &actions, nil, &cArgs, environ)
        guard rc == 0 else { throw RedisTestFailure("posix_spawn \(argv[0]): \(rc)") }
        return pid
    }

    /// Runs a short command to completion (bounded: killed after `timeout`), returns stdout.
    public static func capture(_ argv: [String], timeout: Double = 10) -> String {
        let path = makeDirectory() + "/capture.out"
        guard let pid = try? spawn(argv, stdout: path) else { return "" }
        let end = Date().addingTimeInterval(timeout)
        var status: Int32 = 0
        while waitpid(pid, &status, WNOHANG) == 0 {
            if Date() > end { kill(pid, SIGKILL); waitpid(pid, &status, 0); break }
            usleep(5_000)
        }
        let out = (try? String(contentsOfFile: path, encoding: .utf8)) ?? ""
        return out.trimmingCharacters(in: .whitespacesAndNewlines)
    }
}

public struct RedisTestFailure: Error, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}

/// Polls `condition` every 10 ms until it holds or `timeout` seconds pass.
public func waitUntil(_ timeout: Double, _ condition: () -> Bool) -> Bool {
    let end = Date().addingTimeInterval(timeout)
    while Date() < end {
        if condition() { return true }
        usleep(10_000)
    }
    return condition()
}

/// A value written by callbacks on loop queues and read by the test thread.
public final class Locked<Value>: @unchecked Sendable {
    // @unchecked Sendable: every access holds `lock`.
    private let lock = NSLock()
    private var value: Value
    public init(_ value: Value) { self.value = value }
    public func get() -> Value { lock.lock(); defer { lock.unlock() }; return value }
    public func update(_ body: (inout Value) -> Void) { lock.lock(); body(&value); lock.unlock() }
}
