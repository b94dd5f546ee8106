import Foundation
import PortcullisTestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Secrets from files everywhere (#35.2), through the real binary: every secret of the file
/// takes `{file: …}`, `{env: …}`, `{value: …}` (and a string where it always took one); a file
/// is read again on reload; the shipped placeholders are refused unless the file says
/// `demo: true`; the Redis and Sentinel passwords sit beside the URL.
@Suite(.serialized) struct SecretsEndToEndTests {
    static let appSecret = "secrets-app-secret-0123456789abcdef0123"
    static let adminToken = "secrets-admin-token-0123456789"
    static let sessionSecret = "secrets-session-secret-0123456789abcdef"

    /// A file holding `text` and a newline (as `echo` and Kubernetes' Secret volumes write it).
    static func secretFile(_ text: String) throws -> String {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("secret-\(UUID().uuidString)").path
        try (text + "\n").write(toFile: path, atomically: true, encoding: .utf8)
        chmod(path, 0o600)
        return path
    }

    /// A token of provider `app` minted by `portcullis mint` from `g`'s file (with `environment`
    /// for `{env: …}` secrets).
    static func mint(_ g: GatewayProcess, environment: [String: String] = [:]) -> String {
        E2E.run(E2E.binary, ["mint", "--config", g.configPath, "--provider", "app", "--sub", "alice", "--format", "token"],
                environment: environment).1.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    static func body(secret: String, sessions: String, upstream: EchoUpstream, extra: String = "") -> String {
        """
        providers:
          - {name: app, type: hs256, secret: \(secret)}
          - {name: google, type: google, audiences: ["ios.apps.googleusercontent.com"], public_key: "\(AuthFixtures.rsa.1)", key_id: "g1"}
        sessions:
          issuer: "https://api.example.test"
          accept: [google]
          refresh_token: {secret: \(sessions)}
          require_tls: false
        \(extra)
        upstreams:
          app: {url: "http://127.0.0.1:\(upstream.port)"}
        routes:
          - {path: /, upstream: app, auth: required}
        """
    }

    /// Each form, on each key that holds a secret: the gateway starts, the provider's secret
    /// verifies a token minted with it, the admin token opens the admin API, the session
    /// secret signs refresh tokens; nothing of any secret is in the log.
    @Test(arguments: ["file", "env", "value", "string"])
    func everySecretTakesEachForm(_ form: String) throws {
        let upstream = try EchoUpstream()
        var environment: [String: String] = [:]
        func spelled(_ secret: String, _ name: String) throws -> String {
            switch form {
            case "file": return "{file: \"\(try Self.secretFile(secret))\"}"
            case "env": environment[name] = secret; return "{env: \(name)}"
            case "value": return "{value: \"\(secret)\"}"
            default: return "\"\(secret)\""
            }
        }
        let adminSpelling = try spelled(Self.adminToken, "ADMIN_TOKEN")
        let g = try GatewayProcess(Self.body(secret: try spelled(Self.appSecret, "APP_SECRET"),
                                             sessions: try spelled(Self.sessionSecret, "SESSION_SECRET"), upstream: upstream),
                                   environment: environment)
        let text = try String(contentsOfFile: g.configPath, encoding: .utf8)
        let admin = text.replacingOccurrences(of: "admin: {address: \"127.0.0.1:\(g.adminPort)\"}",
                                              with: "admin: {address: \"127.0.0.1:\(g.adminPort)\", token: \(adminSpelling)}")
        try admin.write(toFile: g.configPath, atomically: true, encoding: .utf8)
        g.send(SIGHUP)
        #expect(waitUntil(10) { E2E.curl(["-H", "Authorization: Bearer \(Self.adminToken)", "http://127.0.0.1:\(g.adminPort)/sessions?user=x"]).status == 200 },
                "the admin token (\(form)) opens the admin API after the reload: \(g.log.suffix(600))")
        let token = Self.mint(g, environment: environment)
        let call = E2E.curl(["-H", "Authorization: Bearer \(token)", "\(g.url)/x"])
        #expect(call.status == 200, "the provider's secret (\(form)): \(call)")
        let mint = E2E.packageRoot.appendingPathComponent("Tests/PortcullisEndToEndTests/Fixtures/mint_jwt.py").path
        let forged = E2E.run("/usr/bin/python3", [mint, "another-secret-0123456789abcdef0123", #"{"sub":"alice","exp":"+60"}"#]).1
            .trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(E2E.curl(["-H", "Authorization: Bearer \(forged)", "\(g.url)/x"]).status == 401)
        let id = E2E.run(E2E.binary, ["mint", "--config", g.configPath, "--provider", "google", "--sub", "117", "--key", AuthFixtures.rsa.0,
                                      "--kid", "g1", "--format", "header"], environment: environment).1
            .trimmingCharacters(in: .whitespacesAndNewlines)
        let pair = E2E.curl(["-X", "POST", "-H", "content-type: application/json",
                             "-d", "{\"idToken\":\"\(id.dropFirst("Authorization: Bearer ".count))\"}", "\(g.url)/auth/session"])
        #expect(pair.status == 200 && pair.body.contains("rt1."), "the session secret (\(form)): \(pair)")
        for secret in [Self.appSecret, Self.adminToken, Self.sessionSecret] { #expect(!g.log.contains(secret)) }
    }

    /// A secret file is read again on every reload: rotating the provider's secret file and
    /// reloading makes tokens of the new secret pass and the old secret's fail.
    @Test func aRotatedSecretFileAppliesOnReload() throws {
        let upstream = try EchoUpstream()
        let file = try Self.secretFile(Self.appSecret)
        let g = try GatewayProcess(Self.body(secret: "{file: \"\(file)\"}", sessions: "\"\(Self.sessionSecret)\"", upstream: upstream),
                                   adminToken: Self.adminToken)
        let old = Self.mint(g)
        #expect(E2E.curl(["-H", "Authorization: Bearer \(old)", "\(g.url)/x"]).status == 200)
        let rotated = "secrets-rotated-secret-0123456789abcdef01"
        try (rotated + "\n").write(toFile: file, atomically: true, encoding: .utf8)
        let reload = E2E.curl(["-X", "POST", "-H", "Authorization: Bearer \(Self.adminToken)", "http://127.0.0.1:\(g.adminPort)/reload"])
        #expect(reload.status == 200, "\(reload)")
        #expect(E2E.curl(["-H", "Authorization: Bearer \(old)", "\(g.url)/x"]).status == 401, "the old secret no longer verifies")
        let new = Self.mint(g)
        #expect(E2E.curl(["-H", "Authorization: Bearer \(new)", "\(g.url)/x"]).status == 200, "mint reads the rotated file too")
        // A file that disappears is a refused reload naming the key and the file; the old secret serves on.
        unlink(file)
        let refused = E2E.curl(["-X", "POST", "-H", "Authorization: Bearer \(Self.adminToken)", "http://127.0.0.1:\(g.adminPort)/reload"])
        #expect(refused.status == 422 && refused.body.contains("providers[0].secret.file") && refused.body.contains("no such file"), "\(refused)")
        #expect(E2E.curl(["-H", "Authorization: Bearer \(new)", "\(g.url)/x"]).status == 200)
    }

    /// The shipped placeholders (change-me, replace-me) are refused in every secret, naming the
    /// key and never the value, unless the file says `demo: true` (then check-config warns).
    @Test func placeholdersAreRefusedOutsideADemoFile() throws {
        let upstream = try EchoUpstream()
        let placeholder = "demo-secret-change-me-0123456789abcdef0123"
        let cases: [(String, String, String)] = [
            ("\"\(placeholder)\"", "\"\(Self.sessionSecret)\"", "providers[0].secret"),
            ("{file: \"\(try Self.secretFile("replace-me-with-the-apps-hs256-secret-0123456789"))\"}", "\"\(Self.sessionSecret)\"", "providers[0].secret"),
            ("\"\(Self.appSecret)\"", "{value: \"\(placeholder)\"}", "sessions.refresh_token.secret"),
        ]
        for (secret, sessions, key) in cases {
            let yaml = "listen: [{address: \"127.0.0.1:1\"}]\n" + Self.body(secret: secret, sessions: sessions, upstream: upstream)
            let errors = E2E.configErrors(yaml)
            #expect(errors.contains(key) && errors.contains("is a placeholder") && !errors.contains("0123456789abcdef0123"), "\(key): \(errors)")
            let file = NSTemporaryDirectory() + "demo-\(UUID().uuidString).yaml"
            try ("demo: true\n" + yaml).write(toFile: file, atomically: true, encoding: .utf8)
            let (status, out, err) = E2E.run(E2E.binary, ["check-config", file])
            #expect(status == 0 && out.contains("warning: demo: true"), "\(out)\(err)")
        }
        let admin = E2E.configErrors("admin: {token: {env: PORTCULLIS_TEST_PLACEHOLDER}}\nupstreams: {a: {url: \"http://127.0.0.1:1\"}}\nroutes: [{path: /, upstream: a, auth: none}]")
        #expect(admin.contains("admin.token.env") || admin.contains("admin.token"), "\(admin)")
    }

    /// `store.password` beside the URL (from a file), and the URL's password loses to it: the
    /// gateway authenticates to a Redis that requires it; a wrong one is never ready.
    @Test func theRedisPasswordBesideTheURL() throws {
        let password = "redis-file-password-0123456789"
        let redis = try RedisProcess(extra: ["--requirepass", password])
        let upstream = try EchoUpstream()
        let g = try GatewayProcess("""
        providers:
          - {name: app, type: hs256, secret: "\(Self.appSecret)"}
        store: {redis: "redis://:wrong-in-the-url@127.0.0.1:\(redis.port)/0", password: {file: "\(try Self.secretFile(password))"}}
        upstreams:
          app: {url: "http://127.0.0.1:\(upstream.port)"}
        routes:
          - {path: /, upstream: app, auth: required}
        """, adminToken: Self.adminToken)
        #expect(E2E.curl(["-X", "POST", "-H", "Authorization: Bearer \(Self.adminToken)", "-d", #"{"jti":"pw-file-1"}"#,
                          "http://127.0.0.1:\(g.adminPort)/revocations"]).status == 201, "\(g.log.suffix(800))")
        #expect(redis.cli(["-a", password, "--no-auth-warning", "EXISTS", "portcullis:revoked:jti:pw-file-1"]) == "1")
        #expect(!g.log.contains(password))
        let errors = E2E.configErrors("store: {password: {value: x}}\nupstreams: {a: {url: \"http://127.0.0.1:1\"}}\nroutes: [{path: /, upstream: a, auth: none}]")
        #expect(errors.contains("store") && errors.contains("set store.redis, store.sentinel or store.cluster"), "\(errors)")
    }
}
