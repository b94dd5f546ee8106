import ArgumentParser
import Foundation
import Portcullis
import PortcullisAuth
import PortcullisKeys

/// `portcullis verify`: what the gateway would decide for one credential.
struct Verify: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Verify one Bearer token or session-cookie value against the configured providers and print the identity or the failure.",
        discussion: "Providers whose keys are fetched at run time need --jwks FILE (a JWKS or PEM-certificate map) here.")

    @Option(name: .long, help: "Path to the YAML configuration.")
    var config: String
    @Option(name: .long, help: "Only this provider (default: all).")
    var provider: String?
    @Option(name: .long, help: "Key document for fetched-key providers: a JWKS file, applied to --provider.")
    var jwks: String?
    @Argument(help: "The token (a JWS, or a NextAuth/Auth.js JWE). Read from standard input when '-'.")
    var token: String

    func run() throws {
        let configuration = loadOrExit(config)
        var keys = configuration.providers.inlineKeys
        if let jwks {
            guard let provider else { throw ValidationError("--jwks needs --provider") }
            guard let data = FileManager.default.contents(atPath: jwks) else { throw ValidationError("cannot read \(jwks)") }
            do {
                let bytes = [UInt8](data)
                keys[provider] = try KeyDocumentFormat.detect(bytes).load(bytes)
            } catch { throw ValidationError("\(jwks): \(error)") }
        }
        let verifier = try CredentialVerifier(providers: configuration.providers.map(\.configuration), keys: keys)
        var text = token
        if text == "-" { text = readLine(strippingNewline: true) ?? "" }
        let now = Date().timeIntervalSince1970
        var result = verifier.verifyBearer(text, providers: provider.map { [$0] }, now: now)
        if case .failed(let failure) = result, failure.reason == .noMatchingProvider || failure.reason == .malformed {
            // Maybe a session cookie value: try the cookie providers by their names.
            let names = configuration.providers.flatMap(\.sessionCookieNames)
            if let name = names.first {
                let cookie = verifier.verifySessionCookies([(Substring(name), Substring(text))], providers: provider.map { [$0] }, now: now)
                if cookie.identity != nil { result = cookie }
            }
        }
        switch result {
        case .verified(let identity):
            print("verified: provider=\(identity.provider) sub=\(identity.subject) exp=\(Int64(identity.expiresAt)) jti=\(identity.tokenID ?? "-") claims=\(identity.claims.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: ","))")
        case .failed(let failure):
            print("refused: \(failure.errorCode?.rawValue ?? "no_credential") (\(failure.reason.rawValue)): \(failure.description)")
            throw ExitCode(1)
        }
    }
}
