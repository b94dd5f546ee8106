import Foundation
import PortcullisTestSupport
import Testing

/// What the gateway forwards, per class: the upstream always gets exactly one valid
/// `Host`; only WebSocket may be upgraded, `HTTP2-Settings` never leaves, and a 101
/// nobody asked for never becomes a tunnel. Raw requests, checked at a recording upstream.
@Suite(.serialized) struct ForwardingHardeningEndToEndTests {
    static func gateway(_ upstream: EchoUpstream, extra: String = "") throws -> GatewayProcess {
        try GatewayProcess("""
        upstreams:
          app: {url: "http://127.0.0.1:\(upstream.port)"\(extra)}
        routes:
          - {path: /, upstream: app, auth: none}
        """)
    }

    static func echo(_ g: GatewayProcess, _ request: String) throws -> (status: Int, echo: Echo?) {
        let c = try RawConnection(port: g.port)
        c.send(request)
        guard let response = c.readResponses(1).first else { throw TestFailure("no response to \(request)") }
        return (response.status, response.status == 200 ? try Echo(response.body) : nil)
    }

    @Test func theUpstreamAlwaysGetsExactlyOneValidHost() throws {
        let upstream = try EchoUpstream()
        let g = try Self.gateway(upstream)
        // HTTP/1.0 without Host: the upstream's own authority.
        let bare = try Self.echo(g, "GET /ten HTTP/1.0\r\n\r\n")
        #expect(bare.status == 200)
        #expect(bare.echo?.values("host") == ["127.0.0.1:\(upstream.port)"])
        // HTTP/1.0 with Host, HTTP/1.1 with Host: that one, once.
        #expect(try Self.echo(g, "GET /ten HTTP/1.0\r\nHost: app.example\r\n\r\n").echo?.values("host") == ["app.example"])
        #expect(try Self.echo(g, "GET /x HTTP/1.1\r\nHost: app.example:8443\r\n\r\n").echo?.values("host") == ["app.example:8443"])
        // Absolute form: its authority wins over a different Host, once.
        let absolute = try Self.echo(g, "GET http://abs.example/x HTTP/1.1\r\nHost: other.example\r\n\r\n")
        #expect(absolute.echo?.values("host") == ["abs.example"])
        // Missing on 1.1, repeated (even identical), invalid in any way: 400, nothing forwarded.
        for bad in ["GET / HTTP/1.1\r\n\r\n",
                    "GET / HTTP/1.1\r\nHost: a\r\nHost: a\r\n\r\n",
                    "GET / HTTP/1.0\r\nHost: a\r\nHost: b\r\n\r\n",
                    "GET / HTTP/1.1\r\nHost: a b\r\n\r\n",
                    "GET / HTTP/1.1\r\nHost: user@a\r\n\r\n",
                    "GET / HTTP/1.1\r\nHost: a:123456\r\n\r\n",
                    "GET / HTTP/1.1\r\nHost: a/b\r\n\r\n",
                    "GET / HTTP/1.1\r\nHost: \r\n\r\n",
                    "GET / HTTP/1.0\r\nHost: [::1\r\n\r\n"] {
            #expect(try Self.echo(g, bad).status == 400, "\(bad.debugDescription)")
        }
        #expect(try upstream.seen() == ["/ten", "/ten", "/x", "/x"])
    }

    @Test func hostHeaderUpstreamAlsoCoversHTTP10WithoutHost() throws {
        let upstream = try EchoUpstream()
        let g = try Self.gateway(upstream, extra: ", host_header: upstream")
        #expect(try Self.echo(g, "GET / HTTP/1.0\r\n\r\n").echo?.values("host") == ["127.0.0.1:\(upstream.port)"])
        let withHost = try Self.echo(g, "GET / HTTP/1.1\r\nHost: public.example\r\n\r\n").echo
        #expect(withHost?.values("host") == ["127.0.0.1:\(upstream.port)"])
        #expect(withHost?.values("x-forwarded-host") == ["public.example"])
    }

    @Test func onlyWebSocketIsUpgradedAndHTTP2SettingsNeverLeaves() throws {
        let upstream = try EchoUpstream()
        let g = try Self.gateway(upstream)
        // h2c (any spelling) and other protocols: the request goes on as plain HTTP/1.1.
        for upgrade in ["h2c", "H2C", "h2c, foo", "TLS/1.2", "websocket/13", "websocketx"] {
            let request = "GET /plain HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: \(upgrade)\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n\r\n"
            let (status, echo) = try Self.echo(g, request)
            #expect(status == 200, "\(upgrade)")
            #expect(echo?.has("upgrade") == false, "\(upgrade): Upgrade forwarded")
            #expect(echo?.has("http2-settings") == false, "\(upgrade): HTTP2-Settings forwarded")
            #expect(echo?.values("connection").contains { $0.lowercased().contains("upgrade") } == false)
        }
        // HTTP2-Settings alone, or named in Connection, never leaves either.
        let settingsOnly = try Self.echo(g, "GET /plain HTTP/1.1\r\nHost: x\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n\r\n")
        #expect(settingsOnly.echo?.has("http2-settings") == false)
    }

    @Test func aSwitchNobodyAskedForIsA502NotATunnel() throws {
        let upstream = try EchoUpstream()
        let g = try Self.gateway(upstream)
        // The upstream answers 101 on /upgrade whatever it was sent; the gateway forwarded
        // no upgrade, so the 101 is refused and nothing is relayed afterwards.
        for upgrade in ["h2c", nil] {
            let c = try RawConnection(port: g.port)
            let field = upgrade.map { "Connection: Upgrade\r\nUpgrade: \($0)\r\n" } ?? ""
            c.send("GET /upgrade HTTP/1.1\r\nHost: x\r\n\(field)\r\n")
            let response = c.readResponses(1).first
            #expect(response?.status == 502, "\(String(describing: upgrade))")
            c.send("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
            #expect(!c.readAll().contains("PRI *"), "bytes after the refused switch were relayed")
        }
        // websocket listed among others: upgraded, as websocket only.
        let c = try RawConnection(port: g.port)
        c.send("GET /upgrade HTTP/1.1\r\nHost: x\r\nConnection: keep-alive, Upgrade\r\nUpgrade: h2c, WebSocket\r\n\r\n")
        let head = c.read(until: "\r\n\r\n")
        #expect(head.hasPrefix("HTTP/1.1 101"), "\(head)")
        #expect(head.lowercased().contains("upgrade: websocket"))
        c.send("ping-frame")
        #expect(c.read(until: "ping-frame").hasSuffix("ping-frame"))
    }
}

/// Two credentials in one request are `invalid_request` whatever their kind; a chunked
/// session cookie with a chunk missing is an invalid token.
@Suite(.serialized) struct AmbiguousCookieEndToEndTests {
    static func cookieValue(_ header: String) -> (name: String, value: String) {
        let pair = header.dropFirst("Cookie: ".count)
        let equals = pair.firstIndex(of: "=")!
        return (String(pair[..<equals]), String(pair[pair.index(after: equals)...]))
    }

    @Test func twoSessionsInOneRequestAre400AndAMissingChunkIs401() throws {
        let upstream = try EchoUpstream()
        let g = try GatewayProcess("""
        \(AuthFixtures.providers)
        upstreams:
          app: {url: "http://127.0.0.1:\(upstream.port)"}
        routes:
          - {path: /, upstream: app, auth: required}
        """)
        let v4Alice = Self.cookieValue(try AuthFixtures.mint(g, "web", ["--sub", "alice"]))
        let v4Bob = Self.cookieValue(try AuthFixtures.mint(g, "web", ["--sub", "bob"]))
        let v5Bob = Self.cookieValue(try AuthFixtures.mint(g, "webv5", ["--sub", "bob"]))
        func get(_ cookie: String) -> (Int, String) {
            let (_, out, _) = E2E.run("/usr/bin/curl", ["-s", "-D", "-", "-o", "/dev/null", "-H", "Cookie: \(cookie)", "\(g.url)/who"])
            return (Int(out.split(separator: " ").dropFirst().first ?? "") ?? 0, out)
        }
        // One session, also repeated identically or beside an emptied one: accepted.
        #expect(get("\(v4Alice.name)=\(v4Alice.value)").0 == 200)
        #expect(get("\(v4Alice.name)=\(v4Alice.value); \(v4Alice.name)=\(v4Alice.value)").0 == 200)
        #expect(get("\(v4Alice.name)=\(v4Alice.value); \(v5Bob.name)=").0 == 200)
        // Two sessions, however spelled: 400 invalid_request, nothing forwarded.
        let ambiguous = [
            "\(v4Alice.name)=\(v4Alice.value); \(v5Bob.name)=\(v5Bob.value)",          // NextAuth v4 + Auth.js v5
            "\(v4Alice.name)=\(v4Alice.value); \(v4Bob.name)=\(v4Bob.value)",          // one name, two values
            "__Secure-\(v4Alice.name)=\(v4Alice.value); \(v4Alice.name)=\(v4Alice.value)",  // secure and plain names
            "\(v4Alice.name)=\(v4Alice.value); \(v4Alice.name).0=\(v4Bob.value)",      // whole and a chunk
        ]
        for cookie in ambiguous {
            let (status, head) = get(cookie)
            #expect(status == 400, "\(cookie.prefix(80))")
            #expect(head.contains("invalid_request"), "\(head)")
        }
        // A chunk missing: 401 invalid_token.
        let value = Array(v5Bob.value)
        let gap = "\(v5Bob.name).0=\(String(value[0..<40])); \(v5Bob.name).2=\(String(value[40...]))"
        let (status, head) = get(gap)
        #expect(status == 401, "\(head)")
        #expect(head.contains("invalid_token"))
        #expect(try upstream.seen() == ["/who", "/who", "/who"])
    }
}

/// `max_connections` and `max_pending` are totals for the upstream across the
/// gateway's loops, whichever loop each client lands on.
@Suite(.serialized) struct PoolLimitEndToEndTests {
    @Test func oneConnectionAndOneWaiterAcrossTwoLoops() throws {
        let upstream = try EchoUpstream()
        let g = try GatewayProcess("""
        upstreams:
          app: {url: "http://127.0.0.1:\(upstream.port)", max_connections: 1, max_pending: 1, connect_timeout: 5s}
        routes:
          - {path: /, upstream: app, auth: none}
        """, workers: 2)
        for round in 0..<3 {
            // Six clients on six connections (on either loop), all
            // connected first, then six requests sent back to back.
            let clients = try (0..<6).map { _ in try RawConnection(port: g.port, timeout: 15) }
            for (i, c) in clients.enumerated() {
                c.send("GET /slow/1500/r\(round)-\(i) HTTP/1.1\r\nHost: x\r\n\r\n")
            }
            let result = clients.map { $0.readResponses(1).first?.status ?? 0 }.sorted()
            #expect(result == [200, 200, 503, 503, 503, 503], "round \(round): one running, one waiting, the rest refused: \(result)")
        }
        // Afterwards the pool serves normally (no slot leaked).
        #expect(E2E.curl(["\(g.url)/after"]).status == 200)
        #expect(E2E.curl(["\(g.url)/after"]).status == 200)
    }
}

/// Session cookies read as the apps' frameworks read them: NextAuth and Auth.js take every
/// cookie whose name starts with the session name, and the `cookie` library trims names. A
/// cookie an app would read as a session is verified, refused as ambiguous, or stripped
/// before forwarding; never passed on unverified.
@Suite(.serialized) struct SessionCookieSpellingEndToEndTests {
    static func gateway(_ upstream: EchoUpstream) throws -> GatewayProcess {
        try GatewayProcess("""
        \(AuthFixtures.providers)
        upstreams:
          app: {url: "http://127.0.0.1:\(upstream.port)"}
        routes:
          - {path: /api, upstream: app, auth: required, providers: [app]}
          - {path: /, upstream: app, auth: required}
        """)
    }

    /// Status, and the Cookie field the app got (nil: none, or not forwarded).
    static func get(_ g: GatewayProcess, _ path: String, cookie: String, bearer: String? = nil) -> (Int, String?) {
        var arguments = ["-s", "-w", "\n%{http_code}", "-H", "Cookie: \(cookie)"]
        if let bearer { arguments += ["-H", "Authorization: Bearer \(bearer)"] }
        let (_, out, _) = E2E.run("/usr/bin/curl", arguments + ["\(g.url)\(path)"])
        let lines = out.split(separator: "\n")
        let status = Int(lines.last ?? "") ?? 0
        let body = lines.dropLast().joined(separator: "\n")
        guard let object = try? JSONSerialization.jsonObject(with: Data(body.utf8)) as? [String: Any],
              let headers = object["headers"] as? [[String]] else { return (status, nil) }
        return (status, headers.first { $0.first?.lowercased() == "cookie" }?.last)
    }

    @Test func spellingsAnAppReadsAreVerifiedRefusedOrStripped() throws {
        let upstream = try EchoUpstream()
        let g = try Self.gateway(upstream)
        let alice = AmbiguousCookieEndToEndTests.cookieValue(try AuthFixtures.mint(g, "web", ["--sub", "alice"]))
        let bob = AmbiguousCookieEndToEndTests.cookieValue(try AuthFixtures.mint(g, "web", ["--sub", "bob"]))
        let name = alice.name  // next-auth.session-token
        // A trimmed name is the session itself: verified.
        #expect(Self.get(g, "/who", cookie: "\(name) =\(alice.value)").0 == 200)
        #expect(Self.get(g, "/who", cookie: " \(name)\t= \(alice.value) ").0 == 200)
        // Another spelling of the session beside it, which NextAuth would read too: 400.
        for other in ["\(name).x", "\(name)-2", "\(name).", "__Host-\(name)", "__SECURE-\(name).0"] {
            let (status, _) = Self.get(g, "/who", cookie: "\(name)=\(alice.value); \(other)=\(bob.value)")
            #expect(status == 400, "\(other)")
        }
        // Alone, such a spelling is still a session the app would read: refused, never forwarded.
        #expect(Self.get(g, "/who", cookie: "\(name).x=\(bob.value)").0 == 400)
        // An emptied one (what a sign-out leaves) is no session.
        #expect(Self.get(g, "/who", cookie: "\(name)=\(alice.value); \(name).x=").0 == 200)
        // A route that does not verify cookies (Bearer from `app` only): the Bearer user
        // passes, and the app never sees a session cookie, however it is spelled.
        let token = try AuthFixtures.mint(g, "app", ["--sub", "carol"]).replacingOccurrences(of: "Authorization: Bearer ", with: "")
        let (status, cookie) = Self.get(g, "/api/who", cookie: "theme=dark; \(name) =\(bob.value); \(name).x=\(bob.value); lang=en",
                                        bearer: token)
        #expect(status == 200)
        #expect(cookie == "theme=dark; lang=en", "\(cookie ?? "none")")
        // Other cookies are untouched when no session cookie is present.
        #expect(Self.get(g, "/api/who", cookie: "theme=dark; lang=en", bearer: token).1 == "theme=dark; lang=en")
    }
}
