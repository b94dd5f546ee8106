import PortcullisSessions
import ArgumentParser
import Foundation
import Portcullis
import PortcullisAuth
import PortcullisCore

/// `portcullis mint`: test credentials for load tests and trials.
struct Mint: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Mint test credentials a configured provider accepts (HS256 secret, session-cookie secret, or a private key you hold).",
        discussion: """
        Prints one credential per line. hs256, nextauth and authjs providers use the secret from the configuration; \
        google, apple, firebase and oidc providers need --key with the private key of the issuer their keys point at \
        (for example a local test issuer's), and usually --kid.
        """)

    @Option(name: .long, help: "Path to the YAML configuration.")
    var config: String
    @Option(name: .long, help: "Provider name from the configuration.")
    var provider: String
    @Option(name: .long, help: "How many distinct credentials (distinct sub and jti).")
    var count: Int = 1
    @Option(name: .long, help: "Subject prefix; with --count > 1 a number is appended.")
    var sub: String = "user"
    @Option(name: .long, help: "Private key PEM file (RSA, EC P-256/P-384 or Ed25519) for public-key providers.")
    var key: String?
    @Option(name: .long, help: "kid header value.")
    var kid: String?
    @Option(name: .long, help: "Lifetime, e.g. 15m, 1h (default 1h; for the session provider, sessions.access_token.lifetime).")
    var ttl: String?
    @Option(name: .long, help: "Subtract this from iat/exp (e.g. 2h: an already expired credential).")
    var age: String = "0s"
    @Option(name: .long, help: "token (default), header (ready for curl -H) or json.")
    var format: String = "token"
    @Option(name: .long, help: ArgumentHelp(
        "A claim to set, NAME=VALUE (repeatable); VALUE is JSON when it parses as JSON, else a string. Replaces a minted claim of that name.",
        valueName: "name=value"))
    var claim: [String] = []

    func run() throws {
        let configuration = loadOrExit(config)
        guard let settings = configuration.providers.first(where: { $0.configuration.name == provider }) else {
            throw ValidationError("no provider '\(provider)' in \(config) (known: \(configuration.providers.map(\.configuration.name).joined(separator: ", ")))")
        }
        guard count >= 1, count <= 10_000_000 else { throw ValidationError("--count must be between 1 and 10000000") }
        let sessionLifetime = provider == SessionSettings.providerName ? configuration.sessions?.accessLifetime : nil
        let lifetime: Double
        if let ttl {
            guard let parsed = parseDurationSeconds(ttl), parsed > 0 else { throw ValidationError("--ttl: expected a duration such as 1h") }
            lifetime = parsed
        } else {
            lifetime = sessionLifetime ?? 3600
        }
        guard let ageSeconds = parseDurationSeconds(age) else { throw ValidationError("--age: expected a duration such as 2h") }
        guard ["token", "header", "json"].contains(format) else { throw ValidationError("--format: token, header or json") }
        var pem: String?
        var keyID = kid
        if let key {
            guard let data = FileManager.default.contents(atPath: key) else { throw ValidationError("cannot read --key \(key)") }
            pem = String(decoding: data, as: UTF8.self)
        } else if provider == SessionSettings.providerName, configuration.sessions != nil {
            // The gateway's own session access tokens: its first signing key, its thumbprint as kid.
            do {
                let signer = try SessionKeyFiles.signer(configuration)
                pem = signer.pem
                keyID = keyID ?? signer.keyID
            } catch { throw ValidationError("\(error)") }
        }
        var extra: [(String, JSONValue)] = []
        if provider == SessionSettings.providerName {
            // A session access token names its session (the logout and revocation key).
            if !claim.contains(where: { $0.hasPrefix("sid=") }) { extra.append(("sid", .string(randomTokenID()))) }
        }
        for item in claim {
            guard let equals = item.firstIndex(of: "="), equals != item.startIndex else {
                throw ValidationError("--claim: expected NAME=VALUE, got '\(item)'")
            }
            extra.append((String(item[..<equals]), Self.claimValue(String(item[item.index(after: equals)...]))))
        }
        let minter: CredentialMinter
        do { minter = try CredentialMinter(provider: settings, privateKeyPEM: pem, keyID: keyID) } catch {
            throw ValidationError("\(error)")
        }
        let now = Int64(Date().timeIntervalSince1970) - Int64(ageSeconds)
        var out = ""
        out.reserveCapacity(count * 400)
        for i in 1...count {
            let subject = count == 1 ? sub : "\(sub)\(i)"
            let credential: CredentialMinter.Credential
            do {
                credential = try minter.mint(subject: subject, now: now, lifetime: Int64(lifetime),
                                             tokenID: randomTokenID(), email: "\(subject)@example.com", extra: extra)
            } catch {
                throw ValidationError("\(error)")
            }
            switch format {
            case "header": out += "\(credential.headerName): \(credential.headerValue)\n"
            case "json":
                out += "{\"sub\":\"\(subject)\",\"jti\":\"\(credential.tokenID)\",\"header\":\"\(credential.headerName)\",\"value\":\"\(credential.headerValue)\"}\n"
            default: out += credential.token + "\n"
            }
            if out.utf8.count > 1 << 20 {
                Console.out(out)
                out.removeAll(keepingCapacity: true)
            }
        }
        Console.out(out)
    }
}

extension Mint {
    /// A `--claim` value: JSON when it parses as JSON (numbers, booleans, objects, arrays,
    /// quoted strings), else the text as a string.
    static func claimValue(_ text: String) -> JSONValue {
        guard let any = try? JSONSerialization.jsonObject(with: Data(text.utf8), options: [.fragmentsAllowed]) else {
            return .string(text)
        }
        return JSONValue(foundation: any) ?? .string(text)
    }
}

/// 128 random bits as hex.
func randomTokenID() -> String {
    var generator = SystemRandomNumberGenerator()
    return String(generator.next(), radix: 16) + String(generator.next(), radix: 16)
}
