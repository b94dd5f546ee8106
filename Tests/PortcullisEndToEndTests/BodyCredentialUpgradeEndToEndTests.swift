import Foundation
import PortcullisTestSupport
import Testing

/// The class behind review finding #33.1: the component that decides a request's kind and
/// the ones that authenticate and forward it see the same request. On a body-credential
/// route no `Upgrade`/`Connection`/`Expect` form, framing or HTTP/2 shape lets a request be
/// decided on its head: a revoked or forged body token never reaches the app, however the
/// head is dressed, and a bodiless GET WebSocket handshake is the only request decided on
/// its head. Each request carries the attacker's own valid access token in `Authorization`.
@Suite(.serialized) struct BodyCredentialUpgradeEndToEndTests {
    static let secret = AppFitEndToEndTests.secret
    static let adminToken = "admin-token-0123456789abcdef"

    /// Every head dressing of the review and its variants, for a POST with `body`.
    static func dressings(_ body: String, bearer: String) -> [(name: String, head: String)] {
        let auth = "Authorization: Bearer \(bearer)\r\n"
        let length = "Content-Length: \(body.utf8.count)\r\n"
        let key = "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
        return [
            ("Upgrade: h2c", "Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAoAAAAAIAAAAA\r\n\(auth)\(length)"),
            ("Upgrade: foo", "Connection: Upgrade\r\nUpgrade: foo\r\n\(auth)\(length)"),
            ("Upgrade: websocket without key", "Connection: Upgrade\r\nUpgrade: websocket\r\n\(auth)\(length)"),
            ("Upgrade: websocket with key and version", "Connection: Upgrade\r\nUpgrade: websocket\r\n\(key)\(auth)\(length)"),
            ("Connection: keep-alive, Upgrade", "Connection: keep-alive, Upgrade\r\nUpgrade: websocket\r\n\(auth)\(length)"),
            ("case forms", "CONNECTION: UPGRADE\r\nupgrade: WebSocket\r\n\(auth)\(length)"),
            ("two Upgrade fields", "Connection: upgrade\r\nUpgrade: foo\r\nUpgrade: websocket\r\n\(auth)\(length)"),
        ]
    }

    static func request(_ port: UInt16, method: String = "POST", path: String, head: String, body: String) -> HTTPResponse? {
        guard let c = try? RawConnection(port: port) else { return nil }
        defer { c.close() }
        c.send("\(method) \(path) HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\(head)\r\n\(body)")
        return c.readResponses(1).first
    }

    @Test func noHeadDressingSkipsTheBodyCredential() throws {
        let upstream = try EchoUpstream()
        let gateway = try GatewayProcess("""
        providers:
          - {name: app, type: hs256, secret: "\(Self.secret)"}
        upstreams:
          app: {url: "http://127.0.0.1:\(upstream.port)"}
        routes:
          - {path: /auth/refresh, upstream: app, auth: required, credential: {json_field: token, max_body: 4KiB}}
          - {path: /auth/optional, upstream: app, auth: optional, credential: {json_field: token, max_body: 4KiB}}
          - {path: /, upstream: app, auth: required}
        """, adminToken: Self.adminToken, listen: "  - {address: \"127.0.0.1:PORT\", h2c: true}")
        let attacker = try AppFitEndToEndTests.mint(#"{"sub": "attacker", "jti": "attacker-1", "exp": "+3600", "iat": "-5"}"#)
        let victim = try AppFitEndToEndTests.mint(#"{"sub": "victim", "jti": "victim-1", "exp": "+3600", "iat": "-5"}"#)
        let forged = try AppFitEndToEndTests.mint(#"{"sub": "victim", "exp": "+3600"}"#, secret: "another-secret-0123456789abcdef0123456")
        #expect(E2E.curl(["-X", "POST", "-H", "Authorization: Bearer \(Self.adminToken)", "-d", #"{"jti":"victim-1"}"#,
                          "http://127.0.0.1:\(gateway.adminPort)/revocations"]).status == 201)
        let revokedBody = #"{"token": "\#(victim)"}"#
        let forgedBody = #"{"token": "\#(forged)"}"#
        let emptyBody = #"{"device": "ios"}"#

        var covered = 0
        for path in ["/auth/refresh", "/auth/optional"] {
            for (body, expected) in [(revokedBody, 401), (forgedBody, 401), (emptyBody, path == "/auth/refresh" ? 400 : 200)] {
                for (name, head) in Self.dressings(body, bearer: attacker) {
                    let response = Self.request(gateway.port, path: path, head: head, body: body)
                    #expect(response?.status == expected, "\(path) \(name) \(body.prefix(12)): \(String(describing: response?.status))")
                    covered += 1
                }
            }
        }
        // The optional route let the bodies without a member through without identity: no
        // Upgrade and no attacker identity reached the app.
        let anonymous = try upstream.seen()
        #expect(anonymous.count == Self.dressings("", bearer: "").count && anonymous.allSatisfy { $0 == "/auth/optional" },
                "only the optional route's member-less bodies were forwarded: \(anonymous)")

        // A GET WebSocket handshake with a body is no handshake: its body decides.
        for framing in ["Content-Length: \(revokedBody.utf8.count)\r\n", "Transfer-Encoding: chunked\r\n"] {
            let body = framing.hasPrefix("Transfer") ? "\(String(revokedBody.utf8.count, radix: 16))\r\n\(revokedBody)\r\n0\r\n\r\n" : revokedBody
            let response = Self.request(gateway.port, method: "GET", path: "/auth/refresh",
                                         head: "Connection: Upgrade\r\nUpgrade: websocket\r\nAuthorization: Bearer \(attacker)\r\n\(framing)",
                                         body: body)
            #expect(response?.status == 401, "GET handshake with \(framing): \(String(describing: response?.status))")
        }

        // Expect: 100-continue with an Upgrade: the gateway asks for the body and decides on it.
        do {
            let c = try RawConnection(port: gateway.port)
            c.send("POST /auth/refresh HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nExpect: 100-continue\r\n"
                   + "Authorization: Bearer \(attacker)\r\nContent-Length: \(revokedBody.utf8.count)\r\n\r\n")
            let interim = c.read(until: "\r\n\r\n")
            #expect(interim.hasPrefix("HTTP/1.1 100"), "\(interim)")
            c.send(revokedBody)
            #expect(c.readResponses(1).first?.status == 401)
            c.close()
        }

        // A chunked body split across reads (every piece its own write), with an Upgrade.
        do {
            let c = try RawConnection(port: gateway.port)
            c.send("POST /auth/refresh HTTP/1.1\r\nHost: x\r\nConnection: keep-alive, Upgrade\r\nUpgrade: h2c\r\n"
                   + "Authorization: Bearer \(attacker)\r\nTransfer-Encoding: chunked\r\n\r\n")
            let bytes = Array(revokedBody.utf8)
            for piece in stride(from: 0, to: bytes.count, by: 7) {
                let slice = bytes[piece..<min(bytes.count, piece + 7)]
                c.send(String(slice.count, radix: 16) + "\r\n")
                c.send(String(decoding: slice, as: UTF8.self) + "\r\n")
            }
            c.send("0\r\n\r\n")
            #expect(c.readResponses(1).first?.status == 401)
            c.close()
        }
        #expect(try upstream.seen().isEmpty, "no refused request reached the app")

        // HTTP/2: extended CONNECT (:protocol) never reaches the app, and a body in many
        // DATA frames is read whole and decides.
        let connect = try H2Client.run(gateway.port, ["data-plan", "--raw-pseudo",
            #"[[":method","CONNECT"],[":protocol","websocket"],[":scheme","http"],[":path","/auth/refresh"],[":authority","x"]]"#,
            "--header", "authorization: Bearer \(attacker)", "--body-text", revokedBody, "--frames", "5,5,5,500es"])
        let connectAnswer = H2Client.responses(connect).first
        let connectStatus = connectAnswer?["status"] as? Int
        #expect(connectStatus.map { $0 >= 400 } ?? true, "extended CONNECT: \(connect)")
        let frames = Array(repeating: "3", count: revokedBody.utf8.count / 3 + 1).joined(separator: ",") + ",0es"
        for (body, expected) in [(revokedBody, 401), (forgedBody, 401)] {
            let result = try H2Client.run(gateway.port, ["data-plan", "--path", "/auth/refresh",
                "--header", "authorization: Bearer \(attacker)", "--header", "content-type: application/json",
                "--body-text", body, "--frames", frames])
            #expect(H2Client.responses(result).first?["status"] as? Int == expected, "h2 DATA frames: \(result)")
        }
        #expect(try upstream.seen().isEmpty, "no HTTP/2 request reached the app")

        // The body's valid token passes with every dressing, as a plain POST: the app sees
        // the body's user, no Upgrade, no attacker.
        let valid = try AppFitEndToEndTests.mint(#"{"sub": "rvu-user", "jti": "ok-1", "exp": "+3600", "iat": "-5"}"#)
        let validBody = #"{"token": "\#(valid)"}"#
        for (name, head) in Self.dressings(validBody, bearer: attacker) {
            guard let response = Self.request(gateway.port, path: "/auth/refresh", head: head, body: validBody) else {
                Issue.record("\(name): no answer"); continue
            }
            #expect(response.status == 200, "\(name): \(response.status)")
            let echo = try Echo(response.body)
            #expect(echo.method == "POST" && echo.body == validBody, "\(name)")
            #expect(echo.values("x-user-id") == ["rvu-user"], "\(name)")
            #expect(!echo.has("upgrade") && !echo.has("http2-settings"), "\(name)")
            #expect(!echo.values("connection").contains { $0.lowercased().contains("upgrade") }, "\(name)")
        }
        #expect(covered == 2 * 3 * Self.dressings("", bearer: "").count)
    }

    /// A real WebSocket handshake (bodiless GET) on a body-credential route is decided on its
    /// head: the Bearer token, and the tunnel opens; a revoked one is refused.
    @Test func aBodilessWebSocketHandshakeIsDecidedOnItsHead() throws {
        let upstream = try EchoUpstream()
        let gateway = try GatewayProcess("""
        providers:
          - {name: app, type: hs256, secret: "\(Self.secret)"}
        upstreams:
          app: {url: "http://127.0.0.1:\(upstream.port)"}
        routes:
          - {path: /ws, upstream: app, auth: required, credential: {json_field: token, max_body: 4KiB}}
        """, adminToken: Self.adminToken)
        let token = try AppFitEndToEndTests.mint(#"{"sub": "ws-user", "jti": "ws-1", "exp": "+3600", "iat": "-5"}"#)
        let handshake = "GET /ws/upgrade HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
            + "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
        let c = try RawConnection(port: gateway.port)
        c.send(handshake + "Authorization: Bearer \(token)\r\n\r\n")
        let head = c.read(until: "\r\n\r\n")
        #expect(head.hasPrefix("HTTP/1.1 101"), "\(head)")
        c.send("\u{81}\u{05}hello")
        #expect(c.read(until: "hello") == "\u{81}\u{05}hello")
        c.close()
        #expect(E2E.curl(["-X", "POST", "-H", "Authorization: Bearer \(Self.adminToken)", "-d", #"{"jti":"ws-1"}"#,
                          "http://127.0.0.1:\(gateway.adminPort)/revocations"]).status == 201)
        let refused = try RawConnection(port: gateway.port)
        refused.send(handshake + "Authorization: Bearer \(token)\r\n\r\n")
        #expect(refused.readResponses(1).first?.status == 401)
    }
}
