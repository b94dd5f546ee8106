import Foundation
import PortcullisTestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// The HTTP/2 client fixture (Fixtures/h2_client.py, on python3-h2): one connection, one
/// mode, one JSON object back. Every run is bounded by its `--timeout`.
enum H2Client {
    static let script = E2E.packageRoot.appendingPathComponent("Tests/PortcullisEndToEndTests/Fixtures/h2_client.py").path

    static func run(_ port: UInt16, tls: Bool = false, timeout: Double = 10, _ arguments: [String]) throws -> [String: Any] {
        let base = ["--host", "127.0.0.1", "--port", "\(port)", "--timeout", "\(timeout)"] + (tls ? ["--tls", "--insecure"] : [])
        let (_, out, err) = E2E.run("/usr/bin/python3", [script] + base + arguments, timeout: timeout + 15)
        guard let object = try? JSONSerialization.jsonObject(with: Data(out.utf8)) as? [String: Any] else {
            throw TestFailure("h2_client \(arguments.joined(separator: " ")): \(out) \(err)")
        }
        return object
    }

    static func goawayCode(_ result: [String: Any]) -> Int? {
        (result["goaway"] as? [String: Any])?["error_code"] as? Int
    }

    static func responses(_ result: [String: Any]) -> [[String: Any]] {
        result["responses"] as? [[String: Any]] ?? []
    }
}

/// HTTP/2 through the real binary: curl and nghttp over TLS (ALPN h2) and h2c with prior
/// knowledge, the same auth path as HTTP/1.1, RFC 9113 §8.2 violations as stream errors
/// that never reach the app, and each known attack ended with GOAWAY ENHANCE_YOUR_CALM
/// while a bystander on another connection keeps being served.
@Suite(.serialized) struct HTTP2EndToEndTests {
    static func config(_ upstream: EchoUpstream, routes: String? = nil) -> String {
        guard let routes else { return upstream.openRoute }
        return """
        upstreams:
          app: {url: "http://127.0.0.1:\(upstream.port)"}
        routes:
        \(routes)
        """
    }

    static func h2cListener(_ http2: String = "") -> String {
        "  - {address: \"127.0.0.1:PORT\", h2c: true\(http2.isEmpty ? "" : ", http2: {\(http2)}")}"
    }

    static func tlsListener(_ leaf: TestPKI.Leaf, alpn: String? = nil) -> String {
        "  - {address: \"127.0.0.1:PORT\", tls: {certificates: [{certificate: \"\(leaf.certificate)\", private_key: \"\(leaf.key)\"}]\(alpn.map { ", alpn: \($0)" } ?? "")}}"
    }

    /// curl's `%{http_version}` and the echo body.
    static func curl(_ arguments: [String]) -> (version: String, status: Int, body: String) {
        let (_, out, _) = E2E.run("/usr/bin/curl", ["-s", "-o", "-", "-w", "\n%{http_version} %{http_code}", "--max-time", "10"] + arguments)
        let lines = out.split(separator: "\n", omittingEmptySubsequences: false)
        let last = (lines.last ?? "").split(separator: " ")
        return (last.first.map(String.init) ?? "", Int(last.last ?? "") ?? 0, lines.dropLast().joined(separator: "\n"))
    }

    @Test func tlsListenerOffersH2ByALPNAndStillSpeaksHTTP11() throws {
        let pki = try TestPKI()
        let leaf = try pki.leaf(["api.test"])
        let upstream = try EchoUpstream()
        let gateway = try GatewayProcess(Self.config(upstream), listen: Self.tlsListener(leaf))
        let resolve = ["--cacert", pki.caCertificate, "--resolve", "api.test:\(gateway.port):127.0.0.1"]
        let h2 = Self.curl(["--http2"] + resolve + ["https://api.test:\(gateway.port)/hello?x=1"])
        #expect(h2.version == "2" && h2.status == 200)
        let echo = try Echo(h2.body)
        #expect(echo.path == "/hello?x=1")
        #expect(echo.values("host") == ["api.test:\(gateway.port)"], ":authority becomes Host")
        #expect(echo.values("x-forwarded-proto") == ["https"])
        let h1 = Self.curl(["--http1.1"] + resolve + ["https://api.test:\(gateway.port)/one"])
        #expect(h1.version == "1.1" && h1.status == 200)
        // An access-log line is written once its response went out: wait for it, not for time.
        #expect(gateway.waitForLog("\"protocol\":\"h2\""))
        #expect(gateway.waitForLog("\"protocol\":\"http/1.1\""))
    }

    @Test func alpnWithoutH2KeepsTheListenerOnHTTP11() throws {
        let pki = try TestPKI()
        let leaf = try pki.leaf(["api.test"])
        let upstream = try EchoUpstream()
        let gateway = try GatewayProcess(Self.config(upstream), listen: Self.tlsListener(leaf, alpn: "[http/1.1]"))
        let result = Self.curl(["--http2", "-k", "https://127.0.0.1:\(gateway.port)/"])
        #expect(result.version == "1.1" && result.status == 200)
    }

    @Test func h2cListenerTakesPriorKnowledgeAndHTTP11() throws {
        let upstream = try EchoUpstream()
        let gateway = try GatewayProcess(Self.config(upstream), listen: Self.h2cListener())
        let h2c = Self.curl(["--http2-prior-knowledge", "\(gateway.url)/a/b?c=d"])
        #expect(h2c.version == "2" && h2c.status == 200)
        #expect(try Echo(h2c.body).path == "/a/b?c=d")
        let h1 = Self.curl(["\(gateway.url)/plain"])
        #expect(h1.version == "1.1" && h1.status == 200)
        // An h2c upgrade request is HTTP/1.1 that stays HTTP/1.1 (no upgrade, no smuggling).
        let upgrade = Self.curl(["--http2", "\(gateway.url)/h2c-attempt"])
        #expect(upgrade.version == "1.1" && upgrade.status == 200)
        #expect(!(try Echo(upgrade.body)).has("http2-settings"))
        #expect(gateway.waitForLog("\"protocol\":\"h2c\""))
    }

    @Test func headAndBodylessResponsesEndOnTheirHeadersAndTheProtocolIsCounted() throws {
        let upstream = try EchoUpstream()
        let gateway = try GatewayProcess(Self.config(upstream), metricsPublic: true, listen: Self.h2cListener())
        let head = try H2Client.run(gateway.port, ["request", "--method", "HEAD", "--path", "/big/5000"])
        let response = try #require(H2Client.responses(head).first)
        #expect(response["status"] as? Int == 200)
        #expect(response["body_length"] as? Int == 0)
        #expect(response["ended"] as? Bool == true)
        let headers = response["headers"] as? [[String]] ?? []
        #expect(headers.contains { $0 == ["content-length", "5000"] }, "HEAD keeps the length: \(headers)")
        #expect(!headers.contains { ["connection", "keep-alive", "transfer-encoding"].contains($0.first ?? "") })
        // A chunked upstream response reaches an h2 client decoded, as DATA frames.
        let chunked = try H2Client.run(gateway.port, ["request", "--path", "/chunked"])
        let chunkedResponse = try #require(H2Client.responses(chunked).first)
        #expect(chunkedResponse["status"] as? Int == 200 && (chunkedResponse["body_length"] as? Int ?? 0) > 0)
        let metrics = E2E.curl(["http://127.0.0.1:\(gateway.adminPort)/metrics"]).body
        #expect(metrics.contains("portcullis_requests_by_protocol_total{protocol=\"h2c\"} 2"), "\(metrics)")
    }

    @Test func manyConcurrentStreamsOnOneConnectionAllReachTheApp() throws {
        let upstream = try EchoUpstream()
        let gateway = try GatewayProcess(Self.config(upstream), listen: Self.h2cListener("max_concurrent_streams: 100"))
        let result = try H2Client.run(gateway.port, ["request", "--path", "/slow/200", "--count", "60"])
        let responses = H2Client.responses(result)
        #expect(responses.count == 60)
        #expect(responses.allSatisfy { $0["status"] as? Int == 200 }, "\(responses.map { $0["status"] ?? "nil" })")
        // They ran at once: 60 × 200 ms one after another would take 12 s.
        #expect((result["elapsed"] as? Double ?? 99) < 6)
        // nghttp, the reference client, agrees.
        let (_, out, _) = E2E.run("/usr/bin/nghttp", ["-ns", "-m", "40", "\(gateway.url)/n"], timeout: 20)
        #expect(out.split(separator: "\n").filter { $0.contains(" 200 ") }.count == 40, "\(out)")
    }

    @Test func requestAndResponseBodiesLargerThanTheWindowsStream() throws {
        let upstream = try EchoUpstream()
        let gateway = try GatewayProcess(Self.config(upstream) + "\nlimits: {max_body_bytes: 8MiB}",
                                         listen: Self.h2cListener("initial_window_size: 65535"))
        let result = try H2Client.run(gateway.port, ["request", "--method", "POST", "--path", "/upload", "--body-size", "1000000"])
        let response = try #require(H2Client.responses(result).first)
        #expect(response["status"] as? Int == 200)
        // The echo body holds what the app received: 1,000,000 'a's.
        #expect((response["body_length"] as? Int ?? 0) > 1_000_000)
        let download = Self.curl(["--http2-prior-knowledge", "-o", "/dev/null", "\(gateway.url)/big/3000000"])
        #expect(download.status == 200)
        let (_, size, _) = E2E.run("/usr/bin/curl", ["-s", "--http2-prior-knowledge", "--max-time", "10", "-o", "/dev/null",
                                                     "-w", "%{size_download}", "\(gateway.url)/big/3000000"])
        #expect(size == "3000000")
        // A client that never reopens its window gets the first 65,535 bytes, no more.
        let slow = try H2Client.run(gateway.port, timeout: 3, ["request", "--path", "/big/1000000", "--read-slowly"])
        #expect(H2Client.responses(slow).first?["body_length"] as? Int == 65535)
    }

    /// A response whose last bytes arrive while its client is backed up: the read that completes
    /// it also fills the stream's buffer to its high-water mark, so the exchange pauses the
    /// upstream connection's reading and ends in the same breath, before its client drained
    /// (no resume ever reaches that connection). Released to the pool, the connection must
    /// read again: the next request it carries got no answer before (a 10 s stall, about one
    /// run in five under ASan). One loop, so the next request takes that pooled connection;
    /// the body is exactly the high-water mark (64 KiB) and the client never reopens its
    /// window, so nothing drains between the reads.
    @Test func aConnectionReleasedWhileItsClientWasBackedUpAnswersTheNextRequest() throws {
        let upstream = try EchoUpstream()
        let gateway = try GatewayProcess(Self.config(upstream), workers: 1, listen: Self.h2cListener())
        for round in 1...3 {
            let slow = try H2Client.run(gateway.port, timeout: 2, ["request", "--path", "/big/65536", "--read-slowly"])
            #expect(H2Client.responses(slow).first?["body_length"] as? Int == 65535, "round \(round)")
            let (_, out, _) = E2E.run("/usr/bin/curl", ["-s", "--http2-prior-knowledge", "--max-time", "5", "-o", "/dev/null",
                                                        "-w", "%{http_code} %{size_download}", "\(gateway.url)/big/1000"])
            #expect(out == "200 1000", "round \(round): the request after a backed-up client's response: \(out)")
        }
    }

    @Test(arguments: [
        ("uppercase field name", ["--header", "X-Upper: 1"]),
        ("TE other than trailers", ["--header", "te: gzip"]),
        ("connection-specific field", ["--header", "connection: close"]),
        ("upgrade field", ["--header", "upgrade: websocket"]),
        ("keep-alive field", ["--header", "keep-alive: 5"]),
        ("pseudo-header after a regular field", ["--raw-pseudo", #"[["x-a","1"],[":method","GET"],[":path","/p"],[":scheme","http"],[":authority","a"]]"#]),
        ("duplicate :path", ["--raw-pseudo", #"[[":method","GET"],[":path","/p"],[":path","/q"],[":scheme","http"],[":authority","a"]]"#]),
        ("missing :path", ["--raw-pseudo", #"[[":method","GET"],[":scheme","http"],[":authority","a"]]"#]),
        ("unknown pseudo-header", ["--raw-pseudo", #"[[":method","GET"],[":path","/p"],[":scheme","http"],[":authority","a"],[":evil","1"]]"#]),
        ("content-length larger than the DATA", ["--method", "POST", "--body-size", "10", "--content-length-mismatch"]),
    ])
    func malformedRequestIsAStreamErrorAndNeverReachesTheApp(_ name: String, _ arguments: [String]) throws {
        let upstream = try EchoUpstream()
        let gateway = try GatewayProcess(Self.config(upstream), listen: Self.h2cListener())
        _ = try upstream.seen()
        let result = try H2Client.run(gateway.port, ["request", "--path", "/p"] + arguments)
        let response = try #require(H2Client.responses(result).first, "\(name): \(result)")
        #expect(response["reset"] as? Int == 1, "\(name): RST_STREAM PROTOCOL_ERROR expected, got \(response)")
        #expect(response["status"] as? Int == nil || (response["status"] as? Int ?? 0) >= 400, "\(name)")
        #expect(H2Client.goawayCode(result) == nil, "\(name): a stream error, not a connection error")
        #expect(try upstream.seen().isEmpty, "\(name) reached the upstream")
    }

    @Test func bearerAndSplitCookieFieldsAuthenticateAndIdentityHeadersAreStripped() throws {
        let upstream = try EchoUpstream()
        let gateway = try GatewayProcess(AuthFixtures.providers + "\n" + Self.config(
            upstream, routes: "  - {path: /, upstream: app, auth: required}"), listen: Self.h2cListener())
        let bearer = try AuthFixtures.mint(gateway, "app", ["--sub", "u-bearer"])
        let ok = try H2Client.run(gateway.port, ["request", "--path", "/me", "--header", bearer.lowercased(with: ":"),
                                                 "--header", "x-user-id: victim", "--header", "x.user.id: victim",
                                                 "--header", "x_user_id: victim"])
        let okResponse = try #require(H2Client.responses(ok).first)
        #expect(okResponse["status"] as? Int == 200)
        let echo = try Echo(okResponse["body"] as? String ?? "")
        #expect(echo.values("x-user-id") == ["u-bearer"])
        #expect(!echo.headers.contains { $0.0 == "x.user.id" || $0.0 == "x_user_id" })

        // NextAuth's cookie, split over several `cookie` fields (RFC 9113 §8.2.3).
        let cookieLine = try AuthFixtures.mint(gateway, "web", ["--sub", "u-cookie"])
        let cookie = String(cookieLine.split(separator: ":", maxSplits: 1)[1].trimmingCharacters(in: .whitespaces))
        let split = try H2Client.run(gateway.port, ["request", "--path", "/feed", "--header", "cookie: theme=dark",
                                                    "--header", "cookie: \(cookie)", "--header", "cookie: lang=en"])
        let splitResponse = try #require(H2Client.responses(split).first)
        #expect(splitResponse["status"] as? Int == 200, "\(splitResponse)")
        let splitEcho = try Echo(splitResponse["body"] as? String ?? "")
        #expect(splitEcho.values("x-user-id") == ["u-cookie"])
        #expect(splitEcho.values("cookie") == ["theme=dark; \(cookie); lang=en"], "one joined cookie field upstream")

        // Refusals are the same as on HTTP/1.1: 401 with the challenge, nothing forwarded.
        _ = try upstream.seen()
        let refused = try H2Client.run(gateway.port, ["request", "--path", "/me", "--header", "authorization: Bearer not.a.token"])
        let refusedResponse = try #require(H2Client.responses(refused).first)
        #expect(refusedResponse["status"] as? Int == 401)
        let headers = refusedResponse["headers"] as? [[String]] ?? []
        #expect(headers.contains { $0.first == "www-authenticate" })
        #expect(try upstream.seen().isEmpty)
    }

    /// Each attack from a scripted client: GOAWAY ENHANCE_YOUR_CALM (0xb), logged once and
    /// counted, while a bystander on its own connection is served promptly throughout.
    @Test(arguments: [
        ("rapid_reset", ["rapid-reset", "--streams", "5000"]),
        ("continuation_flood", ["continuation-flood", "--frames", "5000"]),
        ("oversized_headers", ["hpack-bomb"]),
        ("settings_flood", ["settings-flood"]),
        ("ping_flood", ["ping-flood"]),
        ("priority_flood", ["priority-flood"]),
        ("window_update_flood", ["window-update-flood"]),
        ("empty_data_flood", ["empty-data-flood"]),
    ])
    func attackEndsItsConnectionWithEnhanceYourCalmAndABystanderIsServed(_ kind: String, _ arguments: [String]) throws {
        let upstream = try EchoUpstream()
        let gateway = try GatewayProcess(Self.config(upstream), metricsPublic: true, listen: Self.h2cListener())
        let bystander = Bystander(url: "\(gateway.url)/bystander")
        bystander.start()
        let result = try H2Client.run(gateway.port, timeout: 10, arguments)
        let latencies = bystander.stop()
        #expect(H2Client.goawayCode(result) == 11, "\(kind): \(result)")
        #expect(result["closed"] as? Bool == true, "\(kind): the connection is closed")
        #expect((result["elapsed"] as? Double ?? 99) < 5, "\(kind) took \(result["elapsed"] ?? "?") s to stop")
        #expect(latencies.count >= 3, "\(kind): the bystander got \(latencies.count) answers")
        #expect(latencies.allSatisfy { $0 < 1.0 }, "\(kind): bystander latencies \(latencies)")
        let warnings = gateway.log.components(separatedBy: "\n").filter { $0.contains("ENHANCE_YOUR_CALM") }
        #expect(warnings.count == 1 && warnings[0].contains("\"reason\":\"\(kind)\""), "\(warnings)")
        let metrics = E2E.curl(["http://127.0.0.1:\(gateway.adminPort)/metrics"]).body
        #expect(metrics.contains("portcullis_http2_abuse_total{kind=\"\(kind)\"} 1"), "\(kind)")
    }

    /// A 401 answered before a POST's body arrived: the gateway reads and drops the rest of
    /// the body instead of resetting the stream at once, so a client that would read the
    /// reset first (curl with nghttp2 1.52 exited 92 without the status in 5-9 of 10 tries)
    /// sees the 401 every time.
    @Test func anEarlyRefusalOfAPostIsSeenByTheClientEveryTime() throws {
        let upstream = try EchoUpstream()
        let g = try GatewayProcess(Self.config(
            upstream, routes: "  - {path: /, upstream: app, auth: required}"), listen: Self.h2cListener())
        let body = FileManager.default.temporaryDirectory.appendingPathComponent("body-\(UUID().uuidString)").path
        FileManager.default.createFile(atPath: body, contents: Data(repeating: 0x61, count: 200_000))
        defer { unlink(body) }
        for attempt in 0..<20 {
            let (status, out, err) = E2E.run("/usr/bin/curl", [
                "-s", "-o", "/dev/null", "-w", "%{http_code}", "--http2-prior-knowledge", "--max-time", "10",
                "-X", "POST", "--data-binary", "@\(body)", "\(g.url)/upload"])
            #expect(status == 0 && out == "401", "attempt \(attempt): curl exit \(status), status \(out) \(err)")
        }
        #expect(try upstream.seen().isEmpty, "nothing reached the app")
    }

    @Test func moreStreamsThanAdvertisedAreRefused() throws {
        let upstream = try EchoUpstream()
        let gateway = try GatewayProcess(Self.config(upstream), listen: Self.h2cListener("max_concurrent_streams: 5"))
        let result = try H2Client.run(gateway.port, ["excess-streams"])
        #expect(result["max_concurrent_streams"] as? Int == 5)
        // RFC 9113 §5.1.2: a stream error each (REFUSED_STREAM), the connection kept (more
        // shapes in HTTP2CornersEndToEndTests).
        let resets = (result["resets"] as? [String: Int] ?? [:]).values
        #expect(H2Client.goawayCode(result) == nil && resets.filter { $0 == 7 }.count == 10, "\(result)")
    }

    @Test func aClosedWindowPastTheSendTimeoutResetsTheStream() throws {
        let upstream = try EchoUpstream()
        let gateway = try GatewayProcess(Self.config(upstream), listen: Self.h2cListener("send_timeout: 1s"))
        let result = try H2Client.run(gateway.port, timeout: 8, ["zero-window", "--path", "/big/1000000"])
        let resets = (result["resets"] as? [String: Int] ?? [:]).values
        #expect(resets.contains(8) || H2Client.goawayCode(result) == 11, "\(result)")
        #expect((result["elapsed"] as? Double ?? 99) < 5)
    }

    @Test func idleConnectionGetsGoawayAfterTheIdleTimeout() throws {
        let upstream = try EchoUpstream()
        let gateway = try GatewayProcess(Self.config(upstream), listen: Self.h2cListener("idle_timeout: 1s"))
        let result = try H2Client.run(gateway.port, timeout: 8, ["idle"])
        #expect(H2Client.goawayCode(result) == 0)
        #expect(result["closed"] as? Bool == true)
        let elapsed = result["elapsed"] as? Double ?? 99
        #expect(elapsed >= 0.9 && elapsed < 4, "\(elapsed)")
    }

    @Test func sigtermSendsGoawayWithTheLastStreamAndInFlightStreamsFinish() throws {
        let upstream = try EchoUpstream()
        let gateway = try GatewayProcess(Self.config(upstream) + "\ntimeouts: {shutdown_grace: 5s}", listen: Self.h2cListener())
        let done = DispatchSemaphore(value: 0)
        nonisolated(unsafe) var result: [String: Any] = [:]
        let port = gateway.port
        Thread.detachNewThread {
            result = (try? H2Client.run(port, timeout: 10, ["goaway-wait", "--path", "/slow/1500"])) ?? [:]
            done.signal()
        }
        usleep(600_000)
        gateway.send(SIGTERM)
        #expect(done.wait(timeout: .now() + 20) == .success)
        let goaway = result["goaway"] as? [String: Any]
        #expect(goaway?["error_code"] as? Int == 0, "\(result)")
        #expect(goaway?["last_stream_id"] as? Int == 1)
        #expect(H2Client.responses(result).first?["status"] as? Int == 200, "the stream in flight finished")
    }
}

/// Requests on a fresh connection every 50 ms while an attack runs; their latencies.
final class Bystander: @unchecked Sendable {
    // @unchecked Sendable: `latencies` and `running` only under `lock`.
    private let url: String
    private let lock = NSLock()
    private var latencies: [Double] = []
    private var running = true
    private let finished = DispatchSemaphore(value: 0)

    init(url: String) { self.url = url }

    func start() {
        Thread.detachNewThread { [self] in
            while lock.withLock({ running }) {
                let started = Date()
                let (_, out, _) = E2E.run("/usr/bin/curl", ["-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "5",
                                                            "--http2-prior-knowledge", url], timeout: 8)
                let elapsed = Date().timeIntervalSince(started)
                lock.withLock { latencies.append(out == "200" ? elapsed : 99) }
                usleep(50_000)
            }
            finished.signal()
        }
    }

    func stop() -> [Double] {
        usleep(200_000)  // one more request after the attack
        lock.withLock { running = false }
        _ = finished.wait(timeout: .now() + 15)
        return lock.withLock { latencies }
    }
}

private extension String {
    /// "Authorization: Bearer x" → "authorization: Bearer x" (HTTP/2 field names are lower case).
    func lowercased(with separator: Character) -> String {
        guard let index = firstIndex(of: separator) else { return self }
        return self[..<index].lowercased() + self[index...]
    }
}
