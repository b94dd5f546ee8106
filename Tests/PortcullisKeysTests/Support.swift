import Foundation
import Testing
import PortcullisAuth
import PortcullisCore
import PortcullisIO
@testable import PortcullisKeys
@testable import PortcullisOutbound

/// A real key host: Fixtures/key_server.py in its own process on 127.0.0.1.
/// It exits when this process closes its stdin (at `stop()` or on our exit).
final class KeyServer: @unchecked Sendable {
    // @unchecked Sendable: immutable after init except `process`, which only `stop()` touches.
    let directory: URL
    let port: Int
    private let process: Process
    private let stdin: Pipe

    let scheme: String

    init(keys: [String: String] = ["rsa-a": "RS256", "rsa-b": "RS256", "ec-a": "ES256"], tlsNames: String? = nil) throws {
        scheme = tlsNames == nil ? "http" : "https"
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("keyserver-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let script = Bundle.module.url(forResource: "Fixtures/key_server", withExtension: "py")
            ?? Bundle.module.resourceURL!.appendingPathComponent("Fixtures/key_server.py")
        process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        process.arguments = [script.path, "--dir", directory.path,
                             "--keys", keys.sorted { $0.key < $1.key }.map { "\($0.key):\($0.value)" }.joined(separator: ",")]
            + (tlsNames.map { ["--tls", "--tls-san", $0] } ?? [])
        stdin = Pipe()
        process.standardInput = stdin
        try process.run()
        let portFile = directory.appendingPathComponent("port")
        let deadline = Date().addingTimeInterval(20)
        var port: Int?
        while Date() < deadline {
            if let text = try? String(contentsOf: portFile, encoding: .utf8), let value = Int(text) { port = value; break }
            Thread.sleep(forTimeInterval: 0.05)
        }
        guard let port else { throw FixtureError("key server did not start within 20 s") }
        self.port = port
    }

    var url: String { "\(scheme)://127.0.0.1:\(port)/keys" }

    /// The throwaway CA that signed the HTTPS certificate.
    var caFile: String { directory.appendingPathComponent("ca.pem").path }

    /// Replaces state.json (see key_server.py for the members).
    func setState(_ state: [String: Any]) throws {
        let data = try JSONSerialization.data(withJSONObject: state)
        try data.write(to: directory.appendingPathComponent("state.json"), options: .atomic)
    }

    func signingKey(_ kid: String) throws -> SigningKey {
        let pem = try String(contentsOf: directory.appendingPathComponent("\(kid).key.pem"), encoding: .utf8)
        return try SigningKey(privateKeyPEM: pem)
    }

    func token(kid: String, subject: String = "user-1") throws -> String {
        try TokenMinter.sign(claims: TestIssuer.claims(subject: subject), key: signingKey(kid), keyID: kid)
    }

    /// Key requests served so far.
    func count(reset: Bool = false) async throws -> Int {
        let response = try await get("\(scheme)://127.0.0.1:\(port)/__count\(reset ? "?reset=1" : "")",
                                     options: HTTPFetchOptions(connectTimeout: 2, totalTimeout: 5, caFile: caFile)).get()
        let object = try JSONSerialization.jsonObject(with: Data(response.body)) as! [String: Any]
        return object["total"] as! Int
    }

    func stop() {
        try? stdin.fileHandleForWriting.close()
        if process.isRunning { process.terminate() }
        let deadline = Date().addingTimeInterval(5)
        while process.isRunning && Date() < deadline { Thread.sleep(forTimeInterval: 0.02) }
        try? FileManager.default.removeItem(at: directory)
    }

    deinit { stop() }
}

struct FixtureError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// The oidc provider the tests verify against.
enum TestIssuer {
    static let provider = "issuer"

    static func configuration() -> ProviderConfiguration {
        var configuration = ProviderConfiguration(name: provider, kind: .oidc)
        configuration.issuer = "https://issuer.test"
        configuration.audiences = ["api"]
        configuration.algorithms = ["RS256", "ES256"]
        return configuration
    }

    static func verifier() throws -> CredentialVerifier {
        try CredentialVerifier(providers: [configuration()], keys: [:])
    }

    static func claims(subject: String) -> JSONValue {
        let now = Int64(WallClock.nowSeconds())
        return .object([("iss", "https://issuer.test"), ("aud", "api"), ("sub", .string(subject)),
                        ("iat", .integer(now)), ("exp", .integer(now + 600))])
    }
}

extension CredentialVerifier {
    func check(_ token: String) -> VerificationResult { verifyBearer(token, now: WallClock.nowSeconds()) }
}

/// One loop for the whole test process (fetches, and timers that prove it is not blocked).
let testLoop = EventLoop(index: 90)

func get(_ url: String, options: HTTPFetchOptions = HTTPFetchOptions(connectTimeout: 2, totalTimeout: 5))
    async -> Result<HTTPFetchResponse, HTTPFetchError> {
    await withCheckedContinuation { continuation in
        HTTPGetClient(options: options).get(url, on: testLoop) { continuation.resume(returning: $0) }
    }
}

/// Records events for assertions.
final class EventLog: @unchecked Sendable {
    // @unchecked Sendable: `events` is guarded by `lock`.
    private let lock = NSLock()
    private var events: [KeyManagerEvent] = []
    func record(_ event: KeyManagerEvent) { lock.lock(); events.append(event); lock.unlock() }
    var all: [KeyManagerEvent] { lock.lock(); defer { lock.unlock() }; return events }
}

extension KeyManager {
    static func make(server: KeyServer, verifier: CredentialVerifier, cache: any SharedKeyCache = InProcessKeyCache(),
                     configuration: KeyManagerConfiguration = KeyManagerConfiguration(), events: EventLog? = nil) throws -> KeyManager {
        try KeyManager(verifier: verifier,
                       providers: [ManagedKeyProvider(name: TestIssuer.provider, source: .url(server.url, format: .jwks))],
                       cache: cache, fetchLoop: testLoop, configuration: configuration,
                       onEvent: events.map { log -> @Sendable (KeyManagerEvent) -> Void in { log.record($0) } })
    }

    func started() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in start { continuation.resume() } }
    }

    func refreshed() async -> RefetchOutcome {
        await withCheckedContinuation { continuation in refresh(provider: TestIssuer.provider) { continuation.resume(returning: $0) } }
    }

    /// `refreshed()` and when its completion ran (on the fetch loop), which a test that
    /// bounds how long a refresh took reads instead of the time its own task resumed (the
    /// test pool's threads may be busy with other suites long after the answer).
    func refreshedAt() async -> (outcome: RefetchOutcome, answered: Date) {
        await withCheckedContinuation { continuation in
            refresh(provider: TestIssuer.provider) { continuation.resume(returning: ($0, Date())) }
        }
    }

    func refetched(on loop: EventLoop = testLoop) async -> RefetchOutcome {
        await withCheckedContinuation { continuation in
            refetchForUnknownKey(provider: TestIssuer.provider, on: loop) { continuation.resume(returning: $0) }
        }
    }

    var providerStatus: KeyProviderStatus { status()[0] }
}

/// Polls `condition` every 20 ms for at most `seconds`.
func eventually(within seconds: Double, _ condition: () async throws -> Bool) async rethrows -> Bool {
    let deadline = Date().addingTimeInterval(seconds)
    while Date() < deadline {
        if try await condition() { return true }
        try? await Task.sleep(nanoseconds: 20_000_000)
    }
    return try await condition()
}

/// Short timings so failure paths run in seconds.
func quickConfiguration(minimumTTL: Double = 300, maximumTTL: Double = 86_400, staleFor: Double = 86_400,
                        minimumRefetchInterval: Double = 30, totalTimeout: Double = 2, maxBody: Int = 1 << 20)
    -> KeyManagerConfiguration {
    KeyManagerConfiguration(minimumTTL: minimumTTL, maximumTTL: maximumTTL, staleFor: staleFor,
                            minimumRefetchInterval: minimumRefetchInterval,
                            retryInitialDelay: 0.2, retryMaximumDelay: 0.5,
                            fetch: HTTPFetchOptions(connectTimeout: 1, totalTimeout: totalTimeout, maxBodyBytes: maxBody))
}
