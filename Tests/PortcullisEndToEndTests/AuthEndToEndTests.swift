import Foundation
import Testing
import PortcullisTestSupport
#if canImport(Glibc)
import Glibc
#endif

/// Keys and credentials for the auth suites, made with real tools: `openssl`
/// for key pairs and the gateway's own `portcullis mint` for tokens.
enum AuthFixtures {
    static let directory: String = {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("portcullis-auth-\(getpid())").path
        try? FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        return dir
    }()

    /// (private PEM path, public PEM path), generated once per run. Suites run in parallel
    /// (`swift test --parallel`): one lock, so no suite mints with a key another replaced.
    static func keyPair(_ name: String, _ algorithmArguments: [String]) -> (String, String) {
        let privatePath = "\(directory)/\(name).key.pem"
        let publicPath = "\(directory)/\(name).pub.pem"
        keyLock.lock()
        defer { keyLock.unlock() }
        if !FileManager.default.fileExists(atPath: publicPath) {
            E2E.run("/usr/bin/openssl", ["genpkey"] + algorithmArguments + ["-out", privatePath])
            E2E.run("/usr/bin/openssl", ["pkey", "-in", privatePath, "-pubout", "-out", publicPath + ".tmp"])
            rename(publicPath + ".tmp", publicPath)  // present only once both halves are
        }
        return (privatePath, publicPath)
    }
    private static let keyLock = NSLock()

    static var rsa: (String, String) { keyPair("rsa", ["-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048"]) }
    static var p256: (String, String) { keyPair("p256", ["-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256"]) }

    static let appSecret = "test-app-secret-0123456789abcdef0123"
    static let webSecret = "test-web-secret-0123456789abcdef0123"

    /// Providers of every kind, keys inline (`public_key`), as a configuration fragment.
    static var providers: String {
        """
        providers:
          - {name: app, type: hs256, secret: "\(appSecret)", issuer: "rvu-tracker"}
          - {name: web, type: nextauth, secret: "\(webSecret)"}
          - {name: webv5, type: authjs, secret: "\(webSecret)"}
          - {name: google, type: google, audiences: ["ios.apps.googleusercontent.com", "web.apps.googleusercontent.com"], public_key: "\(rsa.1)", key_id: "g1"}
          - {name: apple, type: apple, audiences: ["com.example.folio"], public_key: "\(rsa.1)", key_id: "a1"}
          - {name: firebase, type: firebase, project_id: "vc-notebook", public_key: "\(rsa.1)", key_id: "f1"}
          - {name: corp, type: oidc, issuer: "https://id.example.test", audiences: ["api"], algorithms: [ES256], public_key: "\(p256.1)", key_id: "c1"}
        identity: {user_id_header: X-User-Id, claims: {email: X-User-Email}}
        """
    }

    /// `portcullis mint` output lines.
    static func mint(_ gateway: GatewayProcess, _ provider: String, _ extra: [String] = []) throws -> String {
        var arguments = ["--provider", provider] + extra
        switch provider {
        case "google": arguments += ["--key", rsa.0, "--kid", "g1"]
        case "apple": arguments += ["--key", rsa.0, "--kid", "a1"]
        case "firebase": arguments += ["--key", rsa.0, "--kid", "f1"]
        case "corp": arguments += ["--key", p256.0, "--kid", "c1"]
        default: break
        }
        guard let line = try gateway.mint(arguments).split(separator: "\n").first else { throw TestFailure("mint \(provider): no output") }
        return String(line)
    }

    static func base64url(_ text: String) -> String {
        Data(text.utf8).base64EncodedString().replacingOccurrences(of: "+", with: "-")
            .replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
    }
}

/// Authentication through the real binary: every provider's credential reaches
/// the unchanged app with its verified identity; every failure gets its exact
/// status, challenge and body and never reaches the app.
@Suite(.serialized)
struct AuthEndToEndTests {
    let upstream: EchoUpstream
    let gateway: GatewayProcess

    init() throws {
        upstream = try EchoUpstream(name: "visits")
        gateway = try GatewayProcess("""
        \(AuthFixtures.providers)
        upstreams:
          visits: {url: "http://127.0.0.1:\(upstream.port)"}
        routes:
          - {path: /api/visits, upstream: visits, auth: required}
          - {path: /api/verified, upstream: visits, auth: required, require_claims: {email_verified: true, hd: "example.com"}}
          - {path: /api/app-only, upstream: visits, auth: required, providers: [app]}
          - {path: /api/private, upstream: visits, auth: required, forward_authorization: false, forward_session_cookie: false}
          - {path: /api/cors, upstream: visits, auth: required, bypass_methods: [OPTIONS]}
          - {path: /dashboard, upstream: visits, auth: required, on_unauthenticated: redirect, sign_in_url: /api/auth/signin}
          - {path: /feed, upstream: visits, auth: optional}
          - {path: /, upstream: visits, auth: none}
        """)
    }

    func get(_ path: String, _ headers: [String] = [], method: String = "GET") -> (status: Int, body: String, head: String) {
        var arguments = ["-s", "-D", "-", "-o", "-", "-X", method, "--max-time", "10"]
        for h in headers { arguments += ["-H", h] }
        let (_, out, _) = E2E.run("/usr/bin/curl", arguments + ["\(gateway.url)\(path)"])
        let parts = out.components(separatedBy: "\r\n\r\n")
        let head = parts.first ?? ""
        let status = Int(head.split(separator: " ").dropFirst().first ?? "") ?? 0
        return (status, parts.dropFirst().joined(separator: "\r\n\r\n"), head)
    }

    func header(_ head: String, _ name: String) -> String? {
        for line in head.components(separatedBy: "\r\n") {
            let pair = line.split(separator: ":", maxSplits: 1)
            if pair.count == 2, pair[0].lowercased() == name.lowercased() { return pair[1].trimmingCharacters(in: .whitespaces) }
        }
        return nil
    }

    @Test(arguments: ["app", "web", "webv5", "google", "apple", "firebase", "corp"])
    func everyProvidersValidCredentialReachesTheAppWithItsUserId(_ provider: String) throws {
        let credential = try AuthFixtures.mint(gateway, provider, ["--sub", "u-\(provider)"])
        let r = get("/api/visits/7", [credential, "X-User-Id: attacker", "X-Auth-Provider: admin"])
        #expect(r.status == 200, "\(provider): \(r.body)")
        let echo = try Echo(r.body)
        #expect(echo.values("X-User-Id") == ["u-\(provider)"])
        #expect(echo.values("X-Auth-Provider") == [provider])
        #expect(echo.values("X-User-Email") == ["u-\(provider)@example.com"])
    }

    @Test(arguments: ["/api/visits", "/feed", "/public"])
    func spoofedIdentityHeadersNeverReachTheApp(_ path: String) throws {
        let credential = try AuthFixtures.mint(gateway, "app")
        let spoofs = ["X-User-Id: admin", "x-user-id: admin2", "X_User_Id: admin3", "X-USER-EMAIL: boss@example.com",
                      "X-Auth-Provider: google"]
        for headers in [spoofs, spoofs + [credential]] {
            let r = get(path, headers)
            if path == "/api/visits" && headers.count == spoofs.count {
                #expect(r.status == 401)  // spoofed identity is no credential
                continue
            }
            #expect(r.status == 200, "\(path): \(r.body)")
            let echo = try Echo(r.body)
            for value in echo.values("X-User-Id") + echo.values("X_User_Id") { #expect(!value.hasPrefix("admin")) }
            #expect(!echo.values("X-User-Email").contains("boss@example.com"))
            #expect(!echo.values("X-Auth-Provider").contains("google"))
        }
    }

    @Test func noCredentialIs401WithABareBearerChallenge() throws {
        let r = get("/api/visits")
        #expect(r.status == 401)
        #expect(header(r.head, "WWW-Authenticate") == "Bearer realm=\"portcullis\"")
        #expect(r.body.contains("\"error\":\"unauthorized\""))
        #expect(try upstream.seen().isEmpty)
    }

    @Test func expiredTokenIs401InvalidToken() throws {
        let credential = try AuthFixtures.mint(gateway, "app", ["--age", "3h", "--ttl", "1h"])
        let r = get("/api/visits", [credential])
        #expect(r.status == 401)
        #expect(header(r.head, "WWW-Authenticate")?.contains("error=\"invalid_token\"") == true)
        #expect(header(r.head, "WWW-Authenticate")?.contains("error_description=\"The access token expired\"") == true)
        #expect(r.body.contains("\"error\":\"invalid_token\""))
        #expect(try upstream.seen().isEmpty)
    }

    @Test func algNoneIsRefused() throws {
        let now = Int(Date().timeIntervalSince1970)
        let token = AuthFixtures.base64url("{\"alg\":\"none\",\"typ\":\"JWT\"}") + "."
            + AuthFixtures.base64url("{\"iss\":\"rvu-tracker\",\"sub\":\"admin\",\"iat\":\(now),\"exp\":\(now + 600)}") + "."
        let r = get("/api/visits", ["Authorization: Bearer \(token)"])
        #expect(r.status == 401)
        #expect(r.body.contains("invalid_token"))
        #expect(try upstream.seen().isEmpty)
    }

    @Test func tamperedSignatureIsRefused() throws {
        let credential = try AuthFixtures.mint(gateway, "google")
        let tampered = String(credential.dropLast(3)) + (credential.hasSuffix("AAA") ? "BBB" : "AAA")
        let r = get("/api/visits", [tampered])
        #expect(r.status == 401)
        #expect(r.body.contains("invalid_token"))
    }

    @Test func twoCredentialsAreAnInvalidRequest() throws {
        let bearer = try AuthFixtures.mint(gateway, "app")
        let cookie = try AuthFixtures.mint(gateway, "web")
        for headers in [[bearer, cookie], [bearer, bearer]] {
            let r = get("/api/visits", headers)
            #expect(r.status == 400)
            #expect(header(r.head, "WWW-Authenticate")?.contains("error=\"invalid_request\"") == true)
            #expect(r.body.contains("\"error\":\"invalid_request\""))
        }
        #expect(try upstream.seen().isEmpty)
    }

    @Test(arguments: ["Authorization: Bearer", "Authorization: Bearer a b", "Authorization: Bearer ===", "Authorization: Bearer tok\u{22}en"])
    func malformedAuthorizationIsAnInvalidRequest(_ line: String) throws {
        let r = get("/api/visits", [line])
        #expect(r.status == 400, "\(line): \(r.status)")
        #expect(r.body.contains("invalid_request"))
    }

    @Test func schemeIsCaseInsensitive() throws {
        let credential = try AuthFixtures.mint(gateway, "app")
        let token = credential.replacingOccurrences(of: "Authorization: Bearer ", with: "")
        #expect(get("/api/visits", ["Authorization: bEaReR \(token)"]).status == 200)
    }

    @Test func unmetRouteClaimsAre403InsufficientScope() throws {
        // Google tokens from `mint` carry email_verified: true but no hd.
        let credential = try AuthFixtures.mint(gateway, "google")
        let r = get("/api/verified", [credential])
        #expect(r.status == 403)
        #expect(header(r.head, "WWW-Authenticate")?.contains("error=\"insufficient_scope\"") == true)
        #expect(r.body.contains("insufficient_scope"))
        #expect(try upstream.seen().isEmpty)
    }

    @Test func routeProviderListIsEnforced() throws {
        #expect(get("/api/app-only", [try AuthFixtures.mint(gateway, "app")]).status == 200)
        let google = get("/api/app-only", [try AuthFixtures.mint(gateway, "google")])
        #expect(google.status == 401)
        #expect(google.body.contains("invalid_token"))
    }

    @Test func credentialsAreStrippedWhereConfigured() throws {
        let bearer = try AuthFixtures.mint(gateway, "app")
        var echo = try Echo(get("/api/private", [bearer]).body)
        #expect(!echo.has("Authorization"))
        #expect(echo.has("X-User-Id"))
        let cookie = try AuthFixtures.mint(gateway, "web")
        echo = try Echo(get("/api/private", [cookie + "; theme=dark"]).body)
        #expect(echo.values("Cookie") == ["theme=dark"])
        // The session cookie in a second Cookie field: the fields are joined (RFC 6265 §5.4).
        echo = try Echo(get("/api/private", ["Cookie: theme=dark", cookie]).body)
        #expect(echo.has("X-User-Id"))
        #expect(echo.values("Cookie") == ["theme=dark"])
        // Default routes forward both unchanged.
        echo = try Echo(get("/api/visits", [bearer]).body)
        #expect(echo.values("Authorization").first == bearer.replacingOccurrences(of: "Authorization: ", with: ""))
    }

    @Test func browserRouteRedirectsToSignInWithCallbackUrl() throws {
        let r = get("/dashboard/weekly?range=7d")
        #expect(r.status == 302)
        #expect(header(r.head, "Location") == "/api/auth/signin?callbackUrl=/dashboard/weekly%3Frange%3D7d")
        // Not for POST: an API client gets the 401.
        #expect(get("/dashboard/weekly", method: "POST").status == 401)
        #expect(get("/api/visits").status == 401)
    }

    @Test func optionalRoutePassesAnonymousButRefusesInvalid() throws {
        let anonymous = get("/feed")
        #expect(anonymous.status == 200)
        #expect(try !Echo(anonymous.body).has("X-User-Id"))
        let valid = get("/feed", [try AuthFixtures.mint(gateway, "web")])
        #expect(try Echo(valid.body).values("X-User-Id") == ["user"])
        let expired = get("/feed", [try AuthFixtures.mint(gateway, "app", ["--age", "3h"])])
        #expect(expired.status == 401)
    }

    @Test func preflightBypassesAuthWhereConfigured() throws {
        #expect(get("/api/cors", method: "OPTIONS").status == 200)
        #expect(get("/api/cors").status == 401)
        #expect(get("/api/visits", method: "OPTIONS").status == 401)
    }

    @Test func tokensNeverAppearInLogs() throws {
        let credential = try AuthFixtures.mint(gateway, "app")
        let token = credential.replacingOccurrences(of: "Authorization: Bearer ", with: "")
        func logged() -> Int { gateway.log.components(separatedBy: #""path":"/api/visits""#).count - 1 }
        let before = logged()
        _ = get("/api/visits?token=\(token.prefix(20))", [credential])
        _ = get("/api/visits", ["Authorization: Bearer \(token)x"])
        // Both requests are in the log before it is searched.
        _ = waitUntil(5) { logged() >= before + 2 }
        #expect(!gateway.log.contains(String(token.split(separator: ".")[2])))
        #expect(!gateway.log.contains(String(token.prefix(20))))
    }
}
