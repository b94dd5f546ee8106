import Dispatch
import Foundation
import PortcullisTestSupport
import Testing

/// An upstream that sends more than its framing declares must never make a pooled connection
/// hand one client's response to another. One connection to the upstream (`max_connections:
/// 1`), one client asking for the misframed answer and three more queued behind it: each of
/// them gets its own answer, nobody ever sees the crafted response (`Set-Cookie:
/// session=attacker`, body "crafted"), and the gateway logs and counts the extra bytes.
@Suite(.serialized) struct UpstreamDesyncEndToEndTests {
    final class DesyncUpstream {
        let port = Loopback.freePort()
        let process = Process()
        init() throws {
            process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
            process.arguments = ["python3", E2E.packageRoot.appendingPathComponent(
                "Tests/PortcullisEndToEndTests/Fixtures/desync_upstream.py").path, "\(port)"]
            try process.run()
            guard Loopback.waitForPort(port) else { throw TestFailure("the desync upstream did not start") }
        }
        deinit { E2E.stop(process, signal: SIGKILL) }
    }

    struct Variant: CustomStringConvertible, Sendable {
        let method: String
        let path: String
        /// What the misframed request's own client must get (status, body), or nil: a 502.
        let expected: (Int, String)?
        var description: String { "\(method) \(path)" }
    }

    static let variants: [Variant] = [
        Variant(method: "GET", path: "/under", expected: (200, "hello")),
        Variant(method: "HEAD", path: "/head", expected: (200, "")),
        Variant(method: "GET", path: "/nocontent", expected: (204, "")),
        Variant(method: "GET", path: "/notmodified", expected: (304, "")),
        Variant(method: "GET", path: "/chunked", expected: (200, "hello")),
        Variant(method: "GET", path: "/early", expected: (200, "early")),
        Variant(method: "GET", path: "/processing", expected: nil),
    ]

    static func gateway(_ upstream: DesyncUpstream, workers: Int) throws -> GatewayProcess {
        try GatewayProcess("""
        upstreams:
          app: {url: "http://127.0.0.1:\(upstream.port)", max_connections: 1, max_pending: 16, connect_timeout: 5s, response_timeout: 5s}
        routes:
          - {path: /, upstream: app, auth: none}
        """, workers: workers, metricsPublic: true)
    }

    /// Sends one request on a fresh connection and reads one response (HEAD: no body).
    static func exchange(_ port: UInt16, _ method: String, _ path: String) -> HTTPMessage? {
        guard let client = try? RawConnection(port: port, timeout: 10) else { return nil }
        client.send("\(method) \(path) HTTP/1.1\r\nHost: app\r\n\r\n")
        return client.readMessage(bodyless: method == "HEAD")
    }

    @Test(arguments: variants)
    func bytesPastTheFramingNeverReachAnotherClient(_ variant: Variant) throws {
        let upstream = try DesyncUpstream()
        let g = try Self.gateway(upstream, workers: 1)  // one loop: a freed connection goes to a waiter at once
        let port = g.port
        for round in 0..<3 {
            // The misframed request first, then three users queued for the one connection.
            let users = ["alice-\(round)", "bob-\(round)", "carol-\(round)"]
            nonisolated(unsafe) var answers: [HTTPMessage?] = Array(repeating: nil, count: users.count + 1)
            let lock = NSLock()
            DispatchQueue.concurrentPerform(iterations: users.count + 1) { i in
                // Behind the misframed request, queued for the connection; after /early's late
                // bytes, while the connection is idle, for that variant.
                if i > 0 { usleep(variant.path == "/early" ? 500_000 : 20_000) }
                let response = i == 0 ? Self.exchange(port, variant.method, variant.path)
                                      : Self.exchange(port, "GET", "/u/\(users[i - 1])")
                lock.withLock { answers[i] = response }
            }
            for (i, user) in users.enumerated() {
                let answer = try #require(answers[i + 1], "\(variant) round \(round): \(user) got no answer")
                #expect(answer.status == 200, "\(variant): \(user) got \(answer.status ?? 0) \(answer.bodyText)")
                #expect(answer.bodyText == "for \(user)", "\(variant): \(user) got \(answer.bodyText)")
                #expect(answer.header("set-cookie") == nil, "\(variant): \(user) got a cookie")
            }
            let own = try #require(answers[0], "\(variant): no answer to the misframed request")
            #expect(own.header("set-cookie") == nil)
            #expect(!own.bodyText.contains("crafted"))
            if let (status, body) = variant.expected {
                #expect(own.status == status, "\(variant): \(own.status ?? 0) \(own.bodyText)")
                #expect(own.bodyText == body, "\(variant): \(own.bodyText)")
            } else {
                #expect(own.status == 502, "\(variant): \(own.status ?? 0) \(own.bodyText)")
                #expect(own.bodyText.contains("102"), "\(own.bodyText)")
            }
        }
        // Logged (at most once a second) and counted, every time.
        if variant.path != "/processing" {
            #expect(g.waitForLog("upstream sent bytes no request asked for"), "\(g.log.suffix(2000))")
        }
        let metrics = E2E.curl(["http://127.0.0.1:\(g.adminPort)/metrics"]).body
        let line = metrics.split(separator: "\n").first { $0.hasPrefix("portcullis_upstream_unexpected_bytes_total{") }
        let count = line.flatMap { Int($0.split(separator: " ").last ?? "") } ?? 0
        if variant.path == "/processing" {
            #expect(count == 0, "an unexpected 1xx is a 502, not extra bytes: \(line ?? "none")")
        } else {
            #expect(count >= 3, "\(variant): \(line ?? "no counter")")
        }
    }
}
