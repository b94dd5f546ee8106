import ArgumentParser
import Foundation
import Portcullis
import PortcullisAuth
import PortcullisProxy
#if canImport(Glibc)
import Glibc
#endif

/// What `portcullis demo` prints once the gateway is up: credentials that work,
/// one that is expired and one that is revoked, each with a curl line, and what
/// the demo app received for it (fetched here, over loopback, on a plain thread).
enum DemoWalkthrough {
    struct Case {
        var title: String
        var path: String
        var method: String = "GET"
        var header: String?
        var body: String?
    }

    /// The credentials the walkthrough uses, minted at start, and the story itself.
    struct Story: Sendable {
        let port: UInt16
        let adminPort: UInt16
        let adminToken: String
        let bearer: CredentialMinter.Credential
        let cookie: CredentialMinter.Credential
        let expired: CredentialMinter.Credential
        let revoked: CredentialMinter.Credential
        let refresh: CredentialMinter.Credential
        let loggedOut: CredentialMinter.Credential
        /// A Google-shaped ID token signed with the key the demo's key host publishes (nil
        /// when the configuration has no `google` provider).
        let googleToken: String?
        let googleJWKS: String
        /// The configuration has `sessions:` accepting the demo's Google tokens.
        let hasSessions: Bool

        init(_ configuration: GatewayConfiguration) throws {
            port = configuration.listen[0].address.port
            hasSessions = configuration.sessions?.accept.contains("google") == true
            adminPort = configuration.admin?.address.port ?? 9901
            adminToken = configuration.admin?.token ?? ""
            guard let app = configuration.providers.first(where: { $0.configuration.name == "app" }),
                  let web = configuration.providers.first(where: { $0.configuration.name == "web" }) else {
                throw ValidationError("the demo configuration needs providers named app (hs256) and web (nextauth)")
            }
            let now = Int64(Date().timeIntervalSince1970)
            let appMinter = try CredentialMinter(provider: app)
            let webMinter = try CredentialMinter(provider: web)
            bearer = try appMinter.mint(subject: "ios-user-42", now: now, lifetime: 3600, tokenID: randomTokenID(), email: "ios-user-42@example.com")
            cookie = try webMinter.mint(subject: "web-user-7", now: now, lifetime: 3600, tokenID: randomTokenID(), email: "web-user-7@example.com")
            expired = try appMinter.mint(subject: "ios-user-42", now: now - 7200, lifetime: 3600, tokenID: randomTokenID())
            revoked = try appMinter.mint(subject: "ios-user-43", now: now, lifetime: 3600, tokenID: randomTokenID(), email: "ios-user-43@example.com")
            refresh = try appMinter.mint(subject: "ios-user-44", now: now, lifetime: 30 * 86_400, tokenID: randomTokenID())
            loggedOut = try appMinter.mint(subject: "ios-user-45", now: now, lifetime: 3600, tokenID: randomTokenID())
            // Google's side: a key pair made now, its public half served by the key host.
            let key = try SigningKey.generate(.rs256)
            googleJWKS = "{\"keys\":[\(key.publicJWK(keyID: "demo-g1")?.serialized ?? "")]}"
            if let google = configuration.providers.first(where: { $0.configuration.kind == .google }) {
                let audience = google.configuration.audiences.first ?? ""
                let claims = JSONValue.object([
                    ("iss", .string("https://accounts.google.com")), ("aud", .string(audience)), ("azp", .string(audience)),
                    ("sub", .string("117512345678901234567")), ("email", .string("ada@gmail.com")), ("email_verified", .bool(true)),
                    ("iat", .integer(now)), ("exp", .integer(now + 3600)),
                ])
                googleToken = try TokenMinter.sign(claims: claims, key: key, keyID: "demo-g1")
            } else {
                googleToken = nil
            }
        }

        /// Prints the walkthrough: each step's curl line, the status, and what the app saw.
        func tell(configurationFile: String) {
            DemoWalkthrough.run([
                .init(title: "No credential on a protected route: 401 with a Bearer challenge", path: "/api/visits"),
                .init(title: "The iOS app's Bearer token: the visits app receives the verified user id",
                      path: "/api/visits/1", header: "Authorization: Bearer \(bearer.token)"),
                .init(title: "The web app's NextAuth session cookie: same route, same kind of identity",
                      path: "/api/visits", header: "Cookie: \(cookie.headerValue)"),
                .init(title: "A spoofed X-User-Id never reaches the app (public route)", path: "/api/books", header: "X-User-Id: admin"),
                .init(title: "An expired token: 401 invalid_token", path: "/api/visits", header: "Authorization: Bearer \(expired.token)"),
            ], port: port)
            if let googleToken {
                // The key host is fetched at start; wait (bounded) until the gateway has its key.
                let deadline = Date().addingTimeInterval(5)
                while Date() < deadline {
                    if let (_, _, body) = fetch(port: adminPort, method: "GET", path: "/keys", header: "Authorization: Bearer \(adminToken)"),
                       body.contains("demo-g1") { break }
                    usleep(100_000)
                }
                DemoWalkthrough.run([
                    .init(title: "A Google ID token (RS256, kid demo-g1, keys from the local key host as from Google's certs URL)",
                          path: "/api/visits", header: "Authorization: Bearer \(googleToken)"),
                    .init(title: "The iOS app exchanges its Google ID token in the body (credential: {json_field: idToken, providers: [google]})",
                          path: "/api/v1/auth/google", method: "POST", body: "{\"idToken\":\"\(googleToken)\"}"),
                    .init(title: "... where the app's own token is no Google ID token: 401",
                          path: "/api/v1/auth/google", method: "POST", body: "{\"idToken\":\"\(bearer.token)\"}"),
                ], port: port)
            }
            if let googleToken, hasSessions { tellSessions(googleToken) }
            DemoWalkthrough.run([
                .init(title: "A refresh call carries its token in the body (credential: {json_field: refreshToken}): verified like a Bearer token",
                      path: "/api/v1/auth/refresh", method: "POST", body: "{\"refreshToken\":\"\(refresh.token)\"}"),
            ], port: port)
            admin("DELETE", "{\"jti\":\"\(refresh.tokenID)\"}", title: nil)  // nothing to undo yet: shows found:false
            admin("POST", "{\"jti\":\"\(refresh.tokenID)\"}", title: "The refresh token is revoked through the admin API (or `portcullis revoke --jti`)")
            DemoWalkthrough.run([
                .init(title: "... and the refresh route refuses it in the body: the app never sees it",
                      path: "/api/v1/auth/refresh", method: "POST", body: "{\"refreshToken\":\"\(refresh.token)\"}"),
                .init(title: "Logout: the app answers 200, the gateway revokes the token it was sent with (revoke_on_success)",
                      path: "/api/v1/auth/logout", method: "POST", header: "Authorization: Bearer \(loggedOut.token)"),
            ], port: port)
            usleep(100_000)
            DemoWalkthrough.run([
                .init(title: "... the logged-out token is refused from now on",
                      path: "/api/notes", header: "Authorization: Bearer \(loggedOut.token)"),
            ], port: port)
            admin("DELETE", "{\"jti\":\"\(loggedOut.tokenID)\"}",
                  title: "A logout made by mistake is undone (DELETE /revocations, or `portcullis revoke --undo --jti`), on every instance")
            DemoWalkthrough.run([
                .init(title: "... and the token works again", path: "/api/notes", header: "Authorization: Bearer \(loggedOut.token)"),
            ], port: port)
            print("What the gateway counted (Prometheus text):")
            print("  curl -s -H 'Authorization: Bearer \(adminToken)' http://127.0.0.1:\(adminPort)/metrics | grep -E '^portcullis_(requests|auth_decisions)_total'\n")
            print("This demo ran with \(configurationFile); try your own with: portcullis run --config FILE")
            print("More: curl -s http://127.0.0.1:\(port)/health ; curl -s http://127.0.0.1:\(adminPort)/readyz ; Ctrl-C stops.\n")
            fflush(nil)
        }

        /// `sessions:`: the exchange, a refresh, a reused refresh ending the session, the devices.
        private func tellSessions(_ googleToken: String) {
            func post(_ title: String, _ path: String, _ body: String, header: String? = nil) -> [String: Any]? {
                print("## \(title)\n  curl -si -X POST \(header.map { "-H '\($0)' " } ?? "")-d '\(body)' http://127.0.0.1:\(port)\(path)")
                guard let (status, _, text) = fetch(port: port, method: "POST", path: path, header: header, body: body) else {
                    print("  -> no answer\n"); return nil
                }
                let object = try? JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any]
                let shown = object.map { o in o.keys.sorted().map { key in
                    let value = "\(o[key]!)"
                    return "\(key): \(value.count > 24 ? value.prefix(20) + "…" : value)"
                }.joined(separator: ", ") } ?? text
                print("  -> \(status)  \(shown)\n")
                fflush(nil)
                return status == 200 ? object : nil
            }
            let device = "{\"idToken\":\"\(googleToken)\",\"device_name\":\"Ada's iPhone\"}"
            guard let first = post("Mobile sign-in at the edge (sessions:): the Google ID token becomes the gateway's own session",
                                   "/auth/session", device),
                  let access = first["access_token"] as? String, let refresh = first["refresh_token"] as? String else { return }
            DemoWalkthrough.run([
                .init(title: "The session's access token (ES256, signed by the gateway) is accepted like any provider's",
                      path: "/api/notes", header: "Authorization: Bearer \(access)"),
            ], port: port)
            let second = post("Refresh: a new pair; the old refresh token is spent", "/auth/refresh", "{\"refresh_token\":\"\(refresh)\"}")
            usleep(2_100_000)  // past the demo's 1 s reuse grace (whole seconds)
            _ = post("The spent refresh token again, after the grace: a reuse, so the whole session ends",
                     "/auth/refresh", "{\"refresh_token\":\"\(refresh)\"}")
            if let newer = second?["access_token"] as? String {
                DemoWalkthrough.run([
                    .init(title: "... its newest access token is refused at once", path: "/api/notes", header: "Authorization: Bearer \(newer)"),
                ], port: port)
            }
            _ = post("Signing in again from another device", "/auth/session", "{\"idToken\":\"\(googleToken)\",\"device_name\":\"Ada's iPad\"}")
            if let again = post("... and once more from the phone", "/auth/session", device), let token = again["access_token"] as? String {
                print("## The device list (GET /auth/sessions), the current one marked")
                print("  curl -s -H 'Authorization: Bearer \(token)' http://127.0.0.1:\(port)/auth/sessions")
                if let (status, _, text) = fetch(port: port, method: "GET", path: "/auth/sessions", header: "Authorization: Bearer \(token)") {
                    print("  -> \(status)  \(text.trimmingCharacters(in: .whitespacesAndNewlines))\n")
                }
                fflush(nil)
            }
        }

        private func admin(_ method: String, _ body: String, title: String?) {
            if let title { print("## \(title)") }
            guard title != nil else { _ = fetch(port: adminPort, method: method, path: "/revocations", header: "Authorization: Bearer \(adminToken)", body: body); return }
            print("  curl -si -X \(method) -H 'Authorization: Bearer \(adminToken)' -d '\(body)' http://127.0.0.1:\(adminPort)/revocations")
            if let (status, _, text) = fetch(port: adminPort, method: method, path: "/revocations", header: "Authorization: Bearer \(adminToken)", body: body) {
                print("  -> \(status) \(text.trimmingCharacters(in: .whitespacesAndNewlines))\n")
            }
            fflush(nil)
        }
    }

    /// Runs the cases against the gateway and prints the curl line, the status
    /// and the identity the app saw.
    static func run(_ cases: [Case], port: UInt16) {
        for c in cases {
            let curl = "curl -si \(c.method == "GET" ? "" : "-X \(c.method) ")\(c.header.map { "-H '\($0)' " } ?? "")\(c.body.map { "-d '\($0)' " } ?? "")http://127.0.0.1:\(port)\(c.path)"
            print("## \(c.title)\n  \(curl)")
            guard let (status, head, body) = fetch(port: port, method: c.method, path: c.path, header: c.header, body: c.body) else {
                print("  -> no answer\n")
                continue
            }
            print("  -> \(status)\(head.isEmpty ? "" : "  \(head)")")
            if status == 200, let data = body.data(using: .utf8),
               let object = try? JSONSerialization.jsonObject(with: data) as? [String: Any],
               let headers = object["headers"] as? [String: String] {
                let seen = ["x-user-id", "x-auth-provider", "x-user-email"].compactMap { name in headers[name].map { "\(name): \($0)" } }
                print("  the \(object["app"] as? String ?? "app") app received: \(seen.isEmpty ? "no identity headers" : seen.joined(separator: ", "))")
            } else {
                print("  body: \(body.trimmingCharacters(in: .whitespacesAndNewlines))")
            }
            print("")
            fflush(nil)  // each step as it happens, also through a pipe or a file
        }
    }

    /// One blocking HTTP/1.1 exchange over loopback (never on a loop queue).
    static func fetch(host: String = "127.0.0.1", port: UInt16, method: String, path: String, header: String?,
                      body: String? = nil, timeoutSeconds: Int = 5) -> (Int, String, String)? {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var timeout = timeval(tv_sec: timeoutSeconds, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_port = port.bigEndian
        addr.sin_addr.s_addr = inet_addr(host)
        let connected = withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard connected == 0 else { return nil }
        var request = "\(method) \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\(header.map { "\($0)\r\n" } ?? "")"
        if let body { request += "Content-Type: application/json\r\nContent-Length: \(body.utf8.count)\r\n\r\n\(body)" } else { request += "\r\n" }
        let bytes = Array(request.utf8)
        guard send(fd, bytes, bytes.count, Int32(MSG_NOSIGNAL)) == bytes.count else { return nil }
        var response = [UInt8]()
        var buffer = [UInt8](repeating: 0, count: 16384)
        while true {
            let n = recv(fd, &buffer, buffer.count, 0)
            if n <= 0 { break }
            response.append(contentsOf: buffer[0..<n])
        }
        let text = String(decoding: response, as: UTF8.self)
        guard let split = text.range(of: "\r\n\r\n") else { return nil }
        let headLines = text[..<split.lowerBound].components(separatedBy: "\r\n")
        let status = Int(headLines.first?.split(separator: " ").dropFirst().first ?? "") ?? 0
        let interesting = headLines.dropFirst().filter { $0.lowercased().hasPrefix("www-authenticate") || $0.lowercased().hasPrefix("location") }
        return (status, interesting.joined(separator: "; "), String(text[split.upperBound...]))
    }
}

/// The demo's key host: answers every request with the JWKS whose private half signed
/// the demo's Google-shaped token, cacheable as Google's certs URL is.
final class DemoKeyHost: LocalHandler {
    let jwks: String
    init(jwks: String) { self.jwks = jwks }

    func handle(_ request: RequestView, body: UnsafeRawBufferPointer) -> LocalResponse {
        var response = LocalResponse.json(200, jwks)
        response.headers.append(("cache-control", "public, max-age=3600"))
        return response
    }
}
