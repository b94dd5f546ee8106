import Foundation
import Synchronization
import PortcullisAuth
import PortcullisCore

/// The keys identity assertions are signed with, and the JWKS that publishes them.
///
/// - `signing_keys: [a.pem, b.pem]`: `a` signs, both are published. To rotate, add the
///   new key second (published, not yet signing), let apps refresh their JWKS, then put
///   it first; `SIGHUP` re-reads the files (a bad file keeps the old keys, logged).
/// - no `signing_keys`: a key pair is generated at start; with `store.redis` every
///   instance uses the one stored in Redis (see `SharedAssertionKey`), so any instance's
///   JWKS verifies any instance's assertions.
/// - HS256: the shared `secret`; the JWKS is empty (a secret is never published).
///
/// `kid` is the key's RFC 7638 thumbprint, so every instance names a key alike.
///
/// Threading: any thread; the key list is replaced whole under `lock`.
public final class AssertionKeys: @unchecked Sendable {
    // @unchecked Sendable: `state` only under `lock`.
    public struct Key: Sendable {
        public let signing: SigningKey
        public let kid: String
        /// The base64url of `{"alg":…,"typ":"JWT","kid":…}`: the same for every assertion
        /// this key signs, so encoded once.
        let encodedHeader: [UInt8]

        public init(signing: SigningKey, kid: String) {
            self.signing = signing
            self.kid = kid
            let header = JSONValue.object([("alg", .string(signing.algorithm.rawValue)), ("typ", .string("JWT")), ("kid", .string(kid))])
            self.encodedHeader = TokenMinter.encodedHeader(header.serializedBytes)
        }
    }

    public struct LoadError: Error, CustomStringConvertible, Sendable {
        public var file: String
        public var reason: String
        public var description: String { "\(file): \(reason)" }
    }

    private struct State {
        var keys: [Key]
        var jwks: [UInt8]
        /// Bumped on every change, so assertions memoized under older keys are not reused.
        var generation: Int
    }

    public let settings: AssertionSettings
    private let lock = Lock()
    private var state: State
    /// `state.generation`, readable without the lock: the per-request memo lookup needs
    /// only this; the key itself is read (under the lock) when a new assertion is signed.
    private let currentGeneration = Atomic<Int>(1)

    public init(settings: AssertionSettings) throws(LoadError) {
        self.settings = settings
        let keys: [Key]
        if settings.algorithm == .hs256 {
            let key = SigningKey(hmacSecret: Array((settings.secret ?? "").utf8), algorithm: .hs256)
            keys = [Key(signing: key, kid: key.thumbprint)]
        } else if settings.signingKeys.isEmpty {
            let key: SigningKey
            do { key = try SigningKey.generate(settings.algorithm) } catch {
                throw LoadError(file: "identity.assertion", reason: "cannot generate a \(settings.algorithm.rawValue) key: \(error)")
            }
            keys = [Key(signing: key, kid: key.thumbprint)]
        } else {
            keys = try Self.loadFiles(settings)
        }
        state = State(keys: keys, jwks: Self.jwks(keys), generation: 1)
    }

    /// The generation of the key list (bumped on every change).
    var generation: Int { currentGeneration.load(ordering: .acquiring) }

    /// The key that signs now, and the generation of the key list.
    var current: (key: Key, generation: Int) { lock.withLock { (state.keys[0], state.generation) } }

    /// A compact JWS of `members` between `iss` and `iat`, `exp` (`iat + lifetime`), `jti`,
    /// signed with the current key: the shape of every assertion (`AssertionIssuer`'s on
    /// requests, the session lookup hook's). Returns the key list's generation too.
    public func sign(_ members: [(String, JSONValue)], now: Double) throws -> (token: String, generation: Int) {
        let (key, generation) = current
        let issuedAt = Int64(now)
        let claims = [("iss", JSONValue.string(settings.issuer))] + members
            + [("iat", .integer(issuedAt)), ("exp", .integer(issuedAt + Int64(settings.lifetime))), ("jti", .string(JWTText.randomID()))]
        let token = try TokenMinter.sign(encodedHeader: key.encodedHeader, rawClaims: JSONValue.object(claims).serializedBytes,
                                         key: key.signing)
        return (token, generation)
    }

    /// The assertion on the session lookup hook's request (`sessions.user.lookup`): `aud` the
    /// upstream's origin, `sub` `<provider>:<subject>` of the ID token being exchanged,
    /// `provider`, and `purpose: "session_lookup"`, so the app can tell the gateway's own
    /// request from any other (no route ever carries `purpose`). Nil when it cannot be signed.
    public func lookupAssertion(audience: String, provider: String, subject: String, now: Double) -> (header: String, token: String)? {
        let members: [(String, JSONValue)] = [("aud", .string(audience)), ("sub", .string(provider + ":" + subject)),
                                              ("provider", .string(provider)), ("purpose", .string("session_lookup"))]
        guard let signed = try? sign(members, now: now) else { return nil }
        return (settings.header, signed.token)
    }

    /// `{"keys": [...]}`: every published key.
    public var jwks: [UInt8] { lock.withLock { state.jwks } }

    public var keyIDs: [String] { lock.withLock { state.keys.map(\.kid) } }

    /// SIGHUP: read the key files again. Returns false when there are none to read.
    @discardableResult
    public func reload() throws(LoadError) -> Bool {
        guard settings.algorithm != .hs256, !settings.signingKeys.isEmpty else { return false }
        let keys = try Self.loadFiles(settings)
        install(keys)
        return true
    }

    /// Signs with `key` from now on (the key every instance shares through Redis); the
    /// keys used so far stay published, so assertions already sent still verify.
    public func adopt(_ key: SigningKey) {
        let kid = key.thumbprint
        lock.withLock {
            guard state.keys[0].kid != kid else { return }
            let keys = [Key(signing: key, kid: kid)] + state.keys.filter { $0.kid != kid }
            state = State(keys: keys, jwks: Self.jwks(keys), generation: state.generation + 1)
            currentGeneration.store(state.generation, ordering: .releasing)
        }
    }

    private func install(_ keys: [Key]) {
        lock.withLock {
            state = State(keys: keys, jwks: Self.jwks(keys), generation: state.generation + 1)
            currentGeneration.store(state.generation, ordering: .releasing)
        }
    }

    private static func loadFiles(_ settings: AssertionSettings) throws(LoadError) -> [Key] {
        var keys: [Key] = []
        for path in settings.signingKeys {
            let key = try loadKey(path, algorithm: settings.algorithm)
            let kid = key.thumbprint
            if keys.contains(where: { $0.kid == kid }) { throw LoadError(file: path, reason: "the same key is listed twice") }
            keys.append(Key(signing: key, kid: kid))
        }
        return keys
    }

    /// A PEM private key of the type `algorithm` needs (RS256: RSA ≥ 2048 bits, ES256:
    /// P-256, EdDSA: Ed25519).
    /// `purpose`: what the key signs, for the reason ("… cannot sign ES256 assertions").
    public static func loadKey(_ path: String, algorithm: JWSAlgorithm, purpose: String = "assertions") throws(LoadError) -> SigningKey {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw LoadError(file: path, reason: FileManager.default.fileExists(atPath: path) ? "cannot read the file (permission denied)" : "no such file")
        }
        let key: SigningKey
        do { key = try SigningKey(privateKeyPEM: String(decoding: data, as: UTF8.self)) } catch {
            throw LoadError(file: path, reason: "\(error)")
        }
        guard key.algorithm == algorithm else {
            throw LoadError(file: path, reason: "a \(key.algorithm.rawValue) key cannot sign \(algorithm.rawValue) \(purpose)"
                            + (algorithm == .es256 ? " (a P-256 key is needed: portcullis keys generate FILE)" : ""))
        }
        if algorithm == .rs256, let bits = key.rsaBits, bits < 2048 {
            throw LoadError(file: path, reason: "RSA keys need at least 2048 bits (this one has \(bits))")
        }
        guard key.publicJWK(keyID: "check") != nil else { throw LoadError(file: path, reason: "cannot export the public key") }
        return key
    }

    private static func jwks(_ keys: [Key]) -> [UInt8] {
        let list = keys.compactMap { $0.signing.publicJWK(keyID: $0.kid) }
        return Array((JSONValue.object([("keys", .array(list))]).serialized + "\n").utf8)
    }
}
