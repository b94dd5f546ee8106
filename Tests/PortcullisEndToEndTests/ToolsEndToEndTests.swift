import Foundation
import PortcullisTestSupport
import Testing

/// Tools that tell the truth (issue 15, item 7), through the real binary: `verify` takes a
/// credential as pasted and prints the handle that revokes it; refusals name the real
/// cause; `check-config` points at the key meant; `mint` seals Auth.js v5 cookies as Auth.js does.
@Suite(.serialized) struct ToolsEndToEndTests {
    static let adminToken = "admin-token-0123456789abcdef"

    @Test func verifyTakesWhatIsPastedAndItsRevocationHandleRevokes() throws {
        let upstream = try EchoUpstream()
        let gateway = try GatewayProcess("""
        \(AuthFixtures.providers)
        upstreams:
          app: {url: "http://127.0.0.1:\(upstream.port)"}
        routes:
          - {path: /google-only, upstream: app, auth: required, providers: [google]}
          - {path: /, upstream: app, auth: required}
        """, adminToken: Self.adminToken)
        func verify(_ arguments: [String]) -> (Int32, String) {
            let (status, out, err) = E2E.run(E2E.binary, ["verify", "--config", gateway.configPath] + arguments)
            return (status, out + err)
        }
        // A Google ID token has no jti: the handle is the credential hash, and it revokes it.
        let google = try AuthFixtures.mint(gateway, "google", ["--sub", "g-1"])  // "Authorization: Bearer …"
        let token = String(google.dropFirst("Authorization: Bearer ".count))
        for pasted in [token, "Bearer \(token)", google] {
            let (status, out) = verify([pasted])
            #expect(status == 0 && out.contains("provider=google user=g-1"), "\(pasted.prefix(30)): \(out)")
        }
        let (_, out) = verify([token])
        let handle = try #require(out.split(separator: "\n").first { $0.hasPrefix("revocation handle: ") })
        let body = String(handle.dropFirst("revocation handle: ".count).prefix { $0 != " " })
        #expect(body.hasPrefix("{\"jti\":\""), "\(handle)")
        #expect(E2E.curl(["-H", google, "\(gateway.url)/x"]).status == 200)
        #expect(E2E.curl(["-X", "POST", "-H", "Authorization: Bearer \(Self.adminToken)", "-d", body,
                          "http://127.0.0.1:\(gateway.adminPort)/revocations"]).status == 201)
        #expect(E2E.curl(["-H", google, "\(gateway.url)/x"]).status == 401, "the printed handle revoked the token")
        // Revocations held in the gateway's memory only cannot be consulted: said plainly (#26.5).
        let (_, after) = verify([token])
        #expect(after.contains("verified: provider=google")
                && after.contains("revocations: NOT checked: they are in the running gateway's memory only")
                && after.contains("GET /revocations?subject=g-1"), "\(after)")

        // Cookies as pasted: a whole Cookie line, or name=value.
        let cookie = try AuthFixtures.mint(gateway, "webv5", ["--sub", "w-1"])  // "Cookie: authjs.session-token=…"
        #expect(cookie.contains("authjs.session-token="))
        for pasted in [cookie, String(cookie.dropFirst("Cookie: ".count)), cookie + "; theme=dark"] {
            let (status, out) = verify([pasted])
            #expect(status == 0 && out.contains("provider=webv5 user=w-1") && out.contains("revocation handle: {\"jti\""), "\(out)")
        }
        // Auth.js v5 cookies are sealed as Auth.js seals them.
        let value = String(cookie.split(separator: "=", maxSplits: 1)[1])
        let header = try #require(Data(base64Encoded: Self.padded(String(value.prefix { $0 != "." }))))
        #expect(String(decoding: header, as: UTF8.self).contains("\"enc\":\"A256CBC-HS512\""))
        #expect(E2E.curl(["-H", cookie, "\(gateway.url)/x"]).status == 200)

        // An unknown provider is a usage error, not a refusal.
        let (usage, message) = verify(["--provider", "nobody", token])
        #expect(usage == 64 && message.contains("unknown provider 'nobody'"), "\(usage) \(message)")

        // Refusals name the real cause.
        let appToken = try AuthFixtures.mint(gateway, "app")
        let wrongProvider = E2E.curl(["-H", appToken, "\(gateway.url)/google-only"])
        #expect(wrongProvider.status == 401 && wrongProvider.body.contains("does not accept"), "\(wrongProvider)")
        let other = try GatewayProcess("""
        providers:
          - {name: webv5, type: authjs, secret: "another-secret-0123456789abcdef0123456"}
        upstreams:
          app: {url: "http://127.0.0.1:\(upstream.port)"}
        routes:
          - {path: /, upstream: app, auth: required}
        """)
        let undecryptable = E2E.curl(["-H", cookie, "\(other.url)/x"])
        #expect(undecryptable.status == 401 && undecryptable.body.contains("could not be decrypted"), "\(undecryptable)")
    }

    /// `verify` consults the configured store as the gateway does (#26.5): the embedded
    /// store's journal (`store.state_dir`, read while the gateway runs on it) and Redis. A
    /// revoked credential is refused (exit 1) naming the entry; an undo is seen; a subject
    /// cutoff refuses older credentials only; a Redis that does not answer is said so.
    @Test(arguments: ["state_dir", "redis"])
    func verifyConsultsTheConfiguredRevocationStore(_ store: String) throws {
        let upstream = try EchoUpstream()
        let redis = store == "redis" ? try RedisProcess() : nil
        let stateDir = NSTemporaryDirectory() + "portcullis-verify-\(UUID().uuidString)"
        let storeLine = redis.map { "store: {redis: \"redis://127.0.0.1:\($0.port)/0\"}" } ?? "store: {state_dir: \"\(stateDir)\"}"
        let gateway = try GatewayProcess("""
        \(AuthFixtures.providers)
        \(storeLine)
        upstreams:
          app: {url: "http://127.0.0.1:\(upstream.port)"}
        routes:
          - {path: /, upstream: app, auth: required}
        """, adminToken: Self.adminToken)
        func verify(_ credential: String) -> (Int32, String) {
            let (status, out, err) = E2E.run(E2E.binary, ["verify", "--config", gateway.configPath, credential])
            return (status, out + err)
        }
        func admin(_ method: String, _ body: String) -> Int {
            E2E.curl(["-X", method, "-H", "Authorization: Bearer \(Self.adminToken)", "-d", body,
                      "http://127.0.0.1:\(gateway.adminPort)/revocations"]).status
        }
        let place = redis == nil ? "\(stateDir)/revocations.jsonl" : "Redis (store.redis)"
        let header = try AuthFixtures.mint(gateway, "app", ["--sub", "v-1"])  // "Authorization: Bearer …"
        let (fresh, freshOut) = verify(header)
        #expect(fresh == 0 && freshOut.contains("revocations: checked in \(place)") && freshOut.contains("not revoked"), "\(freshOut)")

        let jti = try #require(freshOut.split(separator: "\n").first { $0.hasPrefix("revocation handle: ") })
            .dropFirst("revocation handle: ".count)
        #expect(admin("POST", String(jti)) == 201)
        #expect(E2E.curl(["-H", header, "\(gateway.url)/x"]).status == 401)
        let (revoked, revokedOut) = verify(header)
        #expect(revoked == 1 && revokedOut.contains("refused: invalid_token (revoked): revoked by jti ")
                && revokedOut.contains(place), "\(revokedOut)")
        // An undo is seen too.
        #expect(admin("DELETE", String(jti)) == 200)
        let (undone, undoneOut) = verify(header)
        #expect(undone == 0 && undoneOut.contains("not revoked"), "\(undoneOut)")

        // "Sign out everywhere": credentials issued before the cutoff are refused, later ones not.
        #expect(admin("POST", #"{"subject":"v-1"}"#) == 201)
        let (older, olderOut) = verify(header)
        #expect(older == 1 && olderOut.contains("revoked by subject v-1"), "\(olderOut)")
        sleep(1)
        let later = try AuthFixtures.mint(gateway, "app", ["--sub", "v-1"])
        #expect(E2E.curl(["-H", later, "\(gateway.url)/x"]).status == 200)
        let (newer, newerOut) = verify(later)
        #expect(newer == 0 && newerOut.contains("not revoked"), "\(newerOut)")
        // --skip-revocations: verified, and said so.
        let (_, skipped, _) = E2E.run(E2E.binary, ["verify", "--config", gateway.configPath, "--skip-revocations", header])
        #expect(skipped.contains("verified: provider=app") && skipped.contains("revocations: NOT checked (--skip-revocations)"), "\(skipped)")

        if let redis {
            // Redis gone: not checked, and why; the credential is not called revoked.
            redis.stop()
            let (status, out) = verify(later)
            #expect(status == 0 && out.contains("revocations: NOT checked: Redis (store.redis)"), "\(out)")
            #expect(!out.contains("secret") && !out.contains("redis://"), "no URL (it may hold a password): \(out)")
        }
    }

    /// `check-config` like `haproxy -c` (#35.8): every error of the file in one run, in the
    /// file's order, each with file, line, key and reason, and the count: each bad provider
    /// (its rules checked on its own), each bad route; a port two listeners share is one; an
    /// error that only follows from another (a route naming a broken upstream or provider) is not.
    @Test func checkConfigNamesEveryErrorInOneRun() throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("every-\(UUID().uuidString).yaml").path
        try """
        listen: [{address: "127.0.0.1:18080"}, {address: "0.0.0.0:18081"}]
        admin: {address: "127.0.0.1:18081"}
        workers: lots
        log_level: loud
        upstreams:
          app: {url: "ftp://x"}
          other: {url: "http://127.0.0.1:1", max_connections: -1}
        providers:
          - {name: app, type: hs256, secret: "short"}
          - {name: g, type: google, audiences: []}
          - {name: x, type: nosuch}
          - {name: ok, type: hs256, secret: "\(AuthFixtures.appSecret)"}
        routes:
          - {path: /, upstream: app, auth: required}
          - {path: nope, upstream: other}
          - {path: /b, upstream: gone}
          - {path: /c, upstream: other, auth: maybe}
          - {path: /d, upstream: other, providers: [ok, g]}
          - {path: /e, upstream: other, providers: [nobody]}
          - {path: /d, upstream: other}
        tracng: {}
        """.write(toFile: path, atomically: true, encoding: .utf8)
        let (status, out, err) = E2E.run(E2E.binary, ["check-config", path])
        #expect(status == 2 && out.isEmpty, "\(out)")
        let lines = err.split(separator: "\n").map(String.init)
        let expected: [(Int, String, String)] = [
            (2, "admin", "127.0.0.1:18081 is already listen[1]'s (0.0.0.0:18081)"),
            (3, "workers", "expected an integer"),
            (4, "log_level", "got 'loud'"),
            (6, "upstreams.app.url", "ftp://x"),
            (7, "upstreams.other.max_connections", "must be at least 1"),
            (9, "providers[0].secret", "at least 32 bytes"),
            (10, "providers[1]", "audiences is required"),
            (11, "providers[2].type", "got 'nosuch'"),
            (15, "routes[1].path", "must be a normalized path prefix"),
            (16, "routes[2].upstream", "names no upstream"),
            (17, "routes[3].auth", "got 'maybe'"),
            (19, "routes[5].providers", "nobody"),
            (20, "routes[6].path", "duplicates an earlier route"),
            (21, "tracng", "did you mean 'tracing'?"),
        ]
        for (line, key, reason) in expected {
            #expect(lines.contains { $0.hasPrefix("portcullis: invalid configuration: \(path):\(line): \(key): ") && $0.contains(reason) },
                    "\(line) \(key): \(err)")
        }
        #expect(lines.last == "portcullis: \(expected.count) errors in \(path)", "\(err)")
        #expect(!err.contains("routes[0]"), "a route naming the broken upstream is not another error: \(err)")
        #expect(!err.contains("routes[4]"), "nor one naming a broken provider: \(err)")
        // In the file's order.
        let numbers = lines.dropLast().compactMap { line -> Int? in
            line.components(separatedBy: "\(path):").dropFirst().first.flatMap { Int($0.prefix { $0.isNumber }) }
        }
        #expect(numbers == numbers.sorted() && numbers.count == expected.count, "\(numbers)")
    }

    @Test func checkConfigPointsAtTheKeyMeant() throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("tools-\(UUID().uuidString).yaml").path
        try """
        providers:
          - {name: fb, type: firebase, projectId: vc-notebook}
        upstreams:
          app: {url: "http://127.0.0.1:1"}
        routes:
          - {path: /, upstream: app}
        """.write(toFile: path, atomically: true, encoding: .utf8)
        let (status, _, err) = E2E.run(E2E.binary, ["check-config", path])
        #expect(status != 0)
        #expect(err.contains("providers[0].projectId: unknown key (did you mean 'project_id'?)"), "\(err)")
        try """
        providers:
          - {name: app, type: hs256, secret: "\(AuthFixtures.appSecret)", leeway: 20m}
        upstreams:
          app: {url: "http://127.0.0.1:1"}
        routes:
          - {path: /, upstream: app}
        """.write(toFile: path, atomically: true, encoding: .utf8)
        let (status2, _, err2) = E2E.run(E2E.binary, ["check-config", path])
        #expect(status2 != 0 && err2.contains("leeway") && !err2.contains("leewaySeconds"), "\(err2)")
        // A claim header path no token could carry has no effect: refused, naming the key.
        try """
        identity: {claims: {"firebase..sign_in_provider": X-Sign-In-Provider}}
        upstreams:
          app: {url: "http://127.0.0.1:1"}
        routes:
          - {path: /, upstream: app}
        """.write(toFile: path, atomically: true, encoding: .utf8)
        let (status3, _, err3) = E2E.run(E2E.binary, ["check-config", path])
        #expect(status3 != 0 && err3.contains("identity.claims.firebase..sign_in_provider"), "\(err3)")
    }

    static func padded(_ base64url: String) -> String {
        var text = base64url.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while text.count % 4 != 0 { text += "=" }
        return text
    }
}
