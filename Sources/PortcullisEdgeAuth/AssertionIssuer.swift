import Logging
import PortcullisAuth
import PortcullisCore

/// Signs the identity assertion an upstream receives on every authenticated request:
/// a compact JWS with header `{"alg","typ":"JWT","kid"}` and claims `iss`, `aud` (the
/// upstream URL's origin), `sub` (exactly the user-id header's value), `provider`, the
/// configured identity claims (`identity.claims`, as the strings the claim headers
/// carry), `iat`, `exp` (`iat + lifetime`) and `jti`.
///
/// Reuse: an assertion is memoized on the verified identity (`VerifiedIdentity.memo`,
/// which lives in the verified-token cache) per upstream and key generation, and sent
/// again until half its lifetime has passed; so a cached credential costs a lookup, not a
/// signature. Each request still passes the revocation check before its assertion is added.
///
/// Threading: immutable; called on loop queues concurrently.
final class AssertionIssuer: Sendable {
    let keys: AssertionKeys
    let header: String
    let issuer: String
    let lifetime: Double
    /// Audience of each upstream, by index.
    let audiences: [String]
    /// Claims copied into the assertion, in configuration order, without the registered names.
    let claims: [String]
    let logger: Logger

    /// `purpose` marks the lookup hook's assertion (`AssertionKeys.lookupAssertion`): never a
    /// request's.
    static let registeredClaims: Set<String> = ["iss", "aud", "sub", "provider", "iat", "exp", "jti", "nbf", "purpose"]

    init(keys: AssertionKeys, audiences: [String], claims: [String], logger: Logger) {
        self.keys = keys
        self.header = keys.settings.header
        self.issuer = keys.settings.issuer
        self.lifetime = keys.settings.lifetime
        self.audiences = audiences
        var seen = Set<String>()
        self.claims = claims.filter { !Self.registeredClaims.contains($0) && seen.insert($0).inserted }
        self.logger = logger
    }

    /// The assertion for `identity` (whose user id is `userID`) towards upstream `upstream`.
    func assertion(for identity: VerifiedIdentity, userID: String, upstream: Int, now: Double) -> String? {
        // A hit costs an atomic load and the memo's lock; the key is read only to sign.
        if let cached = identity.memo.value(slot: keys.generation << 20 | upstream, now: now) { return cached }
        var members: [(String, JSONValue)] = [
            ("aud", .string(audiences[upstream])),
            ("sub", .string(userID)),
            ("provider", .string(identity.provider)),
        ]
        for claim in claims {
            if let value = identity.claim(claim) { members.append((claim, .string(value))) }
        }
        let token: String, slot: Int
        do {
            let signed = try keys.sign(members, now: now)
            token = signed.token
            slot = signed.generation << 20 | upstream
        } catch {
            logger.error("cannot sign the identity assertion; the request goes without it", metadata: ["reason": "\(error)"])
            return nil
        }
        identity.memo.store(token, slot: slot, until: Double(Int64(now)) + lifetime / 2)
        return token
    }
}
