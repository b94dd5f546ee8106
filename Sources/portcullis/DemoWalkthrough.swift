import Foundation
import Portcullis
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
    }

    static func credentials(_ configuration: GatewayConfiguration) throws -> (bearer: CredentialMinter.Credential,
        cookie: CredentialMinter.Credential, expired: CredentialMinter.Credential, revoked: CredentialMinter.Credential) {
        let app = configuration.providers.first { $0.configuration.name == "app" }!
        let web = configuration.providers.first { $0.configuration.name == "web" }!
        let now = Int64(Date().timeIntervalSince1970)
        let appMinter = try CredentialMinter(provider: app)
        let webMinter = try CredentialMinter(provider: web)
        return (try appMinter.mint(subject: "ios-user-42", now: now, lifetime: 3600, tokenID: randomTokenID(), email: "ios-user-42@example.com"),
                try webMinter.mint(subject: "web-user-7", now: now, lifetime: 3600, tokenID: randomTokenID(), email: "web-user-7@example.com"),
                try appMinter.mint(subject: "ios-user-42", now: now - 7200, lifetime: 3600, tokenID: randomTokenID()),
                try appMinter.mint(subject: "ios-user-43", now: now, lifetime: 3600, tokenID: randomTokenID(), email: "ios-user-43@example.com"))
    }

    /// Runs the cases against the gateway and prints the curl line, the status
    /// and the identity the app saw.
    static func run(_ cases: [Case], port: UInt16) {
        for c in cases {
            let curl = "curl -si \(c.method == "GET" ? "" : "-X \(c.method) ")\(c.header.map { "-H '\($0)' " } ?? "")http://127.0.0.1:\(port)\(c.path)"
            print("## \(c.title)\n  \(curl)")
            guard let (status, head, body) = fetch(port: port, method: c.method, path: c.path, header: c.header) else {
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
        }
    }

    /// One blocking HTTP/1.1 exchange over loopback (never on a loop queue).
    static func fetch(host: String = "127.0.0.1", port: UInt16, method: String, path: String, header: String?,
                      body: String? = nil) -> (Int, String, String)? {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var timeout = timeval(tv_sec: 5, tv_usec: 0)
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

extension DemoWalkthrough {
    /// `POST /revocations` on the admin listener.
    static func fetchAdmin(port: UInt16, token: String, body: String) -> (Int, String, String)? {
        fetch(port: port, method: "POST", path: "/revocations", header: "Authorization: Bearer \(token)", body: body)
    }
}
