import Foundation
import Testing
import PortcullisIO
import PortcullisTestSupport
@testable import PortcullisKeys
@testable import PortcullisOutbound

extension PortcullisKeysTests {
    @Suite struct HTTPGetClientTests {
        @Test func contentLengthChunkedAndUntilCloseBodiesDecodeTheSame() async throws {
            let server = try KeyServer(keys: ["rsa-a": "RS256"])
            defer { server.stop() }
            var bodies: [[UInt8]] = []
            for framing in ["length", "chunked", "close"] {
                try server.setState(["framing": framing, "cache_control": "public, max-age=1234", "age": 5])
                let response = try await get(server.url).get()
                #expect(response.status == 200, "\(framing)")
                #expect(response.cacheControl == "public, max-age=1234", "\(framing)")
                #expect(response.age == "5", "\(framing)")
                #expect(response.header("transfer-encoding") == (framing == "chunked" ? "chunked" : nil))
                bodies.append(response.body)
            }
            #expect(bodies[0].count > 300)
            #expect(bodies[0] == bodies[1] && bodies[1] == bodies[2])
        }

        @Test func bodyLargerThanTheCapIsRefusedForEveryFraming() async throws {
            let server = try KeyServer(keys: ["rsa-a": "RS256"])
            defer { server.stop() }
            let options = HTTPFetchOptions(connectTimeout: 1, totalTimeout: 5, maxBodyBytes: 64 * 1024)
            for framing in ["length", "chunked", "close"] {
                try server.setState(["framing": framing, "pad_bytes": 100_000])
                let result = await get(server.url, options: options)
                guard case .failure(.bodyTooLarge(_, let limit)) = result else {
                    Issue.record("\(framing): expected bodyTooLarge, got \(result)")
                    continue
                }
                #expect(limit == 64 * 1024)
                try server.setState(["framing": framing, "pad_bytes": 30_000])
                #expect(try await get(server.url, options: options).get().body.count > 30_000, "\(framing)")
            }
        }

        @Test func non200StatusIsReturnedWithItsBody() async throws {
            let server = try KeyServer(keys: ["rsa-a": "RS256"])
            defer { server.stop() }
            try server.setState(["status": 503])
            let response = try await get(server.url).get()
            #expect(response.status == 503)
            #expect(String(decoding: response.body, as: UTF8.self).contains("key host failure"))
        }

        @Test func hangingHostTimesOutWithoutBlockingTheLoop() async throws {
            let server = try KeyServer(keys: ["rsa-a": "RS256"])
            defer { server.stop() }
            try server.setState(["hang_seconds": 8])
            let ticks = LoopTicks(on: testLoop)
            let started = Date()
            // When the completion ran on the loop, not when this task got a thread again: on
            // a loaded machine the test pool's two threads may be busy with other suites for
            // seconds after the answer (9 s once, with the whole suite running).
            let (result, answered) = await withCheckedContinuation { continuation in
                HTTPGetClient(options: HTTPFetchOptions(connectTimeout: 1, totalTimeout: 0.5)).get(server.url, on: testLoop) {
                    continuation.resume(returning: ($0, Date()))
                }
            }
            let elapsed = answered.timeIntervalSince(started)
            let count = ticks.stop()
            guard case .failure(.timedOut(_, let seconds)) = result else {
                Issue.record("expected timedOut, got \(result)")
                return
            }
            #expect(seconds == 0.5)
            // Ended by the timeout, long before the host would have answered (not a bound on
            // how late a loaded machine runs the timer: CI runs this beside clusters of Redis).
            #expect(elapsed < 8)
            // A 10 ms timer on the same loop kept firing while the fetch hung.
            #expect(count >= Int(elapsed * 100 / 4), "only \(count) ticks in \(elapsed) s")
        }

        @Test func refusedConnectIsATypedError() async throws {
            // A port that was just free: bind, read the port, close.
            let port = Int(Loopback.freePort())
            let result = await get("http://127.0.0.1:\(port)/keys")
            guard case .failure(.connectFailed(let address, _)) = result else {
                Issue.record("expected connectFailed, got \(result)")
                return
            }
            #expect(address == "127.0.0.1:\(port)")
        }

        @Test func httpsVerifiesTheKeyHostAgainstTheGivenCA() async throws {
            let server = try KeyServer(keys: ["rsa-a": "RS256"], tlsNames: "IP:127.0.0.1,DNS:localhost")
            defer { server.stop() }
            let options = HTTPFetchOptions(connectTimeout: 2, totalTimeout: 5, caFile: server.caFile)
            let plain = try await get(server.url, options: options).get()
            #expect(plain.status == 200 && plain.body.count > 300)
            // By name: SNI plus a DNS-name check.
            let byName = try await get("https://localhost:\(server.port)/keys", options: options).get()
            #expect(byName.body == plain.body)
            try server.setState(["framing": "chunked"])
            #expect(try await get(server.url, options: options).get().body == plain.body)
        }

        @Test func httpsRefusesAnUntrustedCertificate() async throws {
            let server = try KeyServer(keys: ["rsa-a": "RS256"], tlsNames: "IP:127.0.0.1")
            defer { server.stop() }
            // The system store does not hold the throwaway CA.
            let result = await get(server.url, options: HTTPFetchOptions(connectTimeout: 2, totalTimeout: 5))
            guard case .failure(.tlsFailed(_, let reason)) = result else {
                Issue.record("expected tlsFailed, got \(result)")
                return
            }
            #expect(reason.contains("certificate verification failed"), "\(reason)")
        }

        @Test func httpsRefusesACertificateForAnotherName() async throws {
            let server = try KeyServer(keys: ["rsa-a": "RS256"], tlsNames: "DNS:keys.elsewhere.test")
            defer { server.stop() }
            let options = HTTPFetchOptions(connectTimeout: 2, totalTimeout: 5, caFile: server.caFile)
            for url in [server.url, "https://localhost:\(server.port)/keys"] {
                let result = await get(url, options: options)
                guard case .failure(.tlsFailed(_, let reason)) = result else {
                    Issue.record("\(url): expected tlsFailed, got \(result)")
                    continue
                }
                #expect(reason.contains("mismatch"), "\(reason)")
            }
        }

        @Test func urlsAreParsedStrictly() throws {
            let url = try FetchURL(parsing: "http://LOCALHOST:8080/a/b?x=1#frag")
            #expect(url.host == "localhost" && url.port == 8080 && url.pathAndQuery == "/a/b?x=1")
            #expect(url.hostHeader == "localhost:8080")
            let v6 = try FetchURL(parsing: "http://[::1]:9000")
            #expect(v6.host == "::1" && v6.pathAndQuery == "/" && v6.hostHeader == "[::1]:9000")
            let google = try FetchURL(parsing: KeySource.googleURL)
            #expect(google.scheme == .https && google.port == 443 && google.hostHeader == "www.googleapis.com")
            #expect(try FetchURL(parsing: KeySource.firebaseURL).pathAndQuery
                    == "/robot/v1/metadata/x509/securetoken@system.gserviceaccount.com")
            for bad in ["ftp://x/", "http://user:pw@host/", "http://host:99999/", "http:///path", "http://host/a b", "http://ho st/"] {
                #expect(throws: HTTPFetchError.self, "\(bad)") { try FetchURL(parsing: bad) }
            }
        }
    }
}

/// Counts a 10 ms timer on `loop`: if the loop were blocked, it would not fire.
final class LoopTicks: @unchecked Sendable {
    // @unchecked Sendable: `count` and `timer` are touched only on `loop.queue` (and read after `stop()` via sync).
    private let loop: EventLoop
    private var count = 0
    private var timer: DispatchSourceTimer?

    init(on loop: EventLoop) {
        self.loop = loop
        loop.queue.sync {
            let timer = DispatchSource.makeTimerSource(queue: loop.queue)
            timer.schedule(deadline: .now() + .milliseconds(10), repeating: .milliseconds(10), leeway: .milliseconds(1))
            timer.setEventHandler { [weak self] in self?.count += 1 }
            timer.resume()
            self.timer = timer
        }
    }

    func stop() -> Int {
        loop.queue.sync {
            timer?.cancel()
            timer = nil
            return count
        }
    }
}
