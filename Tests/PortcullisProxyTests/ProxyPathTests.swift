import Foundation
import Logging
import PortcullisIO
import PortcullisTestSupport
import Testing
@testable import PortcullisProxy

/// The HTTP/1.1 proxy path in process: a `ProxyServer` on its own loops, a scripted
/// upstream and a raw client on 127.0.0.1. These pin the behaviour of the path (keep-alive,
/// pipelining, back-pressure both ways, the retry of an idempotent request, the 101
/// tunnel, header hygiene, framing) so the connection layer can be reshaped under them.
@Suite(.serialized)
struct ProxyPathTests {
    /// A gateway in this process forwarding every path to `upstream` without authentication.
    final class Gateway {
        let group: EventLoopGroup
        let server: ProxyServer
        let port: UInt16

        init(upstream: UInt16, auth: AuthMode = .none, loops: Int = 1,
             configure: (inout ProxyConfiguration) -> Void = { _ in }) throws {
            group = EventLoopGroup(count: loops)
            let address = try SocketAddress(parsing: "127.0.0.1:\(upstream)")
            var configuration = ProxyConfiguration(
                routes: [RouteConfiguration(pathPrefix: "/", upstream: "app", auth: auth)],
                upstreams: [UpstreamConfiguration(name: "app", address: address, responseTimeout: 5)])
            configure(&configuration)
            server = try ProxyServer(group: group, configuration: configuration,
                                     authenticator: NoProvidersAuthenticator(realm: "test"),
                                     accessLogFD: nil, logger: Logger(label: "test"))
            port = try server.addListener(address: SocketAddress(parsing: "127.0.0.1:0"), mode: .gateway)
            server.start()
        }

        func connect() throws -> RawConnection { try RawConnection(port: port) }

        deinit {
            let done = DispatchSemaphore(value: 0)
            server.shutdown(gracePeriod: 0) { done.signal() }
            done.wait()
        }
    }

    static func ok(_ body: String, extra: String = "") -> String {
        "HTTP/1.1 200 OK\r\ncontent-length: \(body.utf8.count)\r\n\(extra)\r\n\(body)"
    }

    /// Where two large byte arrays first differ (nil: equal), without a quadratic diff.
    static func firstDifference(_ a: [UInt8], _ b: [UInt8]) -> String? {
        if a == b { return nil }
        if let i = (0..<min(a.count, b.count)).first(where: { a[$0] != b[$0] }) ?? (a.count == b.count ? nil : min(a.count, b.count)) {
            return "byte \(i) of \(a.count) (expected \(b.count))"
        }
        return nil
    }

    // MARK: Keep-alive and pipelining

    @Test func keepAliveReusesOneUpstreamConnection() throws {
        let upstream = try ScriptedUpstream()
        let gateway = try Gateway(upstream: upstream.port)
        let client = try gateway.connect()
        var app: RawConnection?
        for i in 0..<3 {
            client.send("GET /item/\(i) HTTP/1.1\r\nHost: a.example\r\n\r\n")
            if app == nil { app = try upstream.accept() }
            let request = try #require(app?.readMessage())
            #expect(request.startLine == "GET /item/\(i) HTTP/1.1")
            app?.send(Self.ok("item \(i)"))
            let response = try #require(client.readMessage())
            #expect(response.status == 200)
            #expect(response.bodyText == "item \(i)")
            #expect(response.header("connection") == nil)
        }
        #expect(upstream.acceptedCount == 1)
    }

    @Test func pipelinedRequestsAreForwardedOneAtATimeAndAnsweredInOrder() throws {
        let upstream = try ScriptedUpstream()
        let gateway = try Gateway(upstream: upstream.port)
        let client = try gateway.connect()
        client.send((1...3).map { "GET /p/\($0) HTTP/1.1\r\nHost: a\r\n\r\n" }.joined())
        let app = try upstream.accept()
        for i in 1...3 {
            let request = try #require(app.readMessage())
            #expect(request.startLine == "GET /p/\(i) HTTP/1.1")
            // The next request is held by the gateway until this response is complete.
            #expect(app.staysQuiet(for: 0.2))
            app.send(Self.ok("r\(i)"))
        }
        for i in 1...3 {
            #expect(client.readMessage()?.bodyText == "r\(i)")
        }
    }

    @Test func http10ClientGetsKeepAliveOnlyWhenAskedAndTheUpstreamAlwaysGetsOneHost() throws {
        let upstream = try ScriptedUpstream()
        let gateway = try Gateway(upstream: upstream.port)
        let client = try gateway.connect()
        client.send("GET /a HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
        let app = try upstream.accept()
        let request = try #require(app.readMessage())
        #expect(request.startLine == "GET /a HTTP/1.1")
        #expect(request.values("host") == ["127.0.0.1:\(upstream.port)"])
        app.send(Self.ok("one"))
        let first = try #require(client.readMessage())
        #expect(first.header("connection") == "keep-alive")
        client.send("GET /b HTTP/1.0\r\nHost: h.example\r\n\r\n")
        #expect(app.readMessage()?.values("host") == ["h.example"])
        app.send(Self.ok("two"))
        let second = try #require(client.readMessage())
        #expect(second.header("connection") == "close")
        #expect(client.peerClosed())
    }

    // MARK: Back-pressure

    @Test func aSlowUpstreamStopsTheGatewayReadingTheRequestBody() throws {
        let upstream = try ScriptedUpstream()
        let gateway = try Gateway(upstream: upstream.port) { $0.limits.maxBodyBytes = Int.max }
        let client = try gateway.connect()
        let size = 64 << 20
        let body = (0..<size).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ $0 >> 16) }
        client.send("POST /upload HTTP/1.1\r\nHost: a\r\nContent-Length: \(size)\r\n\r\n")
        let app = try upstream.accept()
        // The app reads nothing yet: what the gateway holds is bounded by socket buffers
        // (about 20 MiB on loopback at most), never the whole body.
        let sent = client.sendUntilStalled(body)
        #expect(sent < 40 << 20, "the gateway took \(sent >> 20) MiB while the upstream read nothing")
        let reader = Thread { client.send(bytes: Array(body[sent...])) }
        reader.start()
        let request = try #require(app.readMessage())
        app.send(Self.ok("stored"))
        #expect(Self.firstDifference(request.body, body) == nil)
        #expect(client.readMessage()?.bodyText == "stored")
    }

    @Test func anUploadThatKeepsFlowingIsNotCutByTheResponseTimeout() throws {
        let upstream = try ScriptedUpstream()
        let gateway = try Gateway(upstream: upstream.port) { $0.upstreams[0].responseTimeout = 1 }
        let client = try gateway.connect()
        let piece = [UInt8](repeating: 0x61, count: 256 << 10)
        let pieces = 32  // 8 MiB over about 1.6 s: longer than the response timeout, never idle
        client.send("PUT /slow HTTP/1.1\r\nHost: a\r\nContent-Length: \(piece.count * pieces)\r\n\r\n")
        let writer = Thread {
            for _ in 0..<pieces {
                client.send(bytes: piece)
                usleep(50_000)
            }
        }
        writer.start()
        let app = try upstream.accept()
        let request = try #require(app.readMessage())
        #expect(request.body.count == piece.count * pieces)
        app.send(Self.ok("kept"))
        #expect(client.readMessage()?.bodyText == "kept")
    }

    @Test func aSlowClientStopsTheGatewayReadingTheResponse() throws {
        let upstream = try ScriptedUpstream()
        let gateway = try Gateway(upstream: upstream.port)
        let size = 64 << 20  // made before the request: the response timeout runs from it
        let body = (0..<size).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ $0 >> 12) }
        let client = try gateway.connect()
        client.send("GET /big HTTP/1.1\r\nHost: a\r\n\r\n")
        let app = try upstream.accept()
        _ = app.readMessage()
        app.send("HTTP/1.1 200 OK\r\ncontent-length: \(size)\r\n\r\n")
        let sent = app.sendUntilStalled(body)
        #expect(sent < 40 << 20, "the gateway took \(sent >> 20) MiB while the client read nothing")
        let writer = Thread { app.send(bytes: Array(body[sent...])) }
        writer.start()
        let response = try #require(client.readMessage())
        #expect(Self.firstDifference(response.body, body) == nil)
    }

    // MARK: Upstream failures

    @Test func anIdempotentRequestIsRetriedOnceWhenAReusedConnectionClosesWithoutAnswer() throws {
        let upstream = try ScriptedUpstream()
        let gateway = try Gateway(upstream: upstream.port)
        let client = try gateway.connect()
        client.send("GET /first HTTP/1.1\r\nHost: a\r\n\r\n")
        let first = try upstream.accept()
        _ = first.readMessage()
        first.send(Self.ok("first"))
        #expect(client.readMessage()?.bodyText == "first")

        // The pooled connection takes the next request and closes without a byte.
        client.send("GET /again HTTP/1.1\r\nHost: a\r\n\r\n")
        #expect(first.readMessage()?.startLine == "GET /again HTTP/1.1")
        first.close()
        let second = try upstream.accept()
        #expect(second.readMessage()?.startLine == "GET /again HTTP/1.1")
        second.send(Self.ok("retried"))
        #expect(client.readMessage()?.bodyText == "retried")

        // A POST is not repeated: the client learns the upstream closed.
        client.send("POST /once HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\nhi")
        #expect(second.readMessage()?.bodyText == "hi")
        second.close()
        let refused = try #require(client.readMessage())
        #expect(refused.status == 502)
        #expect(refused.bodyText.contains("closed the connection"))
        #expect(upstream.acceptedCount == 2)
    }

    @Test func anInvalidOrUnaskedUpstreamResponseIsA502() throws {
        let upstream = try ScriptedUpstream()
        let gateway = try Gateway(upstream: upstream.port)
        for bad in ["HTTP/1.1 200 OK\r\ncontent-length: 1\r\ncontent-length: 2\r\n\r\nxx",
                    "HTTP/1.1 101 Switching Protocols\r\nupgrade: h2c\r\nconnection: upgrade\r\n\r\n",
                    "NOT HTTP\r\n\r\n"] {
            let client = try gateway.connect()
            client.send("GET /x HTTP/1.1\r\nHost: a\r\n\r\n")
            let app = try upstream.accept()
            _ = app.readMessage()
            app.send(bad)
            let response = try #require(client.readMessage())
            #expect(response.status == 502, "\(bad)")
            #expect(response.bodyText.contains("invalid response"))
        }
    }

    // MARK: Tunnel

    @Test func aWebSocketUpgradeBecomesATunnelBothWays() throws {
        let upstream = try ScriptedUpstream()
        let gateway = try Gateway(upstream: upstream.port)
        let client = try gateway.connect()
        client.send("GET /ws HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: k\r\n\r\n")
        let app = try upstream.accept()
        let request = try #require(app.readMessage())
        #expect(request.header("upgrade") == "websocket")
        #expect(request.header("connection") == "upgrade")
        app.send("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
        let switched = try #require(client.readMessage())
        #expect(switched.status == 101)
        for round in 0..<3 {
            let up = Array("client frame \(round) ".utf8) + [0, 1, 2, 0xFF]
            client.send(bytes: up)
            #expect(app.read(count: up.count) == up)
            let down = Array("server frame \(round)\r\n\r\n".utf8)
            app.send(bytes: down)
            #expect(client.read(count: down.count) == down)
        }
        app.close()
        #expect(client.peerClosed())
    }

    // MARK: Header hygiene and framing

    @Test func hopByHopSpoofedAndForwardingHeadersAreRewritten() throws {
        let upstream = try ScriptedUpstream()
        let gateway = try Gateway(upstream: upstream.port)
        let client = try gateway.connect()
        client.send("""
        GET /h?q=1 HTTP/1.1\r
        Host: a.example\r
        X-User-Id: victim\r
        x_user_id: victim\r
        X-Auth-Provider: forged\r
        Connection: keep-alive, X-Secret\r
        X-Secret: s\r
        Keep-Alive: timeout=5\r
        TE: trailers\r
        Proxy-Connection: keep-alive\r
        X-Forwarded-For: 203.0.113.9\r
        X-Forwarded-Proto: https\r
        Forwarded: for=203.0.113.9\r
        X-Request-Id: chosen-by-client\r
        Upgrade: h2c\r
        HTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r
        X-Custom: kept\r
        \r

        """)
        let app = try upstream.accept()
        let request = try #require(app.readMessage())
        #expect(request.startLine == "GET /h?q=1 HTTP/1.1")
        let names = Set(request.fields.map { $0.name.lowercased() })
        for gone in ["x-user-id", "x_user_id", "x-auth-provider", "x-secret", "keep-alive", "te", "proxy-connection",
                     "forwarded", "upgrade", "http2-settings"] {
            #expect(!names.contains(gone), "\(gone) reached the upstream")
        }
        #expect(request.values("host") == ["a.example"])
        #expect(request.values("x-custom") == ["kept"])
        #expect(request.values("x-forwarded-for") == ["127.0.0.1"])
        #expect(request.values("x-forwarded-proto") == ["http"])
        #expect(request.values("x-forwarded-host") == ["a.example"])
        let id = try #require(request.header("x-request-id"))
        #expect(id.count == 32 && id.allSatisfy(\.isHexDigit))
        app.send("HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: keep-alive\r\nkeep-alive: timeout=9\r\n\r\n")
        let response = try #require(client.readMessage())
        #expect(response.header("keep-alive") == nil)
        #expect(response.header("connection") == nil)
    }

    @Test func chunkedBodiesAreReframedUpAndPassedDownOrDecodedForHTTP10() throws {
        let upstream = try ScriptedUpstream()
        let gateway = try Gateway(upstream: upstream.port)
        let client = try gateway.connect()
        client.send("POST /c HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\n\r\n")
        let app = try upstream.accept()
        let request = try #require(app.readMessage())
        #expect(request.header("transfer-encoding") == "chunked")
        #expect(request.bodyText == "hello world")
        #expect(!String(decoding: request.rawBody, as: UTF8.self).contains("ext"))
        let chunked = "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"
        app.send(chunked)
        let response = try #require(client.readMessage())
        #expect(response.header("transfer-encoding") == "chunked")
        #expect(String(decoding: response.rawBody, as: UTF8.self) == "3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n")

        let old = try gateway.connect()
        old.send("GET /c HTTP/1.0\r\nHost: a\r\nConnection: keep-alive\r\n\r\n")
        #expect(app.readMessage()?.startLine == "GET /c HTTP/1.1")
        app.send(chunked)
        let decoded = try #require(old.readMessage())
        #expect(decoded.header("transfer-encoding") == nil)
        #expect(decoded.header("connection") == "close")
        #expect(decoded.bodyText == "abcde")
    }

    @Test func expectContinueIsAnsweredByTheGatewayAndNotForwarded() throws {
        let upstream = try ScriptedUpstream()
        let gateway = try Gateway(upstream: upstream.port)
        let client = try gateway.connect()
        client.send("PUT /e HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 4\r\n\r\n")
        let interim = try #require(client.readMessage())
        #expect(interim.status == 100)
        client.send("data")
        let app = try upstream.accept()
        let request = try #require(app.readMessage())
        #expect(request.header("expect") == nil)
        #expect(request.bodyText == "data")
        app.send("HTTP/1.1 100 Continue\r\n\r\n" + Self.ok("done"))
        let response = try #require(client.readMessage())
        #expect(response.status == 200)
        #expect(response.bodyText == "done")
    }

    @Test func headResponsesCarryNoBodyAndTheConnectionStaysUsable() throws {
        let upstream = try ScriptedUpstream()
        let gateway = try Gateway(upstream: upstream.port)
        let client = try gateway.connect()
        client.send("HEAD /h HTTP/1.1\r\nHost: a\r\n\r\n")
        let app = try upstream.accept()
        #expect(app.readMessage()?.startLine == "HEAD /h HTTP/1.1")
        app.send("HTTP/1.1 200 OK\r\ncontent-length: 1234\r\n\r\n")
        let head = try #require(client.readMessage(bodyless: true))
        #expect(head.header("content-length") == "1234")
        client.send("GET /next HTTP/1.1\r\nHost: a\r\n\r\n")
        #expect(app.readMessage()?.startLine == "GET /next HTTP/1.1")
        app.send(Self.ok("next"))
        #expect(client.readMessage()?.bodyText == "next")
    }

    // MARK: Local answers

    @Test func malformedRequestsAre4xxWithAReasonAndNeverReachTheUpstream() throws {
        let upstream = try ScriptedUpstream()
        let gateway = try Gateway(upstream: upstream.port)
        let cases: [(String, Int)] = [
            ("GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400),
            ("GET / HTTP/1.1\r\n\r\n", 400),
            ("GET /a HTTP/1.1\r\nHost: a\r\nBad Name: x\r\n\r\n", 400),
            ("GET /a HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400),
            ("CONNECT a:443 HTTP/1.1\r\nHost: a\r\n\r\n", 405),
        ]
        for (request, status) in cases {
            let client = try gateway.connect()
            client.send(request)
            let response = client.readMessage()
            #expect(response?.status == status, "\(request.debugDescription)")
            #expect(response?.bodyText.isEmpty == false)
        }
        #expect(upstream.acceptedCount == 0)

        // A body error found while streaming: the head already left, so the upstream
        // connection is dropped (never reused) and the client gets the 400.
        let client = try gateway.connect()
        client.send("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n")
        let app = try upstream.accept()
        #expect(app.readMessage(bodyless: true)?.startLine == "POST / HTTP/1.1")
        client.send("zz\r\n")
        #expect(client.readMessage()?.status == 400)
        #expect(app.peerClosed())
    }

    @Test func requiredAuthWithoutProvidersIs401AndNotForwarded() throws {
        let upstream = try ScriptedUpstream()
        let gateway = try Gateway(upstream: upstream.port, auth: .required)
        let client = try gateway.connect()
        client.send("GET /private HTTP/1.1\r\nHost: a\r\n\r\n")
        let response = try #require(client.readMessage())
        #expect(response.status == 401)
        #expect(response.header("www-authenticate")?.hasPrefix("Bearer") == true)
        // The refusal kept the connection open for the next request.
        client.send("GET /private HTTP/1.1\r\nHost: a\r\n\r\n")
        #expect(client.readMessage()?.status == 401)
        #expect(upstream.acceptedCount == 0)
    }

    /// Whichever loop is waiting takes a new connection, so a burst of long-lived ones can
    /// pile up on one loop; a loop that accepts one while it has 3 or more, and more than
    /// another, hands it over. However the accepts fell, 40 connections end 20 and 20 (give
    /// or take one or two crossing while on their way), and every connection is served
    /// wherever it ended.
    @Test func acceptedConnectionsAreSpreadOverTheLoops() throws {
        let gateway = try Gateway(upstream: 9, auth: .required, loops: 2)
        var clients: [RawConnection] = []
        for _ in 0..<40 { clients.append(try gateway.connect()) }
        let deadline = Date().addingTimeInterval(5)
        while gateway.server.openConnectionsByLoop.reduce(0, +) < 40 && Date() < deadline { usleep(10_000) }
        let counts = gateway.server.openConnectionsByLoop
        #expect(counts.reduce(0, +) == 40)
        #expect(counts.allSatisfy { $0 >= 19 }, "\(counts)")
        for client in clients {
            client.send("GET /x HTTP/1.1\r\nHost: a.example\r\n\r\n")
            #expect(try #require(client.readMessage()).status == 401)
        }
    }

    /// The loops listen on one socket (see `Listener`): while the gateway runs, no other
    /// socket can bind its port, not even one asking for `SO_REUSEPORT` (which would take a
    /// share of the connections); both loops serve; after shutdown the port is free again
    /// (no loop kept a descriptor of the socket open).
    @Test func theLoopsShareOneListeningSocket() throws {
        var gateway: Gateway? = try Gateway(upstream: 9, auth: .required, loops: 2)
        let port = try #require(gateway?.port)
        #expect(Loopback.bindError(port: port, reusePort: true) == EADDRINUSE)
        var clients: [RawConnection] = []
        for _ in 0..<8 { clients.append(try RawConnection(port: port)) }
        let deadline = Date().addingTimeInterval(5)
        while gateway!.server.openConnectionsByLoop.reduce(0, +) < 8 && Date() < deadline { usleep(10_000) }
        #expect(gateway!.server.openConnectionsByLoop.allSatisfy { $0 > 0 }, "\(gateway!.server.openConnectionsByLoop)")
        for client in clients {
            client.send("GET /x HTTP/1.1\r\nHost: a.example\r\n\r\n")
            #expect(try #require(client.readMessage()).status == 401)
        }
        clients.removeAll()
        gateway = nil
        #expect(Loopback.bindError(port: port, reusePort: false) == 0)
    }

    @Test func aLoopHandsANewConnectionToTheLeastLoadedLoopOnlyFromThreeUp() {
        #expect(ProxyServer.handOffTarget(load: 0, others: [0]) == nil)
        #expect(ProxyServer.handOffTarget(load: 2, others: [0]) == nil)   // below the floor: no hop
        #expect(ProxyServer.handOffTarget(load: 3, others: [0]) == 0)
        #expect(ProxyServer.handOffTarget(load: 3, others: [2]) == 0)
        #expect(ProxyServer.handOffTarget(load: 3, others: [3]) == nil)   // level: stays
        #expect(ProxyServer.handOffTarget(load: 5, others: [9, 4, 2, 2]) == 2)
        #expect(ProxyServer.handOffTarget(load: 5, others: [5, 6]) == nil)
        // Whatever loop the kernel picks, the loads never drift apart by more than one from
        // the floor up: simulated over every 12-connection arrival order for two loops.
        for order in 0..<(1 << 12) {
            var loads = [0, 0]
            for bit in 0..<12 {
                let picked = order >> bit & 1
                let target = ProxyServer.handOffTarget(load: loads[picked], others: [loads[1 - picked]]).map { _ in 1 - picked } ?? picked
                loads[target] += 1
            }
            #expect(abs(loads[0] - loads[1]) <= 1 || min(loads[0], loads[1]) == 0 && max(loads[0], loads[1]) < 3, "\(loads)")
        }
    }

    @Test func anUpstreamThatRefusesConnectionsIs502AndOneThatNeverAnswersIs504() throws {
        let closedPort = Loopback.freePort()
        let refusing = try Gateway(upstream: closedPort)
        let client = try refusing.connect()
        client.send("GET /x HTTP/1.1\r\nHost: a\r\n\r\n")
        #expect(client.readMessage()?.status == 502)

        let upstream = try ScriptedUpstream()
        let silent = try Gateway(upstream: upstream.port) { $0.upstreams[0].responseTimeout = 0.5 }
        let waiting = try silent.connect()
        waiting.send("GET /slow HTTP/1.1\r\nHost: a\r\n\r\n")
        let app = try upstream.accept()
        _ = app.readMessage()
        let response = try #require(waiting.readMessage())
        #expect(response.status == 504)
    }
}
