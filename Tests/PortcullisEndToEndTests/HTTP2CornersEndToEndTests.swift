import Foundation
import PortcullisTestSupport
import Testing

/// RFC 9113 corners through the real binary (#25.10), each with the raw-frame client
/// (Fixtures/h2_client.py) against an echo upstream that records every complete request.
@Suite(.serialized) struct HTTP2CornersEndToEndTests {
    static let protocolError = 1, frameSizeError = 6, refusedStream = 7, cancel = 8

    /// Streams past SETTINGS_MAX_CONCURRENT_STREAMS are refused one by one (RST_STREAM
    /// REFUSED_STREAM, §5.1.2) and never forwarded; the connection goes on: the streams it
    /// admitted are answered, and a stream opened once a slot is free is answered too.
    @Test(arguments: [1, 5, 100])
    func streamsPastTheLimitAreRefusedOneByOneAndTheConnectionGoesOn(limit: Int) throws {
        let upstream = try EchoUpstream()
        let gateway = try GatewayProcess(HTTP2EndToEndTests.config(upstream),
                                         metricsPublic: true,
                                         listen: HTTP2EndToEndTests.h2cListener("max_concurrent_streams: \(limit)"))
        let extra = 7
        let result = try H2Client.run(gateway.port, timeout: 15, ["excess-streams", "--method", "POST", "--path", "/held",
                                                                 "--extra", "\(extra)"])
        #expect(result["max_concurrent_streams"] as? Int == limit, "advertised as configured: \(result["server_settings"] ?? "")")
        #expect(H2Client.goawayCode(result) == nil && result["closed"] as? Bool == false, "the connection was kept: \(result)")
        let resets = result["resets"] as? [String: Int] ?? [:]
        let refused = resets.filter { $0.value == Self.refusedStream }.keys.compactMap { Int($0) }.sorted()
        #expect(refused == (limit..<(limit + extra)).map { 2 * $0 + 1 }, "exactly the streams past the limit: \(resets)")
        let first = result["first_answered"] as? [String: Any]
        #expect(first?["status"] as? Int == 200, "an admitted stream is answered: \(String(describing: first))")
        let after = result["after_refusals"] as? [String: Any]
        #expect(after?["status"] as? Int == 200, "a stream opened once a slot is free: \(String(describing: after))")
        // The app saw the first admitted stream and the late one; never a refused one.
        let seen = try upstream.seen()
        #expect(seen.count == 2, "\(seen)")
        let metrics = E2E.curl(["http://127.0.0.1:\(gateway.adminPort)/metrics"]).body
        #expect(metrics.contains("portcullis_http2_refused_streams_total \(extra)"), "\(metrics.prefix(4000))")
    }

    /// nghttp2 is not told the stream limit, and it used to keep closed streams (for RFC
    /// 7540 priorities) as many as that limit: unbounded, every stream a connection ever had.
    /// 100,000 streams on one connection (h2load) leave the gateway's memory where 1,000 did.
    @Test func aLongLivedConnectionDoesNotKeepItsClosedStreams() throws {
        // Every stream answered 401 by the gateway itself: no upstream in the measurement.
        let gateway = try GatewayProcess("""
        providers:
          - {name: app, type: hs256, secret: "\(AppFitEndToEndTests.secret)"}
        upstreams:
          app: {url: "http://127.0.0.1:1"}
        routes:
          - {path: /, upstream: app, auth: required}
        """, workers: 1, listen: HTTP2EndToEndTests.h2cListener())
        func rss() -> Int {
            let status = (try? String(contentsOfFile: "/proc/\(gateway.process.processIdentifier)/status", encoding: .utf8)) ?? ""
            let line = status.split(separator: "\n").first { $0.hasPrefix("VmRSS:") } ?? ""
            return Int(line.split(separator: " ").dropFirst().first ?? "") ?? 0  // KiB
        }
        func load(_ requests: Int) -> String {
            let (_, out, _) = E2E.run("/usr/bin/h2load", ["-n", "\(requests)", "-c", "1", "-m", "20", "\(gateway.url)/x"],
                                      timeout: 120)
            return out
        }
        #expect(load(1_000).contains("1000 done"))
        let before = rss()
        let out = load(100_000)
        #expect(out.contains("100000 done") && out.contains("100000 4xx"), "\(out.suffix(600))")
        let grown = rss() - before
        #expect(grown < 8 * 1024, "RSS grew \(grown) KiB over 100,000 streams on one connection")
    }

    /// A client that keeps opening streams past the limit spends a budget and is ended with
    /// GOAWAY ENHANCE_YOUR_CALM, like the other floods.
    @Test func aFloodOfStreamsPastTheLimitEndsTheConnection() throws {
        let upstream = try EchoUpstream()
        let gateway = try GatewayProcess(HTTP2EndToEndTests.config(upstream),
                                         listen: HTTP2EndToEndTests.h2cListener("max_concurrent_streams: 2"))
        let result = try H2Client.run(gateway.port, timeout: 15, ["excess-streams", "--method", "POST", "--extra", "3000"])
        #expect(H2Client.goawayCode(result) == 11, "\(result["goaway"] ?? "") \(result["resets"].map { "\(($0 as? [String: Int])?.count ?? 0)" } ?? "")")
    }

    /// A frame past the advertised SETTINGS_MAX_FRAME_SIZE (16384) is a connection error
    /// FRAME_SIZE_ERROR (§4.2), for a HEADERS frame as for DATA, on h2c as over TLS; nothing
    /// reaches the app.
    @Test(arguments: ["headers", "data"], [false, true])
    func aFrameLargerThanMaxFrameSizeIsAConnectionError(type: String, tls: Bool) throws {
        let upstream = try EchoUpstream()
        let pki = try TestPKI()
        let listen = tls ? HTTP2EndToEndTests.tlsListener(try pki.leaf(["localhost"])) : HTTP2EndToEndTests.h2cListener()
        let gateway = try GatewayProcess(HTTP2EndToEndTests.config(upstream), listen: listen)
        let result = try H2Client.run(gateway.port, tls: tls, ["oversized-frame", "--type", type, "--size", "20000"]
                                      + (type == "data" ? ["--header", "content-length: 20000"] : []))
        #expect(result["alpn"] as? String == (tls ? "h2" : nil))
        #expect(H2Client.goawayCode(result) == Self.frameSizeError, "\(type) tls=\(tls): \(result)")
        #expect(result["closed"] as? Bool == true)
        #expect(try upstream.seen().isEmpty, "\(type) frame reached the app")
    }

    /// DATA that contradicts `content-length` makes the request malformed (§8.1.1): a stream
    /// error, and the upstream never holds a complete request, whatever the frames' timing.
    @Test(arguments: [
        // (declared content-length, frames), where "-" waits half a second.
        ("0", "-,4es"),        // content-length: 0, no END_STREAM on HEADERS, then a body
        ("0", "-,4"),          // the same, the body not ended
        ("5", "5,-,3es"),      // the declared length arrives, then more
        ("5", "-,5,-,1"),      // the same, one more byte later
        ("5", "2,-,2es"),      // fewer bytes than declared
        ("5", "8es"),          // more bytes than declared, in one frame
    ])
    func dataContradictingContentLengthNeverReachesTheApp(declared: String, frames: String) throws {
        let upstream = try EchoUpstream()
        let gateway = try GatewayProcess(HTTP2EndToEndTests.config(upstream), listen: HTTP2EndToEndTests.h2cListener())
        let result = try H2Client.run(gateway.port, ["data-plan", "--path", "/upload", "--header", "content-length: \(declared)",
                                                     "--frames=\(frames)", "--gap", "0.5"])
        let response = try #require(H2Client.responses(result).first)
        #expect(response["reset"] as? Int == Self.protocolError, "\(declared) \(frames): \(response)")
        #expect(response["status"] as? Int == nil, "\(declared) \(frames): never answered by the app: \(response)")
        #expect(H2Client.goawayCode(result) == nil, "a stream error")
        #expect(try upstream.seen().isEmpty, "content-length \(declared), frames \(frames) reached the app")
    }

    /// The same shapes, well formed, are forwarded once END_STREAM confirms the length:
    /// `content-length: 0` whose END_STREAM comes on a later empty DATA, and a body whose
    /// END_STREAM comes after its last byte.
    @Test(arguments: [("0", "-,0es"), ("5", "5,-,0es"), ("5", "2,-,3es"), ("5", "5es")])
    func aBodyThatMatchesItsContentLengthIsForwarded(declared: String, frames: String) throws {
        let upstream = try EchoUpstream()
        let gateway = try GatewayProcess(HTTP2EndToEndTests.config(upstream), listen: HTTP2EndToEndTests.h2cListener())
        let result = try H2Client.run(gateway.port, ["data-plan", "--path", "/upload", "--header", "content-length: \(declared)",
                                                     "--frames=\(frames)", "--gap", "0.5"])
        let response = try #require(H2Client.responses(result).first)
        #expect(response["status"] as? Int == 200, "\(declared) \(frames): \(response)")
        let echo = try Echo(response["body"] as? String ?? "")
        #expect(echo.method == "POST" && echo.body == String(repeating: "d", count: Int(declared)!), "\(echo.body)")
        #expect(try upstream.seen().count == 1)
    }

    /// `content-length: 0` and END_STREAM never: the stream is reset after the body timeout,
    /// never forwarded.
    @Test func anEmptyBodyThatNeverEndsIsResetAfterTheBodyTimeout() throws {
        let upstream = try EchoUpstream()
        let gateway = try GatewayProcess(HTTP2EndToEndTests.config(upstream) + "\ntimeouts: {body: 1s}",
                                         listen: HTTP2EndToEndTests.h2cListener())
        let result = try H2Client.run(gateway.port, timeout: 8, ["data-plan", "--path", "/upload", "--header", "content-length: 0",
                                                                "--frames=-", "--gap", "3"])
        let response = try #require(H2Client.responses(result).first)
        #expect(response["reset"] as? Int == Self.cancel, "\(response)")
        #expect(try upstream.seen().isEmpty)
    }

    /// CONNECT (which has no :path, §8.5) is answered the documented 405, as on HTTP/1.1.
    @Test func connectIsAnswered405() throws {
        let upstream = try EchoUpstream()
        let gateway = try GatewayProcess(HTTP2EndToEndTests.config(upstream), listen: HTTP2EndToEndTests.h2cListener())
        let result = try H2Client.run(gateway.port, ["request", "--raw-pseudo", #"[[":method","CONNECT"],[":authority","example.com:443"]]"#])
        let response = try #require(H2Client.responses(result).first)
        #expect(response["status"] as? Int == 405, "\(response)")
        #expect(try upstream.seen().isEmpty)
        let http1 = E2E.curl(["-X", "CONNECT", "--request-target", "example.com:443", "\(gateway.url)"])
        #expect(http1.status == 405)
    }

    /// `:authority` with userinfo is malformed (§8.3.1): a stream error, never routed.
    @Test(arguments: ["user@localhost", "user:pw@localhost:8080", "@localhost"])
    func anAuthorityWithUserinfoIsAStreamError(authority: String) throws {
        let upstream = try EchoUpstream()
        let gateway = try GatewayProcess(HTTP2EndToEndTests.config(upstream), listen: HTTP2EndToEndTests.h2cListener())
        let result = try H2Client.run(gateway.port, ["request", "--authority", authority])
        let response = try #require(H2Client.responses(result).first)
        #expect(response["reset"] as? Int == Self.protocolError && response["status"] as? Int == nil, "\(authority): \(response)")
        #expect(try upstream.seen().isEmpty)
    }
}
