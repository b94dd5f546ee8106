import Foundation
import PortcullisTestSupport
import Testing

/// Request-smuggling and malformed inputs through the real gateway: each gets its
/// status with a JSON reason, the connection closes, and nothing reaches the upstream.
@Suite(.serialized)
struct HostileInputTests {
    let upstream: EchoUpstream
    let gateway: GatewayProcess

    init() throws {
        upstream = try EchoUpstream()
        gateway = try GatewayProcess("""
        upstreams:
          app: {url: "http://127.0.0.1:\(upstream.port)"}
        routes:
          - {path: /, upstream: app, auth: none}
        limits: {max_request_line: 1024, max_header_bytes: 4096, max_body_bytes: 1000}
        """)
    }

    static let cases: [(String, String, Int)] = [
        ("CL and TE together", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400),
        ("differing CLs", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!", 400),
        ("CL with sign", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: +5\r\n\r\nhello", 400),
        ("TE not chunked last", "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, identity\r\n\r\n", 400),
        ("space before colon", "GET / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding : chunked\r\n\r\n", 400),
        ("obs-fold", "GET / HTTP/1.1\r\nHost: x\r\nX-A: 1\r\n  folded\r\n\r\n", 400),
        ("bare LF", "GET / HTTP/1.1\nHost: x\n\n", 400),
        ("bare CR in value", "GET / HTTP/1.1\r\nHost: x\r\nX-A: a\rb\r\n\r\n", 400),
        ("NUL in value", "GET / HTTP/1.1\r\nHost: x\r\nX-A: a\u{0}b\r\n\r\n", 400),
        ("missing Host", "GET / HTTP/1.1\r\n\r\n", 400),
        ("two Hosts", "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400),
        ("HTTP/1.2", "GET / HTTP/1.2\r\nHost: x\r\n\r\n", 505),
        ("invalid name", "GET / HTTP/1.1\r\nHost: x\r\nX(Y): 1\r\n\r\n", 400),
        ("request line too long", "GET /" + String(repeating: "a", count: 2000) + " HTTP/1.1\r\nHost: x\r\n\r\n", 414),
        ("head too large", "GET / HTTP/1.1\r\nHost: x\r\n" + String(repeating: "X-A: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n", count: 120) + "\r\n", 431),
        ("chunk size overflow", "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nfffffffffffffffffff\r\n", 400),
        ("body too large", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n", 413),
        ("encoded slash", "GET /a%2Fb HTTP/1.1\r\nHost: x\r\n\r\n", 400),
    ]

    @Test(arguments: 0..<HostileInputTests.cases.count)
    func hostileRequestIsRefusedAndNeverForwarded(_ index: Int) throws {
        let (name, request, status) = Self.cases[index]
        _ = try upstream.seen()
        let c = try RawConnection(port: gateway.port)
        c.send(request)
        let text = c.readAll()  // the gateway closes after answering
        #expect(text.hasPrefix("HTTP/1.1 \(status) "), "\(name): \(text.prefix(80))")
        #expect(text.contains("{\"error\":"), "\(name)")
        #expect(text.lowercased().contains("connection: close"), "\(name)")
        #expect(try upstream.seen().isEmpty, "\(name) reached the upstream")
    }

    /// The same hostile requests arriving in pieces (the head spread over several reads, as
    /// a slow or hostile client sends it): each is refused the same way, and the gateway
    /// lives on (a refusal after a buffered partial head used to crash the process).
    @Test(arguments: 0..<HostileInputTests.cases.count)
    func hostileRequestInPiecesIsRefusedAndTheGatewayLivesOn(_ index: Int) throws {
        let (name, request, status) = Self.cases[index]
        _ = try upstream.seen()
        let c = try RawConnection(port: gateway.port)
        let bytes = Array(request.utf8)
        let piece = max(1, bytes.count / 3)
        var offset = 0
        while offset < bytes.count {
            c.send(bytes: Array(bytes[offset..<min(offset + piece, bytes.count)]))
            offset += piece
            usleep(20_000)
        }
        let text = c.readAll()
        #expect(text.hasPrefix("HTTP/1.1 \(status) "), "\(name): \(text.prefix(80))")
        #expect(try upstream.seen().isEmpty, "\(name) reached the upstream")
        #expect(E2E.curl(["\(gateway.url)/alive"]).status == 200, "\(name): the gateway is still up")
    }

    /// A header section past limits.max_header_bytes sent in 4 KiB writes (a large cookie): 431,
    /// and the gateway lives on. Also a request line past its limit, and a bad line after 6 KB.
    @Test func oversizedHeadsInManyReadsAreRefusedAndTheGatewayLivesOn() throws {
        let g = try GatewayProcess(upstream.openRoute)
        for (request, status) in [
            ("GET / HTTP/1.1\r\nHost: x\r\nCookie: " + String(repeating: "a", count: 40_000) + "\r\n\r\n", 431),
            ("GET /" + String(repeating: "b", count: 10_000) + " HTTP/1.1\r\nHost: x\r\n\r\n", 414),
            ("GET / HTTP/1.1\r\nHost: x\r\nX-Pad: " + String(repeating: "c", count: 6_000) + "\r\nno colon here\r\n\r\n", 400),
        ] {
            let c = try RawConnection(port: g.port)
            let bytes = Array(request.utf8)
            var offset = 0
            while offset < bytes.count {
                c.send(bytes: Array(bytes[offset..<min(offset + 4096, bytes.count)]))
                offset += 4096
                usleep(5_000)
            }
            let text = c.readAll()
            #expect(text.hasPrefix("HTTP/1.1 \(status) "), "\(text.prefix(80))")
            #expect(E2E.curl(["\(g.url)/alive"]).status == 200, "the gateway is still up after the \(status)")
        }
    }

    @Test func chunkedBodyWithSmuggledRequestIsNotForwardedAsTwo() throws {
        _ = try upstream.seen()
        let c = try RawConnection(port: gateway.port)
        // A bad chunk line after a valid chunk must not let "GET /smuggled" through.
        c.send("POST /first HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\nzz\r\nGET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n")
        _ = c.readAll()
        let seen = try upstream.seen()
        #expect(!seen.contains("/smuggled"))
    }

    /// The client-side deadlines of reading a request (head, body) end with the request: a
    /// slow upstream and a long download run past them (the upstream's response_timeout
    /// governs the wait). Only a client that stops reading is cut off, after `timeouts.send`.
    @Test func requestDeadlinesDoNotCutTheResponseButASilentReaderIsCutOff() throws {
        let g = try GatewayProcess("""
        upstreams:
          app: {url: "http://127.0.0.1:\(upstream.port)", response_timeout: 20s}
        routes:
          - {path: /, upstream: app, auth: none}
        timeouts: {header: 1s, body: 1s, send: 3s}
        """)
        // (send: 3s: with 1s the rate-limited download below failed once in a full run on a
        // loaded machine; curl's --limit-rate reads in bursts, and a pause of a second while
        // the socket buffers are full is what the send timeout cuts.)
        // An upstream that answers after 2.5 s: past the header timeout (GET) and the body timeout (POST).
        #expect(E2E.curl(["\(g.url)/slow/2500"]).status == 200)
        #expect(E2E.curl(["-X", "POST", "-d", "abc", "\(g.url)/slow/2500"]).status == 200)
        // A 12 MB download taken at 4 MB/s (3 s), far past both.
        let (status, out, _) = E2E.run("/usr/bin/curl", ["-s", "-o", "/dev/null", "-w", "%{http_code} %{size_download}",
                                                         "--limit-rate", "4M", "--max-time", "20", "\(g.url)/big/12000000"])
        #expect(status == 0 && out == "200 12000000", "\(out)")
        // A client that asks for 64 MB and reads nothing is closed after about the send timeout.
        let c = try RawConnection(port: g.port, timeout: 10)
        c.send("GET /big/64000000 HTTP/1.1\r\nHost: x\r\n\r\n")
        let start = Date()
        sleep(4)
        let text = c.readAll()
        #expect(text.hasPrefix("HTTP/1.1 200 "))
        #expect(text.utf8.count < 64_000_000, "the connection was closed before the body was complete")
        #expect(Date().timeIntervalSince(start) < 9.5, "closed, not held until the client's own timeout")
    }

    @Test func slowlorisHeadIsCutOffByTheHeaderTimeout() throws {
        let g = try GatewayProcess("""
        upstreams:
          app: {url: "http://127.0.0.1:\(upstream.port)"}
        routes:
          - {path: /, upstream: app, auth: none}
        timeouts: {header: 1s}
        """)
        let c = try RawConnection(port: g.port, timeout: 4)
        c.send("GET / HTTP/1.1\r\nHost: x\r\n")
        let text = c.readAll()
        #expect(text.hasPrefix("HTTP/1.1 408 "))
    }
}
