import Foundation
import Testing
import PortcullisTestSupport

/// The real gateway binary in front of real Python upstream processes, driven by
/// curl and raw loopback sockets.
@Suite(.serialized)
struct ProxyEndToEndTests {
    let upstream: EchoUpstream
    let gateway: GatewayProcess

    init() throws {
        upstream = try EchoUpstream(name: "visits")
        gateway = try GatewayProcess("""
        upstreams:
          visits: {url: "http://127.0.0.1:\(upstream.port)", max_connections: 4, response_timeout: 2s}
        routes:
          - {path: /api/visits, upstream: visits, auth: required}
          - {path: /public, upstream: visits, auth: none}
          - {path: /stripped, upstream: visits, auth: none, strip_prefix: true}
        identity:
          user_id_header: X-User-Id
          claims: {email: X-User-Email}
        """)
    }

    @Test func forwardsToTheUpstreamWithForwardingHeaders() throws {
        let (status, body) = E2E.curl(["-H", "X-Forwarded-For: 6.6.6.6", "\(gateway.url)/public/hello?x=1"])
        #expect(status == 200)
        let echo = try Echo(body)
        #expect(echo.path == "/public/hello?x=1")
        #expect(echo.values("X-Forwarded-For") == ["127.0.0.1"])  // an untrusted client's XFF is replaced
        #expect(echo.values("X-Forwarded-Proto") == ["http"])
        #expect(echo.values("X-Request-Id").first?.count == 32)
    }

    @Test func stripsEverySpellingOfIdentityHeadersOnPublicRoutes() throws {
        let (status, body) = E2E.curl([
            "-H", "X-User-Id: admin", "-H", "x_user_id: admin2", "-H", "X-USER-EMAIL: a@b.c",
            "-H", "X-Auth-Provider: google", "-H", "X_Auth_Provider: x", "\(gateway.url)/public/me"])
        #expect(status == 200)
        let echo = try Echo(body)
        for name in ["X-User-Id", "x_user_id", "X-User-Email", "X-Auth-Provider", "X_Auth_Provider"] {
            #expect(!echo.has(name), "\(name) reached the upstream")
        }
    }

    /// Fields apps and frameworks trust to name the client, the URL or the method never come
    /// from a client (X-Original-URL routing bypasses, method overrides, a spoofed X-Real-IP).
    @Test func stripsFieldsAppsTrustForTheClientTheURLOrTheMethod() throws {
        let names = ["X-Real-IP", "X-Original-URL", "X-Original-Host", "X-Rewrite-URL", "X-HTTP-Method-Override",
                     "X-HTTP-Method", "X-Method-Override", "x_real_ip", "X_Original_Url"]
        let (status, body) = E2E.curl(names.flatMap { ["-H", "\($0): /api/visits/1"] } + ["\(gateway.url)/public/page"])
        #expect(status == 200)
        let echo = try Echo(body)
        for name in names { #expect(!echo.has(name), "\(name) reached the upstream") }
    }

    @Test func protectedRouteWithoutCredentialIsRefusedAndNeverForwarded() throws {
        _ = try upstream.seen()
        let c = try RawConnection(port: gateway.port)
        c.send("GET /api/visits/1 HTTP/1.1\r\nHost: x\r\nX-User-Id: 42\r\n\r\n")
        let r = c.readResponses(1)
        #expect(r.first?.status == 401)
        #expect(r.first?.header("WWW-Authenticate") == "Bearer realm=\"portcullis\"")
        #expect(r.first?.body.contains("\"error\"") == true)
        #expect(try upstream.seen().isEmpty)
    }

    @Test(arguments: [
        "/public/../api/visits", "/public/%2e%2e/api/visits", "/public/..%2Fapi/visits",
        "//api//visits", "/public\\..\\api\\visits", "/API/visits/../visits/",
    ])
    func noSpellingOfAProtectedPathReachesItThroughAPublicRoute(_ target: String) throws {
        _ = try upstream.seen()
        let c = try RawConnection(port: gateway.port)
        c.send("GET \(target) HTTP/1.1\r\nHost: x\r\n\r\n")
        let status = c.readResponses(1).first?.status ?? 0
        #expect(status != 200, "\(target) answered 200")
        for path in try upstream.seen() { #expect(!path.contains("visits"), "\(target) reached upstream as \(path)") }
    }

    @Test func unknownPathGets404WithJSONError() {
        let (status, body) = E2E.curl(["\(gateway.url)/nothing-here"])
        #expect(status == 404)
        #expect(body.contains("{\"error\":"))
    }

    @Test func stripPrefixForwardsTheRest() throws {
        let (status, body) = E2E.curl(["\(gateway.url)/stripped/a/b"])
        #expect(status == 200)
        #expect(try Echo(body).path == "/a/b")
    }

    @Test func postBodiesAreStreamedWithContentLengthAndChunked() throws {
        let (s1, b1) = E2E.curl(["-X", "POST", "--data-binary", "hello=world", "\(gateway.url)/public/post"])
        #expect(s1 == 200)
        #expect(try Echo(b1).body == "hello=world")
        let c = try RawConnection(port: gateway.port)
        c.send("POST /public/chunky HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nTrailer: x\r\n\r\n")
        let r = c.readResponses(1)
        #expect(r.first?.status == 200)
        #expect(try Echo(r.first?.body ?? "").body == "hello world")
    }

    @Test func keepAliveAndPipeliningAnswerInOrder() throws {
        let c = try RawConnection(port: gateway.port)
        c.send("GET /public/one HTTP/1.1\r\nHost: x\r\n\r\nGET /public/two HTTP/1.1\r\nHost: x\r\n\r\nGET /nope HTTP/1.1\r\nHost: x\r\n\r\n")
        let r = c.readResponses(3)
        #expect(r.map(\.status) == [200, 200, 404])
        #expect(try Echo(r[0].body).path == "/public/one")
        #expect(try Echo(r[1].body).path == "/public/two")
        c.send("GET /public/three HTTP/1.1\r\nHost: x\r\n\r\n")
        #expect(c.readResponses(1).first?.status == 200)
    }

    @Test func chunkedResponsesAreForwardedIntact() throws {
        let (status, body) = E2E.curl(["\(gateway.url)/public/chunked"])
        #expect(status == 200)
        #expect(try Echo(body).path == "/public/chunked")
    }

    @Test func largeResponsesStreamThrough() {
        let (status, body) = E2E.curl(["\(gateway.url)/public/big/3000000"])
        #expect(status == 200)
        #expect(body.utf8.count == 3_000_000)
    }

    @Test func headRequestsGetNoBody() throws {
        let c = try RawConnection(port: gateway.port)
        c.send("HEAD /public/h HTTP/1.1\r\nHost: x\r\n\r\nGET /public/after HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        let text = c.readAll()
        #expect(text.hasPrefix("HTTP/1.1 200"))
        #expect(text.components(separatedBy: "HTTP/1.1 200").count == 3, "HEAD response must carry no body: \(text)")
        #expect(text.contains("/public/after"))
    }

    @Test func upstreamClosingAPooledConnectionIsRetriedOnce() throws {
        for i in 0..<4 {
            let (status, _) = E2E.curl(["\(gateway.url)/public/close-after/\(i)"])
            #expect(status == 200)
            usleep(50_000)  // let the upstream's close arrive while the connection sits in the pool
        }
    }

    @Test func upstreamThatDropsTheRequestGets502() {
        let (status, body) = E2E.curl(["\(gateway.url)/public/drop"])
        #expect(status == 502)
        #expect(body.contains("\"error\""))
    }

    @Test func slowUpstreamGets504() {
        let (status, body) = E2E.curl(["\(gateway.url)/public/slow/3500"])
        #expect(status == 504)
        #expect(body.contains("timed out"))
    }

    @Test func expectContinueIsAnsweredByTheGateway() throws {
        let c = try RawConnection(port: gateway.port)
        c.send("POST /public/e HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nExpect: 100-continue\r\n\r\n")
        var buf = [UInt8](repeating: 0, count: 100)
        let n = recv(c.fd, &buf, buf.count, 0)
        #expect(String(decoding: buf[0..<max(0, n)], as: UTF8.self).hasPrefix("HTTP/1.1 100 Continue"))
        c.send("abc")
        let r = c.readResponses(1)
        #expect(r.first?.status == 200)
        let echo = try Echo(r.first?.body ?? "")
        #expect(echo.body == "abc")
        #expect(!echo.has("Expect"))
    }

    @Test func connectionHeaderCannotRemoveProtectedFields() throws {
        let c = try RawConnection(port: gateway.port)
        c.send("GET /public/c HTTP/1.1\r\nHost: x\r\nConnection: keep-alive, X-Custom, Cookie, Host\r\nX-Custom: 1\r\nCookie: a=b\r\n\r\n")
        let r = c.readResponses(1)
        let echo = try Echo(r.first?.body ?? "")
        #expect(!echo.has("X-Custom"))
        #expect(echo.values("Cookie") == ["a=b"])
        #expect(echo.values("Host") == ["x"])
        #expect(!echo.has("Connection") || echo.values("Connection") != ["keep-alive, X-Custom, Cookie, Host"])
    }

    @Test func accessLogHasOneJSONLinePerRequestWithoutQueryStrings() throws {
        _ = E2E.curl(["\(gateway.url)/public/logged?token=secret-value"])
        _ = waitUntil(5) { gateway.log.contains(#""path":"/public/logged""#) }
        let lines = gateway.log.split(separator: "\n").filter { $0.contains("\"path\":\"/public/logged\"") }
        #expect(lines.count == 1)
        #expect(!gateway.log.contains("secret-value"))
    }

    @Test func wrkLoadThroughTheGatewayHasNoErrors() throws {
        let (status, out, err) = E2E.run("/usr/bin/wrk", ["-t1", "-c16", "-d2s", "--timeout", "2s", "\(gateway.url)/public/load"], timeout: 30)
        #expect(status == 0, "\(err)")
        #expect(!out.contains("Non-2xx"), "\(out)")
        #expect(!out.contains("Socket errors"), "\(out)")
        #expect(out.contains("Requests/sec"))
    }
}

/// Every request the gateway answers is one access-log line with a request id and a path,
/// whoever answered: the upstream, a refusal (401), a redirect to https (308, the request's
/// path), a request refused before routing (400, path "-"). A response the gateway made
/// itself carries the logged id in `x-request-id`, so a client quoting it finds the line.
@Suite(.serialized)
struct AccessLogEndToEndTests {
    /// "Who was refused and why" (#35.3): each line names the verified user and provider, the
    /// auth decision and its reason, the route, host, user agent, the upstream's address and
    /// whether the gateway or the app answered (an app's own 401 is `edge: false`); never a
    /// token. `fields` selects the members; time has milliseconds.
    @Test func linesAnswerTriageAndFieldsAreChosen() throws {
        let upstream = try EchoUpstream()
        let config = """
        upstreams:
          app: {url: "http://127.0.0.1:\(upstream.port)"}
        routes:
          - {path: /open, upstream: app, auth: none}
          - {path: /api, upstream: app, auth: required}
        providers:
          - {name: app, type: hs256, secret: "0123456789abcdef0123456789abcdef", issuer: "visits-api"}
        """
        let g = try GatewayProcess(config)
        let token = try g.mint(["--provider", "app", "--sub", "alice"]).trimmingCharacters(in: .whitespacesAndNewlines)
        let expired = try g.mint(["--provider", "app", "--sub", "bob", "--age", "2h"]).trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(E2E.curl(["-H", token, "-A", "TriageApp/2.1", "\(g.url)/api/visits"]).status == 200)
        #expect(E2E.curl(["-H", expired, "\(g.url)/api/visits"]).status == 401)
        #expect(E2E.curl(["\(g.url)/api/visits"]).status == 401)
        #expect(E2E.curl(["-H", token, "\(g.url)/api/status/401"]).status == 401)   // the app's own 401
        #expect(E2E.curl(["\(g.url)/nowhere"]).status == 404)
        #expect(waitUntil(5) { g.log.components(separatedBy: "\"status\":").count - 1 >= 5 })
        let lines = g.log.split(separator: "\n").filter { $0.contains("\"status\":") }
            .compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
        try #require(lines.count == 5, "\(g.log.suffix(2000))")
        let (ok, stale, missing, app401, unrouted) = (lines[0], lines[1], lines[2], lines[3], lines[4])
        #expect(ok["user"] as? String == "alice" && ok["provider"] as? String == "app" && ok["auth"] as? String == "verified"
                && ok["edge"] as? Bool == false && ok["upstream_status"] as? Int == 200 && ok["route"] as? String == "/api"
                && ok["user_agent"] as? String == "TriageApp/2.1" && ok["host"] as? String == "127.0.0.1"
                && ok["upstream_address"] as? String == "127.0.0.1:\(upstream.port)" && ok["auth_reason"] is NSNull, "\(ok)")
        #expect(stale["auth"] as? String == "refused" && stale["auth_reason"] as? String == "expired" && stale["edge"] as? Bool == true
                && stale["user"] is NSNull && stale["upstream_status"] is NSNull && stale["upstream_address"] is NSNull, "\(stale)")
        #expect(missing["auth_reason"] as? String == "no_credential" && missing["edge"] as? Bool == true, "\(missing)")
        #expect(app401["status"] as? Int == 401 && app401["edge"] as? Bool == false && app401["auth"] as? String == "verified", "\(app401)")
        #expect(unrouted["auth"] as? String == "none" && unrouted["route"] is NSNull && unrouted["edge"] as? Bool == true, "\(unrouted)")
        #expect((ok["time"] as? String)?.range(of: #"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$"#, options: .regularExpression) != nil)
        let secretPart = token.split(separator: ".").last.map(String.init) ?? token
        #expect(!g.log.contains(secretPart), "no token in the log")
        // Chosen fields only, in the canonical order (a reload applies them); an unknown one is
        // named at start.
        let chosen = g
        let text = try String(contentsOfFile: g.configPath, encoding: .utf8)
        try text.replacingOccurrences(of: "access_log: stdout", with: "access_log: {target: stdout, fields: [status, user, auth_reason]}")
            .write(toFile: g.configPath, atomically: true, encoding: .utf8)
        g.send(SIGHUP)
        #expect(waitUntil(10) { g.log.contains("configuration reloaded") },
                "\(g.log.suffix(600))")
        #expect(E2E.curl(["-H", expired, "\(chosen.url)/api/x"]).status == 401)
        #expect(waitUntil(5) { chosen.log.contains(#"{"status":401,"auth_reason":"expired","user":null}"#) }, "\(chosen.log.suffix(400))")
        let errors = E2E.configErrors("listen: [{address: \"127.0.0.1:1\"}]\n" + config + "\naccess_log: {fields: [status, token]}")
        #expect(errors.contains("access_log.fields") && errors.contains("unknown field 'token'"), "\(errors)")
    }

    @Test func everyAnsweredRequestIsLoggedWithAnIdAndAPath() throws {
        let upstream = try EchoUpstream()
        let redirectPort = Loopback.freePort()
        let g = try GatewayProcess("""
        upstreams:
          app: {url: "http://127.0.0.1:\(upstream.port)"}
        routes:
          - {path: /open, upstream: app, auth: none}
          - {path: /, upstream: app, auth: required}
        providers:
          - {name: app, type: hs256, secret: "0123456789abcdef0123456789abcdef", issuer: "visits-api"}
        """, listen: """
          - {address: "127.0.0.1:PORT"}
          - {address: "127.0.0.1:\(redirectPort)", redirect_https: true}
        """)
        let client = try RawConnection(port: g.port)
        client.send("GET /open/ok HTTP/1.1\r\nHost: a\r\n\r\n")
        client.send("GET /private/x HTTP/1.1\r\nHost: a\r\n\r\n")
        let answered = client.readResponses(2)
        #expect(answered.map(\.status) == [200, 401])
        let refusedId = try #require(answered.last?.header("x-request-id"))
        let redirect = try RawConnection(port: redirectPort)
        redirect.send("GET /moved/here?q=1 HTTP/1.1\r\nHost: a.example\r\n\r\n")
        let moved = try #require(redirect.readResponses(1).first)
        #expect(moved.status == 308)
        let redirectId = try #require(moved.header("x-request-id"))
        let bad = try RawConnection(port: g.port)
        bad.send("GET /has space HTTP/1.1\r\nHost: a\r\n\r\n")
        let refused = try #require(bad.readResponses(1).first)
        #expect(refused.status == 400)
        #expect(waitUntil(5) { g.log.components(separatedBy: "\"status\":").count - 1 >= 4 })
        let lines = g.log.split(separator: "\n").filter { $0.contains("\"status\":") }.map(String.init)
        func line(_ status: Int) -> String? { lines.first { $0.contains("\"status\":\(status),") } }
        #expect(lines.count == 4, "\(lines)")
        for l in lines {
            #expect(!l.contains("\"request_id\":\"\""), "no id: \(l)")
            #expect(!l.contains("\"path\":\"\""), "no path: \(l)")
        }
        #expect(line(200)?.contains("\"path\":\"/open/ok\"") == true)
        #expect(line(401)?.contains("\"request_id\":\"\(refusedId)\"") == true, "\(lines)")
        #expect(line(401)?.contains("\"path\":\"/private/x\"") == true)
        #expect(line(308)?.contains("\"request_id\":\"\(redirectId)\"") == true, "\(lines)")
        #expect(line(308)?.contains("\"path\":\"/moved/here\"") == true, "\(lines)")
        #expect(line(400)?.contains("\"path\":\"-\"") == true, "\(lines)")
    }

    /// A trusted proxy's X-Request-Id is kept when it looks like an id; one that would break
    /// the log line (quotes, control bytes, too long) is replaced, and every line stays JSON.
    @Test func requestIdsFromTrustedProxiesAreCheckedAndLogLinesStayJSON() throws {
        let upstream = try EchoUpstream()
        let g = try GatewayProcess("""
        trusted_proxies: ["127.0.0.1/32"]
        upstreams:
          app: {url: "http://127.0.0.1:\(upstream.port)"}
        routes:
          - {path: /, upstream: app, auth: none}
        """)
        let good = "trace-0af7651916cd43dd8448eb211c80319c"
        let injected = #"x","status":999,"evil":"1"#
        for id in [good, injected, String(repeating: "a", count: 300)] {
            let (status, body) = E2E.curl(["-H", "X-Request-Id: \(id)", "\(g.url)/id"])
            #expect(status == 200)
            let sent = try Echo(body).values("X-Request-Id").first ?? ""
            #expect(id == good ? sent == good : (sent != id && sent.count == 32), "\(id.prefix(40)) -> \(sent)")
        }
        #expect(waitUntil(5) { g.log.components(separatedBy: "\"status\":").count - 1 >= 3 })
        let lines = g.log.split(separator: "\n").filter { $0.contains("\"status\":") }
        #expect(lines.count == 3, "\(lines)")
        for line in lines {
            let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]
            #expect(object?["status"] as? Int == 200, "\(line)")
            #expect(object?["evil"] == nil, "\(line)")
        }
    }
}
