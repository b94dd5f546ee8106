import Foundation
import PortcullisTestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Reloading the whole configuration (#26.1), through the real binary: SIGHUP, `POST /reload`
/// and `portcullis reload` share one verdict; a refused file changes nothing; an applied one
/// swaps routes, upstreams, providers, certificates, listeners and the admin token while
/// requests keep flowing, each answered by one configuration or the other.
@Suite(.serialized) struct ReloadEndToEndTests {
    static let token = "reload-admin-token-0123456789abcdef"

    /// Two generations of one gateway: `a` and `b` differ in routes, upstreams, providers,
    /// the TLS certificate and an extra listener; `write(_:)` puts one in the running file.
    struct Pair {
        let a: String
        let b: String
        let path: String
        func write(_ text: String) throws {
            // Written beside and renamed, as a deploy tool does: a reload never reads half a file.
            try text.write(toFile: path + ".next", atomically: false, encoding: .utf8)
            guard rename(path + ".next", path) == 0 else { throw TestFailure("rename failed") }
        }
    }

    static func post(_ g: GatewayProcess, _ path: String, token: String = ReloadEndToEndTests.token) -> (status: Int, body: String) {
        E2E.curl(["-X", "POST", "-H", "authorization: Bearer \(token)", "http://127.0.0.1:\(g.adminPort)\(path)"])
    }

    static func readyz(_ g: GatewayProcess) -> [String: Any] {
        let (_, body) = E2E.curl(["http://127.0.0.1:\(g.adminPort)/readyz"])
        return (try? JSONSerialization.jsonObject(with: Data(body.utf8))) as? [String: Any] ?? [:]
    }

    static func json(_ text: String) -> [String: Any] {
        (try? JSONSerialization.jsonObject(with: Data(text.utf8))) as? [String: Any] ?? [:]
    }

    /// The app that answered and the generation header it received, from an echo body.
    static func answeredBy(_ body: String) -> (app: String, generation: String)? {
        guard let object = json(body) as [String: Any]?, let app = object["app"] as? String,
              let headers = object["headers"] as? [[String]] else { return nil }
        let generation = headers.first { $0.count == 2 && $0[0].lowercased() == "x-generation" }?[1] ?? "-"
        return (app, generation)
    }

    /// A bad file is refused by every trigger with `FILE:LINE: KEY: REASON`; the old routes,
    /// upstream and token keep working, the generation and hash stay, and the refusal is counted.
    @Test func aRefusedFileChangesNothingWhateverTheTrigger() throws {
        let upstream = try EchoUpstream(name: "one")
        let g = try GatewayProcess(upstream.openRoute, adminToken: Self.token)
        let good = try String(contentsOfFile: g.configPath, encoding: .utf8)
        let before = Self.readyz(g)
        #expect(before["generation"] as? Int == 1 && (before["config_sha256"] as? String)?.count == 64, "\(before)")

        let broken = good.replacingOccurrences(of: "auth: none", with: "auth: sometimes")
        try broken.write(toFile: g.configPath, atomically: true, encoding: .utf8)
        let line = broken.split(separator: "\n", omittingEmptySubsequences: false).firstIndex { $0.contains("sometimes") }! + 1

        let viaAdmin = Self.post(g, "/reload")
        #expect(viaAdmin.status == 422, "\(viaAdmin)")
        let verdict = Self.json(viaAdmin.body)
        #expect(verdict["status"] as? String == "refused")
        #expect((verdict["reason"] as? String)?.hasPrefix("\(g.configPath):\(line): routes[0].auth: ") == true, "\(verdict)")
        #expect(verdict["generation"] as? Int == 1)

        let (code, out, err) = E2E.run(E2E.binary, ["reload", "--address", "127.0.0.1:\(g.adminPort)", "--token", Self.token])
        #expect(code == 1 && out.contains("reload refused: \(g.configPath):\(line): routes[0].auth"), "\(out)\(err)")
        // With --config the file is checked here first: the gateway is not asked.
        let (local, _, localErr) = E2E.run(E2E.binary, ["reload", "--config", g.configPath])
        #expect(local == 2 && localErr.contains("\(g.configPath):\(line): routes[0].auth"), "\(localErr)")

        g.send(SIGHUP)
        #expect(waitUntil(10) { g.log.components(separatedBy: "configuration reload refused").count == 4 }, "\(g.log.suffix(1500))")
        #expect(g.log.contains("\(g.configPath):\(line): routes[0].auth"))

        // Nothing changed: routes, upstream, generation, hash, token.
        #expect(E2E.curl(["\(g.url)/still"]).status == 200)
        let after = Self.readyz(g)
        #expect(after["generation"] as? Int == 1 && after["config_sha256"] as? String == before["config_sha256"] as? String)
        let metrics = E2E.curl(["-H", "authorization: Bearer \(Self.token)", "http://127.0.0.1:\(g.adminPort)/metrics"]).body
        #expect(metrics.contains("portcullis_config_reloads_total{result=\"refused\"} 3"), "\(metrics)")
        #expect(metrics.contains("portcullis_config_generation 1.0"))

        // Refusals that only the running gateway can find: the number of loops, a port in use.
        try good.replacingOccurrences(of: "workers: 2", with: "workers: 3").write(toFile: g.configPath, atomically: true, encoding: .utf8)
        let loops = Self.post(g, "/reload")
        #expect(loops.status == 422 && loops.body.contains("workers: the number of loops cannot change"), "\(loops)")
        let busy = try EchoUpstream(name: "busy")
        try good.replacingOccurrences(of: "listen:\n", with: "listen:\n  - {address: \"127.0.0.1:\(busy.port)\"}\n")
            .write(toFile: g.configPath, atomically: true, encoding: .utf8)
        let taken = Self.post(g, "/reload")
        #expect(taken.status == 422 && taken.body.contains("cannot listen on 127.0.0.1:\(busy.port)"), "\(taken)")
        #expect(E2E.curl(["\(g.url)/still"]).status == 200)
        #expect(Self.readyz(g)["generation"] as? Int == 1)

        // The good file again: applied, generation 2.
        try good.write(toFile: g.configPath, atomically: true, encoding: .utf8)
        let applied = Self.post(g, "/reload")
        #expect(applied.status == 200 && Self.json(applied.body)["generation"] as? Int == 2, "\(applied)")
    }

    /// What an applied reload changes: routes and upstreams (a removed upstream is not used
    /// again), the admin token (the old one is refused at once), a listener added and one
    /// removed, the access log's path and the log level.
    @Test func anAppliedReloadSwapsRoutesUpstreamsListenersAndTheAdminToken() throws {
        let one = try EchoUpstream(name: "one")
        let two = try EchoUpstream(name: "two")
        let extra = Loopback.freePort()
        let g = try GatewayProcess("""
        upstreams:
          one: {url: "http://127.0.0.1:\(one.port)"}
        routes:
          - {path: /, upstream: one, auth: none}
        """, adminToken: Self.token)
        let original = try String(contentsOfFile: g.configPath, encoding: .utf8)
        #expect(Self.answeredBy(E2E.curl(["\(g.url)/x"]).body)?.app == "one")
        #expect(E2E.curl(["http://127.0.0.1:\(extra)/x"]).status == 0, "nothing listens there yet")

        let newToken = "rotated-admin-token-abcdef0123456789"
        let next = original
            .replacingOccurrences(of: "token: \"\(Self.token)\"", with: "token: \"\(newToken)\"")
            .replacingOccurrences(of: "listen:\n", with: "listen:\n  - {address: \"127.0.0.1:\(extra)\"}\n")
            .replacingOccurrences(of: "one: {url: \"http://127.0.0.1:\(one.port)\"}", with: "two: {url: \"http://127.0.0.1:\(two.port)\"}")
            .replacingOccurrences(of: "upstream: one", with: "upstream: two")
            + "\n  - {path: /only-two, upstream: two, auth: required}\nproviders:\n  - {name: app, type: hs256, secret: \"reload-test-secret-0123456789abcdef0123\"}\n"
        try next.write(toFile: g.configPath, atomically: true, encoding: .utf8)
        let applied = Self.post(g, "/reload")
        #expect(applied.status == 200, "\(applied)")
        let changes = (Self.json(applied.body)["changes"] as? [String]) ?? []
        #expect(changes.contains("upstreams added or changed: two") && changes.contains("upstreams removed or replaced: one")
                && changes.contains("listeners added: 127.0.0.1:\(extra)"), "\(changes)")

        _ = try one.seen()
        for url in ["\(g.url)/y", "http://127.0.0.1:\(extra)/y"] {
            #expect(Self.answeredBy(E2E.curl([url]).body)?.app == "two", "\(url)")
        }
        #expect(try one.seen().isEmpty, "the removed upstream gets nothing")
        #expect(E2E.curl(["\(g.url)/only-two/z"]).status == 401, "the new route needs a credential")
        let minted = try g.mint(["--provider", "app", "--sub", "u1"])
        #expect(E2E.curl(["-H", minted, "\(g.url)/only-two/z"]).status == 200, "the new provider verifies it")

        // The old admin token is refused from the next request on; the new one works.
        #expect(Self.post(g, "/reload").status == 401)
        #expect(Self.post(g, "/reload", token: newToken).status == 200)

        // Back: the extra listener stops accepting; the first upstream serves again.
        try original.write(toFile: g.configPath, atomically: true, encoding: .utf8)
        g.send(SIGHUP)
        #expect(waitUntil(10) { Self.readyz(g)["generation"] as? Int == 4 }, "\(g.log.suffix(1200))")
        #expect(g.log.contains("listeners removed: 127.0.0.1:\(extra)"))
        #expect(waitUntil(5) { E2E.curl(["http://127.0.0.1:\(extra)/y"]).status == 0 }, "the removed listener is closed")
        #expect(Self.answeredBy(E2E.curl(["\(g.url)/x"]).body)?.app == "one")
        #expect(Self.post(g, "/reload").status == 200, "the first token again")
    }

    /// A provider whose key source did not change keeps its keys over reloads (no fetch);
    /// one whose `jwks_url` changed is fetched from the new source, never served the old keys.
    @Test func reloadsDoNotRefetchUnchangedKeySources() throws {
        let host = try KeyHost(kids: ["k1"])
        let other = try KeyHost(kids: ["k9"])
        let upstream = try EchoUpstream()
        func config(_ url: String, _ extra: String) -> String {
            """
            providers:
              - {name: corp, type: oidc, issuer: "https://id.example.test", audiences: ["api"], jwks_url: "\(url)"}
            \(extra)
            upstreams:
              app: {url: "http://127.0.0.1:\(upstream.port)"}
            routes:
              - {path: /, upstream: app, auth: required, providers: [corp]}
            """
        }
        let g = try GatewayProcess(config("http://127.0.0.1:\(host.port)/jwks", ""), adminToken: Self.token)
        #expect(waitUntil(10) { E2E.curl(["http://127.0.0.1:\(g.adminPort)/readyz"]).status == 200 })
        let token = try KeysAndRevocationEndToEndTests.mint(g, key: host.keyPath("k1"), kid: "k1")
        #expect(E2E.curl(["-H", token, "\(g.url)/a"]).status == 200)
        let fetched = host.fetchCount()
        let original = try String(contentsOfFile: g.configPath, encoding: .utf8)
        for round in 0..<20 {
            // Other providers come and go; corp stays as it was.
            let extra = round % 2 == 0 ? "  - {name: p\(round), type: hs256, secret: \"reload-secret-\(round)-0123456789abcdefghij\"}" : ""
            try original.replacingOccurrences(of: "jwks_url: \"http://127.0.0.1:\(host.port)/jwks\"}\n",
                                              with: "jwks_url: \"http://127.0.0.1:\(host.port)/jwks\"}\n\(extra)\n")
                .write(toFile: g.configPath, atomically: true, encoding: .utf8)
            let reload = Self.post(g, "/reload")
            #expect(reload.status == 200, "\(reload)")
            #expect(E2E.curl(["-H", token, "\(g.url)/a"]).status == 200, "round \(round)")
        }
        #expect(host.fetchCount() == fetched, "20 reloads fetched nothing for an unchanged key source")
        let metrics = E2E.curl(["-H", "authorization: Bearer \(Self.token)", "http://127.0.0.1:\(g.adminPort)/metrics"]).body
        #expect(metrics.contains("portcullis_auth_decisions_total{provider=\"corp\",outcome=\"verified\"} 21"), "counts go on across reloads")

        // corp's source changes: its old keys are not installed again; the new host's are.
        try original.replacingOccurrences(of: "127.0.0.1:\(host.port)/jwks", with: "127.0.0.1:\(other.port)/jwks")
            .write(toFile: g.configPath, atomically: true, encoding: .utf8)
        #expect(Self.post(g, "/reload").status == 200)
        #expect(other.fetchCount() >= 1)
        let k9 = try KeysAndRevocationEndToEndTests.mint(g, key: other.keyPath("k9"), kid: "k9")
        #expect(E2E.curl(["-H", k9, "\(g.url)/a"]).status == 200)
        #expect(E2E.curl(["-H", token, "\(g.url)/a"]).status == 401, "the old source's key is gone")
    }

    /// 100 reloads, alternating two files that differ in routes, upstreams, providers,
    /// certificates and a listener, while wrk (plain and TLS) and h2load (h2c) run: no failed
    /// or non-2xx request, and every answer a checker sampled came from one configuration
    /// (generation `a`'s upstream with `a`'s header, or `b`'s with `b`'s), never a mix.
    @Test func oneHundredReloadsUnderLoadDropNothingAndNeverMix() throws {
        let pki = try TestPKI()
        let first = try pki.leaf(["api.test"])
        let second = try pki.leaf(["api.test"], keyType: .rsa)
        let a = try EchoUpstream(name: "a")
        let b = try EchoUpstream(name: "b")
        let tlsPort = Loopback.freePort()
        let extraA = Loopback.freePort()
        func generation(_ name: String, upstream: EchoUpstream, leaf: TestPKI.Leaf, extra: UInt16?) -> String {
            """
            listen:
              - {address: "127.0.0.1:PORT", h2c: true}
              - {address: "127.0.0.1:\(tlsPort)", tls: {certificates: [{certificate: "\(leaf.certificate)", private_key: "\(leaf.key)"}]}}
            \(extra.map { "  - {address: \"127.0.0.1:\($0)\"}" } ?? "")
            admin: {address: "127.0.0.1:ADMIN", token: "\(Self.token)"}
            workers: 2
            access_log: off
            providers:
              - {name: \(name)-app, type: hs256, secret: "reload-load-secret-\(name)-0123456789abcdef"}
            upstreams:
              \(name): {url: "http://127.0.0.1:\(upstream.port)", request_headers: {X-Generation: {value: "\(name)"}}}
            routes:
              - {path: /\(name)-only, upstream: \(name), auth: required}
              - {path: /, upstream: \(name), auth: none}
            """
        }
        let g = try GatewayProcess("""
        upstreams:
          a: {url: "http://127.0.0.1:\(a.port)"}
        routes:
          - {path: /, upstream: a, auth: none}
        """, adminToken: Self.token)
        let fill = { (text: String) in text.replacingOccurrences(of: "PORT", with: "\(g.port)").replacingOccurrences(of: "ADMIN", with: "\(g.adminPort)") }
        let pair = Pair(a: fill(generation("a", upstream: a, leaf: first, extra: extraA)),
                        b: fill(generation("b", upstream: b, leaf: second, extra: nil)), path: g.configPath)
        try pair.write(pair.a)
        #expect(Self.post(g, "/reload").status == 200)
        #expect(Loopback.waitForPort(tlsPort))
        let serials = (TLSEndToEndTests.servedSerial(tlsPort, serverName: "api.test"), first.serial)
        #expect(serials.0 == serials.1)

        // The load: `seconds` long; the reloads must all happen within it.
        let seconds = 30
        let dir = RedisProcess.makeDirectory()
        let stop = dir + "/stop"
        let checker = """
        import json, os, sys, time, urllib.request
        seen = {"a": 0, "b": 0}; bad = []; bad_count = 0
        parent = os.getppid(); end = time.time() + \(seconds + 60)
        # Until the test says stop (bounded; and never past the test's own end).
        while not os.path.exists(sys.argv[2]) and time.time() < end and os.getppid() == parent:
            try:
                body = urllib.request.urlopen(sys.argv[1], timeout=5).read()
                o = json.loads(body); gen = [v for k, v in o["headers"] if k.lower() == "x-generation"]
                if gen == [o["app"]]: seen[o["app"]] += 1
                else: bad_count += 1; bad = (bad + [[o["app"], gen]])[:5]
            except Exception as e:
                bad_count += 1; bad = (bad + [str(e)])[:5]; time.sleep(0.01)
        print(json.dumps({"seen": seen, "bad": bad, "bad_count": bad_count}))
        """
        try checker.write(toFile: dir + "/checker.py", atomically: true, encoding: .utf8)
        let out = { (name: String) in dir + "/\(name).out" }
        let loads: [(String, [String])] = [
            ("wrk", ["/usr/bin/wrk", "-t1", "-c8", "-d\(seconds)s", "--timeout", "5s", "\(g.url)/load"]),
            ("wrk-tls", ["/usr/bin/wrk", "-t1", "-c4", "-d\(seconds)s", "--timeout", "5s", "https://127.0.0.1:\(tlsPort)/load"]),
            ("h2load", ["/usr/bin/h2load", "-c4", "-m8", "-D", "\(seconds)", "\(g.url)/load"]),
            ("checker", ["/usr/bin/python3", dir + "/checker.py", "\(g.url)/check", stop]),
        ]
        let pids = try loads.map { name, argv in try RedisProcess.spawn(argv, stdout: out(name)) }
        defer { for pid in pids { kill(pid, SIGKILL); var s: Int32 = 0; waitpid(pid, &s, 0) } }
        sleep(1)
        let started = Date()
        var refused: [String] = []
        for round in 1...100 {
            try pair.write(round % 2 == 1 ? pair.b : pair.a)
            if round % 2 == 0 {
                let r = Self.post(g, "/reload")
                if r.status != 200 { refused.append(r.body) }
            } else {
                let before = Self.readyz(g)["generation"] as? Int ?? 0
                g.send(SIGHUP)
                if !waitUntil(10, { (Self.readyz(g)["generation"] as? Int ?? 0) > before }) { refused.append("SIGHUP round \(round)") }
            }
        }
        let reloadSeconds = Date().timeIntervalSince(started)
        #expect(reloadSeconds < Double(seconds - 3), "the 100 reloads took \(reloadSeconds) s: longer than the load ran")
        #expect(refused.isEmpty, "\(refused)")
        #expect(Self.readyz(g)["generation"] as? Int == 102)
        // The load tools end by themselves and print their totals; then the checker stops.
        for pid in pids.prefix(3) { _ = waitUntil(Double(seconds + 20)) { var s: Int32 = 0; return waitpid(pid, &s, WNOHANG) == pid } }
        FileManager.default.createFile(atPath: stop, contents: nil)
        _ = waitUntil(20) { var s: Int32 = 0; return waitpid(pids[3], &s, WNOHANG) == pids[3] }
        let text = loads.map { name, _ in (name, (try? String(contentsOfFile: out(name), encoding: .utf8)) ?? "") }
        for (name, output) in text {
            switch name {
            case "wrk", "wrk-tls":
                #expect(output.contains("requests in"), "\(name): \(output)")
                #expect(!output.contains("Non-2xx"), "\(name): \(output)")
                #expect(!output.contains("Socket errors"), "\(name): \(output)")
            case "h2load":
                #expect(output.contains(" 0 failed, 0 errored, 0 timeout"), "\(output)")
                #expect(output.range(of: #"status codes: \d+ 2xx, 0 3xx, 0 4xx, 0 5xx"#, options: .regularExpression) != nil, "\(output)")
            default:
                let result = Self.json(output)
                let seen = result["seen"] as? [String: Int] ?? [:]
                #expect(result["bad_count"] as? Int == 0, "\(output)")
                #expect((seen["a"] ?? 0) > 0 && (seen["b"] ?? 0) > 0, "both generations answered: \(output)")
            }
        }
        // The last file is `a`: its certificate and its extra listener.
        #expect(TLSEndToEndTests.servedSerial(tlsPort, serverName: "api.test") == first.serial)
        #expect(E2E.curl(["http://127.0.0.1:\(extraA)/x"]).status == 200)
        #expect(!g.log.contains("\"level\":\"critical\""), "\(g.log.suffix(2000))")
    }
}
