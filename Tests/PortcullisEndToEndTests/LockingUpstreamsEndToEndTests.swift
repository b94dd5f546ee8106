import Foundation
import PortcullisTestSupport
import Testing

/// Upstreams only the gateway can reach: secret platform headers, client certificates,
/// the signed identity assertion (verified here by PyJWT, an independent library), every
/// spelling of an identity header stripped, and `check-config` warning for open upstreams.
@Suite(.serialized) struct LockingUpstreamsEndToEndTests {
    static let python = "/usr/bin/python3"
    static let verifier = E2E.packageRoot.appendingPathComponent("Tests/PortcullisEndToEndTests/Fixtures/verify_assertion.py").path

    static func echo(_ g: GatewayProcess, _ request: String) throws -> (status: Int, echo: Echo?, body: String) {
        let c = try RawConnection(port: g.port)
        c.send(request)
        guard let response = c.readResponses(1).first else { throw TestFailure("no response to \(request)") }
        return (response.status, response.status == 200 ? try Echo(response.body) : nil, response.body)
    }

    static func write(_ text: String, _ name: String) throws -> String {
        let path = RedisProcess.makeDirectory() + "/" + name
        try text.write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }

    // MARK: Identity headers under every spelling

    @Test func identityHeadersInAnySpellingNeverReachTheApp() throws {
        let upstream = try EchoUpstream()
        let g = try GatewayProcess("""
        upstreams:
          app: {url: "http://127.0.0.1:\(upstream.port)", request_headers: {x-platform-secret: {value: "s3cr3t-value-1"}}}
        routes:
          - {path: /, upstream: app, auth: none}
        \(AuthFixtures.providers)
        """)
        let spellings = ["X-User-Id", "x-user-id", "X_User_Id", "X.User.Id", "X_User.Id", "x.user.id", "X-USER.ID",
                         "x_user-id", "X.User-Id", "X-Auth-Provider", "X.Auth.Provider", "x_auth_provider",
                         "X-User-Email", "X.User.Email", "x_user.email",
                         "X-Platform-Secret", "x.platform.secret", "X_Platform_Secret"]
        var request = "GET /spell HTTP/1.1\r\nHost: app.example\r\n"
        for name in spellings { request += "\(name): forged\r\n" }
        request += "X-Userid: kept\r\n\r\n"
        let (status, echo, _) = try Self.echo(g, request)
        #expect(status == 200)
        let received = echo?.headers ?? []
        for name in spellings {
            #expect(!received.contains { $0.0 == name }, "\(name) reached the app")
        }
        #expect(!received.contains { $0.1 == "forged" }, "\(received)")
        #expect(echo?.values("x-platform-secret") == ["s3cr3t-value-1"], "the configured value, once")
        #expect(echo?.values("x-userid") == ["kept"], "a different name (no separator) is not an identity header")
    }

    // MARK: Secret request headers

    @Test func secretHeadersFromEnvFileAndValueReachTheUpstreamAndNeverLeak() throws {
        let upstream = try EchoUpstream()
        let secretFile = try Self.write("file-secret-7f3a9c\n", "cf-secret")
        let envSecret = "env-secret-41d8cd98f00b"
        let valueSecret = "value-secret-0cc175b9"
        let body = """
        log_level: debug
        upstreams:
          app:
            url: "http://127.0.0.1:\(upstream.port)"
            request_headers:
              x-vercel-protection-bypass: {env: PORTCULLIS_TEST_BYPASS}
              cf-access-client-id: {value: "\(valueSecret)"}
              cf-access-client-secret: {file: \(secretFile)}
          down: {url: "http://127.0.0.1:\(Loopback.freePort())", request_headers: {x-down: {value: "\(valueSecret)"}}}
        routes:
          - {path: /down, upstream: down, auth: none}
          - {path: /private, upstream: app, auth: required}
          - {path: /, upstream: app, auth: none}
        \(AuthFixtures.providers)
        """
        let g = try GatewayProcess(body, adminToken: "admin-token-0123456789", environment: ["PORTCULLIS_TEST_BYPASS": envSecret])
        let (status, echo, _) = try Self.echo(g, "GET /a HTTP/1.1\r\nHost: x\r\nX-Vercel-Protection-Bypass: client\r\ncf_access_client_id: client\r\nCF.Access.Client.Secret: client\r\n\r\n")
        #expect(status == 200)
        #expect(echo?.values("x-vercel-protection-bypass") == [envSecret])
        #expect(echo?.values("cf-access-client-id") == [valueSecret])
        #expect(echo?.values("cf-access-client-secret") == ["file-secret-7f3a9c"], "the file's trailing newline is trimmed")
        #expect(!(echo?.headers.contains { $0.1 == "client" } ?? true), "a client's copy never passes")

        // Every answer the gateway writes itself, the logs, /metrics and check-config stay clean.
        var answers: [String] = []
        answers.append(try Self.echo(g, "GET /down HTTP/1.1\r\nHost: x\r\n\r\n").body)            // 502
        answers.append(try Self.echo(g, "GET /private HTTP/1.1\r\nHost: x\r\n\r\n").body)         // 401
        answers.append(try Self.echo(g, "GET /a HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n").body)     // 400
        let (_, metrics) = E2E.curl(["-H", "Authorization: Bearer admin-token-0123456789", "http://127.0.0.1:\(g.adminPort)/metrics"])
        #expect(metrics.contains("portcullis_"), "metrics were served")
        let (_, checkOut, checkErr) = E2E.run(E2E.binary, ["check-config", g.configPath])
        usleep(200_000)
        for secret in [envSecret, valueSecret, "file-secret-7f3a9c"] {
            for (what, text) in [("log", g.log), ("metrics", metrics), ("check-config", checkOut + checkErr)] + answers.map({ ("answer", $0) }) {
                #expect(!text.contains(secret), "the secret appeared in the \(what)")
            }
        }
    }

    @Test func aMissingSecretFailsAtStartNamingTheKeyNotTheValue() throws {
        let dir = RedisProcess.makeDirectory()
        let config = dir + "/gateway.yaml"
        for (source, expected) in [("{env: PORTCULLIS_TEST_UNSET_VARIABLE}", "environment variable PORTCULLIS_TEST_UNSET_VARIABLE is not set"),
                                   ("{file: \(dir)/absent}", "cannot read \(dir)/absent"),
                                   ("{value: \"a\", env: B}", "needs exactly one of env, file or value"),
                                   ("\"inline-secret-xyz\"", "expected a mapping")] {
            try """
            upstreams:
              app: {url: "http://127.0.0.1:3001", request_headers: {x-secret: \(source)}}
            routes:
              - {path: /, upstream: app, auth: none}
            """.write(toFile: config, atomically: true, encoding: .utf8)
            let (status, _, err) = E2E.run(E2E.binary, ["check-config", config])
            #expect(status != 0)
            #expect(err.contains("upstreams.app.request_headers.x-secret"), "\(err)")
            #expect(err.contains(expected), "\(err)")
            #expect(!err.contains("inline-secret-xyz"))
        }
    }

    // MARK: check-config warns for open upstreams

    @Test func checkConfigWarnsForOpenPublicUpstreamsOnly() throws {
        let dir = RedisProcess.makeDirectory()
        let config = dir + "/gateway.yaml"
        try """
        upstreams:
          open: {url: "https://rvu-tracker.vercel.app", host_header: upstream}
          openip: {url: "http://203.0.113.7:8080"}
          locked: {url: "https://foliomind-backend.fly.dev", request_headers: {x-secret: {value: "v"}}}
          internal: {url: "http://foliomind.internal:8080"}
          private: {url: "http://10.1.2.3:3000"}
          private172: {url: "http://172.20.0.5:3000"}
          ula: {url: "http://[fd12::5]:3000"}
          loop: {url: "http://127.0.0.1:3000"}
          local: {url: "http://localhost:3000"}
          service: {url: "http://vcnotebook-api:10000"}
        routes:
          - {path: /, upstream: open, auth: none}
        """.write(toFile: config, atomically: true, encoding: .utf8)
        let (status, out, err) = E2E.run(E2E.binary, ["check-config", config])
        #expect(status == 0, "\(err)")
        let warnings = out.split(separator: "\n").filter { $0.hasPrefix("warning:") }
        #expect(warnings.count == 2, "\(out)")
        #expect(out.contains("upstreams.open (https://rvu-tracker.vercel.app)"))
        #expect(out.contains("upstreams.openip (http://203.0.113.7:8080)"))
        #expect(out.contains("docs/locking-upstreams.md"))

        // With the assertion on, every upstream can check that a request came through us.
        try (try String(contentsOfFile: config, encoding: .utf8) + """

        identity: {assertion: {issuer: "https://api.example.test"}}
        """).write(toFile: config, atomically: true, encoding: .utf8)
        let (status2, out2, _) = E2E.run(E2E.binary, ["check-config", config])
        #expect(status2 == 0)
        #expect(!out2.contains("warning:"), "\(out2)")

        // The assertion header cannot be an identity header under another spelling.
        try (try String(contentsOfFile: config, encoding: .utf8).replacingOccurrences(
            of: "identity: {assertion: {issuer: \"https://api.example.test\"}}",
            with: "identity: {assertion: {issuer: \"https://api.example.test\", header: X_User.Id}}"))
            .write(toFile: config, atomically: true, encoding: .utf8)
        let (status3, _, err3) = E2E.run(E2E.binary, ["check-config", config])
        #expect(status3 != 0)
        #expect(err3.contains("identity.assertion.header"), "\(err3)")
    }

    // MARK: Client certificates

    @Test func anUpstreamThatDemandsAClientCertificateGetsTheConfiguredOne() throws {
        let pki = try TestPKI()
        let server = try pki.leaf(["localhost", "IP:127.0.0.1"])
        let client = try pki.leaf(["portcullis-gateway"], clientAuth: true)
        let upstream = try EchoUpstream(tls: (server.certificate, server.key), clientCA: pki.caCertificate)
        let base = "url: \"https://127.0.0.1:\(upstream.port)\", ca_file: \"\(pki.caCertificate)\""
        let with = try GatewayProcess("""
        upstreams:
          app: {\(base), client_certificate: "\(client.certificate)", client_private_key: "\(client.key)"}
        routes:
          - {path: /, upstream: app, auth: none}
        """)
        #expect(E2E.curl(["\(with.url)/mtls"]).status == 200)

        let without = try GatewayProcess("""
        upstreams:
          app: {\(base)}
        routes:
          - {path: /, upstream: app, auth: none}
        """)
        #expect(E2E.curl(["\(without.url)/mtls"]).status == 502)
        #expect(without.waitForLog("upstream unreachable", timeout: 3), "\(without.log)")
        // The reason in the log is the missing certificate, not the reset that follows it.
        #expect(without.waitForLog("asked for a client certificate and none is configured", timeout: 3), "\(without.log)")

        // SIGHUP reloads the client certificate; a broken file is refused and the old one kept.
        let brokenKey = try Self.write("not a key\n", "broken.key")
        let dir = RedisProcess.makeDirectory()
        let certificate = dir + "/client.pem"
        let key = dir + "/client.key"
        try FileManager.default.copyItem(atPath: client.certificate, toPath: certificate)
        try FileManager.default.copyItem(atPath: client.key, toPath: key)
        let reloading = try GatewayProcess("""
        upstreams:
          app: {\(base), client_certificate: "\(certificate)", client_private_key: "\(key)"}
        routes:
          - {path: /, upstream: app, auth: none}
        """)
        try FileManager.default.removeItem(atPath: key)
        try FileManager.default.copyItem(atPath: brokenKey, toPath: key)
        reloading.send(SIGHUP)
        #expect(reloading.waitForLog("configuration reload refused"), "\(reloading.log)")
        #expect(reloading.log.contains(key), "the refusal names the file")
        #expect(E2E.curl(["\(reloading.url)/after-bad-reload"]).status == 200)

        // check-config checks the pair.
        let mismatched = try pki.leaf(["other"], clientAuth: true)
        let config = try Self.write("""
        upstreams:
          app: {\(base), client_certificate: "\(client.certificate)", client_private_key: "\(mismatched.key)"}
        routes:
          - {path: /, upstream: app, auth: none}
        """, "mismatch.yaml")
        let (status, _, err) = E2E.run(E2E.binary, ["check-config", config])
        #expect(status != 0)
        #expect(err.contains("upstreams.app.client_private_key") && err.contains("does not match"), "\(err)")
    }

    // MARK: The signed identity assertion

    static func assertionGateway(_ upstream: EchoUpstream, assertion: String, store: String = "",
                                 extraUpstream: String = "") throws -> GatewayProcess {
        try GatewayProcess("""
        upstreams:
          app: {url: "http://127.0.0.1:\(upstream.port)"}
          other: {url: "http://localhost:\(upstream.port)"}\(extraUpstream)
        routes:
          - {path: /other, upstream: other, auth: required}
          - {path: /public, upstream: app, auth: none}
          - {path: /, upstream: app, auth: required}
        \(AuthFixtures.providers.replacingOccurrences(of: "claims: {email: X-User-Email}}",
                                                     with: "claims: {email: X-User-Email}, assertion: \(assertion)}"))
        \(store)
        """, adminToken: "admin-token-0123456789")
    }

    /// Fetches the JWKS from `url` into a file; returns its path and text.
    static func jwks(_ url: String) throws -> (path: String, text: String, cacheControl: String) {
        let (_, out, _) = E2E.run("/usr/bin/curl", ["-s", "-D", "-", url])
        let parts = out.components(separatedBy: "\r\n\r\n")
        let text = parts.dropFirst().joined(separator: "\r\n\r\n")
        let cacheControl = parts.first?.split(separator: "\r\n").first { $0.lowercased().hasPrefix("cache-control:") }
            .map { String($0.dropFirst(14)).trimmingCharacters(in: .whitespaces) } ?? ""
        return (try write(text, "jwks-\(UUID().uuidString).json"), text, cacheControl)
    }

    static func verify(_ jwksPath: String, _ token: String, audience: String, algorithm: String = "ES256",
                       secret: String? = nil) -> (ok: Bool, output: String) {
        let (status, out, err) = E2E.run(python, [verifier, jwksPath, token, "https://api.example.test", audience, algorithm]
            + (secret.map { [$0] } ?? []))
        return (status == 0, out + err)
    }

    @Test func theAssertionVerifiesWithAnIndependentLibraryAndForgedOnesNeverPass() throws {
        let upstream = try EchoUpstream()
        let g = try Self.assertionGateway(upstream, assertion: "{issuer: \"https://api.example.test\", lifetime: 60s}")
        let token = try AuthFixtures.mint(g, "app", ["--sub", "user-42"])
        let forged = "eyJhbGciOiJub25lIn0.eyJzdWIiOiJhZG1pbiJ9."
        let (status, echo, _) = try Self.echo(g, "GET /visits HTTP/1.1\r\nHost: x\r\n\(token)\r\nX-Portcullis-Assertion: \(forged)\r\nx.portcullis.assertion: \(forged)\r\n\r\n")
        #expect(status == 200)
        let assertions = echo?.values("x-portcullis-assertion") ?? []
        try #require(assertions.count == 1, "\(echo?.headers ?? [])")
        #expect(assertions[0] != forged)

        for url in ["\(g.url)\("/.well-known/portcullis/jwks.json")", "http://127.0.0.1:\(g.adminPort)/.well-known/portcullis/jwks.json"] {
            let jwks = try Self.jwks(url)
            #expect(jwks.cacheControl.contains("max-age"), "\(url): \(jwks.cacheControl)")
            let result = Self.verify(jwks.path, assertions[0], audience: "http://127.0.0.1:\(upstream.port)")
            #expect(result.ok, "\(result.output)")
            let claims = try JSONSerialization.jsonObject(with: Data(result.output.utf8)) as? [String: Any] ?? [:]
            #expect(claims["sub"] as? String == echo?.values("x-user-id").first)
            #expect(claims["sub"] as? String == "user-42")
            #expect(claims["provider"] as? String == "app")
            #expect(claims["iss"] as? String == "https://api.example.test")
            let iat = claims["iat"] as? Int ?? 0, exp = claims["exp"] as? Int ?? 0
            #expect(exp - iat == 60)
            #expect(claims["jti"] as? String != nil)
            // The audience is the upstream's own origin: another upstream's assertion is refused.
            #expect(!Self.verify(jwks.path, assertions[0], audience: "http://localhost:\(upstream.port)").ok)
        }
        // The other upstream gets an assertion for its own origin.
        let other = try Self.echo(g, "GET /other HTTP/1.1\r\nHost: x\r\n\(token)\r\n\r\n").echo
        let jwks = try Self.jwks("\(g.url)/.well-known/portcullis/jwks.json")
        let otherAssertion = other?.values("x-portcullis-assertion").first ?? ""
        let otherResult = Self.verify(jwks.path, otherAssertion, audience: "http://localhost:\(upstream.port)")
        #expect(otherResult.ok, "\(otherResult.output)")

        // Unauthenticated requests carry none, and a client's forged one never passes.
        let anonymous = try Self.echo(g, "GET /public HTTP/1.1\r\nHost: x\r\nX-Portcullis-Assertion: \(assertions[0])\r\nX_Portcullis_Assertion: \(forged)\r\n\r\n").echo
        #expect(anonymous?.values("x-portcullis-assertion") == [])
        #expect(!(anonymous?.headers.contains { $0.1 == forged || $0.1 == assertions[0] } ?? true))

        // Reused for the same credential and upstream (within half the lifetime).
        let again = try Self.echo(g, "GET /visits HTTP/1.1\r\nHost: x\r\n\(token)\r\n\r\n").echo
        #expect(again?.values("x-portcullis-assertion") == assertions)
        // POST on the JWKS is refused; no route shadows it.
        #expect(try Self.echo(g, "POST /.well-known/portcullis/jwks.json HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n").status == 405)
    }

    @Test func configuredKeysAreAllPublishedAndTheFirstSigns() throws {
        let upstream = try EchoUpstream()
        let k1 = AuthFixtures.keyPair("assertion-ed-1", ["-algorithm", "ED25519"]).0
        let k2 = AuthFixtures.keyPair("assertion-ed-2", ["-algorithm", "ED25519"]).0
        let g = try Self.assertionGateway(upstream, assertion: "{issuer: \"https://api.example.test\", algorithm: EdDSA, signing_keys: [\"\(k1)\", \"\(k2)\"]}")
        let token = try AuthFixtures.mint(g, "app")  // a whole header line
        let assertion = try Self.echo(g, "GET /v HTTP/1.1\r\nHost: x\r\n\(token)\r\n\r\n").echo?.values("x-portcullis-assertion").first ?? ""
        let jwks = try Self.jwks("\(g.url)/.well-known/portcullis/jwks.json")
        let document = try JSONSerialization.jsonObject(with: Data(jwks.text.utf8)) as? [String: Any]
        let keys = document?["keys"] as? [[String: Any]] ?? []
        #expect(keys.count == 2, "the second key is published before it signs: \(jwks.text)")
        #expect(keys.allSatisfy { $0["kty"] as? String == "OKP" && $0["d"] == nil }, "public halves only")
        try #require(assertion.split(separator: ".").count == 3, "no assertion reached the app")
        let header = try JSONSerialization.jsonObject(with: Data(base64URL: String(assertion.split(separator: ".")[0])) ?? Data()) as? [String: Any]
        #expect(header?["kid"] as? String == keys.first?["kid"] as? String, "the first key signs")
        #expect(header?["alg"] as? String == "EdDSA")
        #expect(Self.verify(jwks.path, assertion, audience: "http://127.0.0.1:\(upstream.port)", algorithm: "EdDSA").ok)
    }

    @Test func hs256AssertionsUseTheSecretAndPublishNothing() throws {
        let upstream = try EchoUpstream()
        let secret = "assertion-secret-0123456789abcdef0123"
        let g = try Self.assertionGateway(upstream, assertion: "{issuer: \"https://api.example.test\", algorithm: HS256, secret: {value: \"\(secret)\"}}")
        let token = try AuthFixtures.mint(g, "app")  // a whole header line
        let assertion = try Self.echo(g, "GET /v HTTP/1.1\r\nHost: x\r\n\(token)\r\n\r\n").echo?.values("x-portcullis-assertion").first ?? ""
        let jwks = try Self.jwks("\(g.url)/.well-known/portcullis/jwks.json")
        #expect(jwks.text.trimmingCharacters(in: .whitespacesAndNewlines) == "{\"keys\":[]}")
        #expect(Self.verify(jwks.path, assertion, audience: "http://127.0.0.1:\(upstream.port)", algorithm: "HS256", secret: secret).ok)
        #expect(!Self.verify(jwks.path, assertion, audience: "http://127.0.0.1:\(upstream.port)", algorithm: "HS256", secret: secret + "x").ok)
        #expect(!g.log.contains(secret))
    }

    @Test func twoInstancesOnOneRedisVerifyEachOthersAssertions() throws {
        let redis = try RedisProcess()
        let upstream = try EchoUpstream()
        let store = "store: {redis: \"redis://127.0.0.1:\(redis.port)/0\"}"
        let a = try Self.assertionGateway(upstream, assertion: "{issuer: \"https://api.example.test\"}", store: store)
        let b = try Self.assertionGateway(upstream, assertion: "{issuer: \"https://api.example.test\"}", store: store)
        let token = try AuthFixtures.mint(a, "app")
        let fromA = try Self.echo(a, "GET /v HTTP/1.1\r\nHost: x\r\n\(token)\r\n\r\n").echo?.values("x-portcullis-assertion").first ?? ""
        let fromB = try Self.echo(b, "GET /v HTTP/1.1\r\nHost: x\r\n\(token)\r\n\r\n").echo?.values("x-portcullis-assertion").first ?? ""
        let jwksA = try Self.jwks("\(a.url)/.well-known/portcullis/jwks.json")
        let jwksB = try Self.jwks("\(b.url)/.well-known/portcullis/jwks.json")
        let audience = "http://127.0.0.1:\(upstream.port)"
        #expect(Self.verify(jwksB.path, fromA, audience: audience).ok, "B's JWKS verifies A's assertion")
        #expect(Self.verify(jwksA.path, fromB, audience: audience).ok, "A's JWKS verifies B's assertion")
    }
}

extension Data {
    init?(base64URL text: String) {
        var base64 = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while base64.count % 4 != 0 { base64 += "=" }
        self.init(base64Encoded: base64)
    }
}
