import Foundation
import PortcullisTestSupport
import Testing

/// `Upgrade` (WebSocket) pass-through: after the upstream's 101 the gateway
/// relays raw bytes both ways, untouched, on an authenticated route too.
@Suite(.serialized)
struct UpgradeEndToEndTests {
    @Test func upgradedConnectionRelaysBytesBothWays() throws {
        let upstream = try EchoUpstream()
        let g = try GatewayProcess("""
        providers:
          - {name: app, type: hs256, secret: "\(AuthFixtures.appSecret)"}
        upstreams:
          app: {url: "http://127.0.0.1:\(upstream.port)"}
        routes:
          - {path: /ws, upstream: app, auth: required}
        """)
        let credential = try g.mint(["--provider", "app"])

        let c = try RawConnection(port: g.port)
        c.send("GET /ws/upgrade HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\(credential)\r\n\r\n")
        let head = c.read(until: "\r\n\r\n")
        #expect(head.hasPrefix("HTTP/1.1 101"), "\(head)")
        #expect(head.lowercased().contains("upgrade: websocket"))
        // Bytes that are not HTTP now pass unchanged in both directions, several times.
        for frame in ["\u{81}\u{05}hello", "binary\u{00}\u{01}\u{02}frame", String(repeating: "x", count: 100_000) + "END"] {
            c.send(frame)
            let echoed = c.read(until: frame.suffix(5).description)
            #expect(echoed == frame, "echoed \(echoed.count) of \(frame.count) bytes")
        }
    }

    @Test func upgradeWithoutCredentialIsRefusedBeforeReachingTheApp() throws {
        let upstream = try EchoUpstream()
        let g = try GatewayProcess("""
        providers:
          - {name: app, type: hs256, secret: "\(AuthFixtures.appSecret)"}
        upstreams:
          app: {url: "http://127.0.0.1:\(upstream.port)"}
        routes:
          - {path: /ws, upstream: app, auth: required}
        """)
        let c = try RawConnection(port: g.port)
        c.send("GET /ws/upgrade HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
        let response = c.readResponses(1).first
        #expect(response?.status == 401)
        #expect(try upstream.seen().isEmpty)
    }
}
