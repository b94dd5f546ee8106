import PortcullisSessions
import ArgumentParser
import Foundation
import Portcullis
import PortcullisAuth
import PortcullisCore
import PortcullisEdgeAuth
import PortcullisKeys

/// `portcullis verify`: what the gateway would decide for one credential.
struct Verify: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Verify one Bearer token or session-cookie value against the configured providers and print the identity or the failure.",
        discussion: """
        Providers whose keys are fetched at run time need --jwks FILE (a JWKS or PEM-certificate map) here. \
        A verified credential is then looked up in the configured revocation store, as the gateway does: \
        store.state_dir's revocations.jsonl (read only; what a running gateway acknowledged is there) or \
        Redis (store.redis / store.sentinel). A revoked one is refused (exit 1). Without either, revocations \
        live in the running gateway's memory only, and the output says they were not checked.
        """)

    @Option(name: .long, help: "Path to the YAML configuration.")
    var config: String
    @Option(name: .long, help: "Only this provider (default: all).")
    var provider: String?
    @Option(name: .long, help: "Key document for fetched-key providers: a JWKS file, applied to --provider.")
    var jwks: String?
    @Flag(name: .long, help: "Do not consult the configured revocation store (store.state_dir or Redis).")
    var skipRevocations = false
    @Argument(help: "The credential: a token (JWS, or NextAuth/Auth.js JWE), 'Bearer <token>', 'Authorization: Bearer <token>', a session cookie 'name=value' or a whole 'Cookie: …' line. '-' reads it from standard input.")
    var token: String

    func run() throws {
        let configuration = loadOrExit(config)
        let names = configuration.providers.map(\.configuration.name)
        if let provider, !names.contains(provider) {
            throw ValidationError("unknown provider '\(provider)' (the configuration has: \(names.joined(separator: ", ")))")
        }
        var keys = configuration.providers.inlineKeys
        // The gateway's own session access tokens: the configured signing key files.
        if configuration.sessions != nil, provider == nil || provider == SessionSettings.providerName {
            do { keys[SessionSettings.providerName] = try SessionKeyFiles.keySet(configuration) } catch {
                if provider == SessionSettings.providerName { throw ValidationError("\(error)") }
            }
        }
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
        let allowed: Set<String>? = provider.map { [$0] }
        let result: VerificationResult
        switch Presented(text, cookieNames: configuration.providers.flatMap(\.sessionCookieNames)) {
        case .token(let token):
            var bearer = verifier.verifyBearer(token, providers: allowed, now: now)
            if case .failed(let failure) = bearer, failure.reason == .noMatchingProvider || failure.reason == .malformed,
               let name = configuration.providers.flatMap(\.sessionCookieNames).first {
                // Maybe a bare session-cookie value: try the cookie providers by their names.
                let cookie = verifier.verifySessionCookies([(Substring(name), Substring(token))], providers: allowed, now: now)
                if cookie.identity != nil { bearer = cookie }
            }
            result = bearer
        case .cookies(let pairs):
            result = verifier.verifySessionCookies(pairs, providers: allowed, now: now)
        }
        switch result {
        case .verified(let identity):
            let user = EdgeAuthenticator.userID(identity, prefixProvider: configuration.identity.prefixProvider)
            let outcome = skipRevocations ? nil : RevocationLookup.check(configuration, identity: identity)
            if case .revoked(let entry, let place)? = outcome {
                print("refused: invalid_token (revoked): revoked by \(entry) in \(place); the running gateway refuses it")
                throw ExitCode(1)
            }
            // `user` is the user id the gateway injects (`user_id_claim`, `prefix_provider`).
            print("verified: provider=\(identity.provider) user=\(user) exp=\(Int64(identity.expiresAt)) jti=\(identity.tokenID ?? "-") claims=\(identity.claims.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: ","))")
            print("revocation handle: \(Self.revocationHandle(identity))")
            print(Self.revocationNote(configuration, identity: identity, outcome: outcome))
        case .failed(let failure):
            print("refused: \(failure.errorCode?.rawValue ?? "no_credential") (\(failure.reason.rawValue)): \(failure.description)")
            throw ExitCode(1)
        }
    }

    /// What `verify` found in the configured revocation store (`RevocationLookup`): checked
    /// and not revoked, or not checked and why (memory only, Redis not answering,
    /// `--skip-revocations`), with how to list the user's revocations.
    static func revocationNote(_ configuration: GatewayConfiguration, identity: VerifiedIdentity,
                               outcome: RevocationLookup.Outcome?) -> String {
        let user = EdgeAuthenticator.userID(identity, prefixProvider: configuration.identity.prefixProvider)
        let list = "List the user's: GET /revocations?subject=\(user) on the admin listener"
        guard let outcome else { return "revocations: NOT checked (--skip-revocations). \(list)" }
        switch outcome {
        case .notRevoked(let place):
            return "revocations: checked in \(place): not revoked"
        case .revoked(let entry, let place):
            return "revocations: REVOKED by \(entry) in \(place)"
        case .notChecked(let reason):
            return "revocations: NOT checked: \(reason); the running gateway refuses this credential if it is revoked. \(list)"
        }
    }

    /// The body of `POST /revocations` (or `DELETE`) that revokes exactly this credential, as a
    /// logout route would: its `jti`, else its session id, else the credential hash (tokens
    /// without a `jti`, such as Google and Apple ID tokens).
    static func revocationHandle(_ identity: VerifiedIdentity) -> String {
        if let jti = identity.tokenID { return "{\"jti\":\(JSONText.quoted(jti))}" }
        if let sid = identity.sessionID { return "{\"session\":\(JSONText.quoted(sid))}" }
        if let hash = identity.credentialHash { return "{\"jti\":\(JSONText.quoted(hash))}   (the credential hash: it has no jti)" }
        return "none (no jti, session or hash)"
    }

    /// What was pasted: a token (bare, `Bearer …`, or `Authorization: Bearer …`), or cookies
    /// (`Cookie: a=b; c=d`, or `name=value` naming a configured session cookie).
    enum Presented {
        case token(String)
        case cookies([(name: Substring, value: Substring)])

        init(_ text: String, cookieNames: [String]) {
            var rest = Substring(text.trimmingCharacters(in: .whitespacesAndNewlines))
            if rest.lowercased().hasPrefix("authorization:") { rest = rest.dropFirst(14).drop { $0 == " " } }
            if rest.lowercased().hasPrefix("bearer ") { self = .token(String(rest.dropFirst(7).drop { $0 == " " })); return }
            var isCookieLine = false
            if rest.lowercased().hasPrefix("cookie:") { rest = rest.dropFirst(7); isCookieLine = true }
            let pairs: [(name: Substring, value: Substring)] = rest.split(separator: ";").compactMap { piece in
                let trimmed = piece.drop { $0 == " " }
                guard let equals = trimmed.firstIndex(of: "=") else { return nil }
                return (trimmed[..<equals], trimmed[trimmed.index(after: equals)...])
            }
            let namesACookie = pairs.contains { pair in cookieNames.contains { pair.name == $0 || pair.name.hasPrefix($0 + ".") } }
            if isCookieLine || namesACookie {
                self = .cookies(pairs)
            } else {
                self = .token(String(rest))
            }
        }
    }
}
