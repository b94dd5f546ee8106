/// The entry point the proxy calls: verifies a Bearer credential or session
/// cookies against the configured providers and returns a typed result.
///
/// Threading: immutable after construction except for each provider's key
/// snapshot (swapped by `updateKeys`) and the verified-token cache (sharded
/// locks). Safe to call from any number of threads; no call blocks on I/O.
public final class CredentialVerifier: Sendable {
    enum Provider: Sendable {
        case jws(JWTProvider)
        case cookie(SessionCookieProvider)

        var name: String {
            switch self {
            case .jws(let provider): return provider.policy.name
            case .cookie(let provider): return provider.policy.name
            }
        }
    }

    let providers: [Provider]
    private let indexByName: [String: Int]
    /// JWS providers whose credential is a cookie (Firebase session cookies): the cookie's
    /// name and the provider alone as the allowed set, both made once.
    private let jwsCookies: [(index: Int, cookie: String, only: Set<String>)]
    let cache: VerifiedTokenCache
    /// Largest Bearer credential considered; longer ones fail with `tooLarge`.
    public let maxTokenSize: Int

    /// Builds every provider's verifier. Keys for jwks/PEM providers may be
    /// absent until fetched (tokens then fail with `keysUnavailable`);
    /// hs256 providers build their key from `secret` unless `keys` has one.
    public init(providers configurations: [ProviderConfiguration], keys: [String: KeySet],
                cacheCapacity: Int = 16_384, maxTokenSize: Int = 16 * 1024) throws(AuthConfigurationError) {
        var providers = [Provider]()
        var indexByName = [String: Int]()
        var jwsCookies: [(index: Int, cookie: String, only: Set<String>)] = []
        for configuration in configurations {
            guard indexByName[configuration.name] == nil else { throw .duplicateProvider(configuration.name) }
            let policy = try ProviderPolicy(configuration)
            switch configuration.kind {
            case .nextauth, .authjs:
                providers.append(.cookie(try SessionCookieProvider(policy: policy, configuration: configuration)))
            case .hs256:
                var keySet = keys[configuration.name]
                if keySet == nil {
                    guard let secret = configuration.secret ?? configuration.secrets.first else {
                        throw .missingSetting(provider: configuration.name, setting: "secret")
                    }
                    do {
                        keySet = try KeySet(keys: policy.algorithms.sorted { $0.rawValue < $1.rawValue }.map { algorithm throws(KeyLoadingError) in
                            try VerificationKey(hmacSecret: Array(secret.utf8), keyID: configuration.keyID, algorithm: algorithm)
                        })
                    } catch {
                        throw .key(provider: configuration.name, error)
                    }
                }
                providers.append(.jws(JWTProvider(policy: policy, keys: keySet ?? .empty)))
            case .google, .apple, .firebase, .oidc, .firebaseSession:
                providers.append(.jws(JWTProvider(policy: policy, keys: keys[configuration.name] ?? .empty)))
            }
            indexByName[configuration.name] = providers.count - 1
            if configuration.kind == .firebaseSession {
                jwsCookies.append((providers.count - 1, configuration.cookieName ?? ProviderConfiguration.firebaseSessionCookie,
                                   [configuration.name]))
            }
        }
        for name in keys.keys where indexByName[name] == nil { throw .unknownProvider(name) }
        self.providers = providers
        self.indexByName = indexByName
        self.jwsCookies = jwsCookies
        self.cache = VerifiedTokenCache(capacity: cacheCapacity, providerCount: providers.count)
        self.maxTokenSize = maxTokenSize
    }

    /// Replaces one provider's key set (after a JWKS fetch) and drops that
    /// provider's cached verifications. Returns false for an unknown name or
    /// a session-cookie provider.
    @discardableResult
    public func updateKeys(provider name: String, keys: KeySet) -> Bool {
        guard let index = indexByName[name], case .jws(let provider) = providers[index] else { return false }
        let generation = provider.replaceKeys(keys)
        cache.invalidate(provider: index, generation: generation)
        return true
    }

    /// Verified-token cache lookups since start: hits, misses, evictions, and
    /// the entries held now. Takes each shard's lock once; for metrics scrapes.
    public func cacheStatistics() -> VerifiedTokenCacheStatistics {
        cache.statistics()
    }

    /// Names of the configured providers, in order.
    public var providerNames: [String] { providers.map(\.name) }

    @inline(__always)
    private func isAllowed(_ index: Int, _ allowed: Set<String>?) -> Bool {
        guard let allowed else { return true }
        return allowed.contains(providers[index].name)
    }

    /// Verifies a Bearer credential: a compact JWS, or a NextAuth / Auth.js
    /// session JWE as their `getToken` accepts from `Authorization: Bearer`.
    /// `providers` limits which are tried (nil = all). `now` is seconds since
    /// the epoch.
    public func verifyBearer(_ token: UnsafeRawBufferPointer, providers allowed: Set<String>?, now: Double) -> VerificationResult {
        verifyBearer(token, providers: allowed, now: now, appleRawNonce: nil)
    }

    /// As `verifyBearer(_:providers:now:)`, with the raw nonce an Apple
    /// client generated: the token's `nonce` must then equal
    /// hex(SHA-256(raw)). Such calls bypass the verified-token cache.
    public func verifyBearer(_ token: UnsafeRawBufferPointer, providers allowed: Set<String>?, now: Double,
                             appleRawNonce: String?) -> VerificationResult {
        if appleRawNonce == nil {
            return verifyBearer(token, providers: allowed, now: now, after: lookUpBearer(token, providers: allowed, now: now))
        }
        return verifyUncached(token, allowed: allowed, now: now, appleRawNonce: appleRawNonce, cacheKey: nil)
    }

    /// A Bearer credential's entry in the verified-token cache, looked up before anything
    /// else reads the token: a hit means these exact bytes were verified (and, as every
    /// cached credential, are made of the JOSE compact alphabet only: letters, digits, `-`,
    /// `_` and `.`), so a caller may skip its own syntax checks of them.
    public struct BearerLookup {
        /// The cached identity (a hit), unexpired at the lookup's `now` and from an allowed provider.
        public let identity: VerifiedIdentity?
        fileprivate let key: VerifiedTokenCache.Key?
    }

    /// Looks `token` up in the verified-token cache (one keyed hash of it, one shard lock).
    @inline(__always)
    public func lookUpBearer(_ token: UnsafeRawBufferPointer, providers allowed: Set<String>?, now: Double) -> BearerLookup {
        guard cache.isEnabled, !token.isEmpty, token.count <= maxTokenSize else { return BearerLookup(identity: nil, key: nil) }
        let key = cache.key(bearer: token)
        return BearerLookup(identity: cache.lookup(key, now: now, allowed: { isAllowed($0, allowed) }), key: key)
    }

    /// `verifyBearer(_:providers:now:)` after `lookUpBearer` of the same token, providers and
    /// time: the hit itself, or the full verification (cached under the lookup's key).
    public func verifyBearer(_ token: UnsafeRawBufferPointer, providers allowed: Set<String>?, now: Double,
                             after lookup: BearerLookup) -> VerificationResult {
        if let identity = lookup.identity { return .verified(identity) }
        return verifyUncached(token, allowed: allowed, now: now, appleRawNonce: nil, cacheKey: lookup.key)
    }

    private func verifyUncached(_ token: UnsafeRawBufferPointer, allowed: Set<String>?, now: Double, appleRawNonce: String?,
                                cacheKey: VerifiedTokenCache.Key?) -> VerificationResult {
        guard !token.isEmpty else { return .failed(AuthFailure(.noCredential)) }
        guard token.count <= maxTokenSize else { return .failed(AuthFailure(.tooLarge)) }
        // Only a credential of the compact alphabet is cached (see `BearerLookup`): a JWS or
        // JWE that verified is one, unless a decoder was lenient somewhere; checked here, on
        // the miss path, so a hit can stand for the syntax check.
        let cacheKey = cacheKey.flatMap { Self.isCompactAlphabet(token) ? $0 : nil }
        guard let segments = CompactSegments(token) else { return .failed(AuthFailure(.malformed)) }
        if segments.count == 5 { return verifyBearerJWE(token, allowed: allowed, now: now, cacheKey: cacheKey) }
        guard segments.count == 3 else { return .failed(AuthFailure(.malformed)) }

        let jws: JWSToken
        do { jws = try JWSToken.parsed(token, segments: segments) } catch { return .failed(AuthFailure(error)) }
        let nonceHex = appleRawNonce.map { raw in
            Array(digestBytes(.sha256, Array(raw.utf8)).map { byte in
                let digits = Array("0123456789abcdef".utf8)
                return [digits[Int(byte >> 4)], digits[Int(byte & 15)]]
            }.joined())
        }

        var best: AuthFailure?
        func record(_ failure: AuthFailure) {
            if best == nil || failure.stage > best!.stage { best = failure }
        }
        for index in providers.indices where isAllowed(index, allowed) {
            guard case .jws(let provider) = providers[index] else { continue }
            if let reason = provider.accepts(jws) {
                record(AuthFailure(reason, provider: provider.name))
                continue
            }
            switch provider.verify(jws, bytes: token, now: now, nonceHex: nonceHex) {
            case .success(let (identity, generation)):
                if let cacheKey {
                    cache.insert(cacheKey, identity: identity, validUntil: identity.expiresAt + provider.policy.leeway,
                                 provider: index, generation: generation)
                }
                return .verified(identity)
            case .failure(let failure):
                record(failure)
                // Another provider may hold the right key (two app secrets);
                // any later failure is this provider's final word.
                if failure.reason != .unknownKey && failure.reason != .signatureInvalid && failure.reason != .keysUnavailable {
                    return .failed(failure)
                }
            }
        }
        // Every provider the route allows turned the token down by its algorithm, type or
        // issuer: when a provider the route does not allow would take it up, say so (an app
        // token on a Google-only route is no "algorithm not allowed"). No signature is checked.
        if allowed != nil, best == nil || best!.stage <= 3 {
            for index in providers.indices where !isAllowed(index, allowed) {
                if case .jws(let provider) = providers[index], provider.accepts(jws) == nil {
                    return .failed(AuthFailure(.providerNotAccepted, provider: provider.name))
                }
            }
        }
        return .failed(best ?? AuthFailure(.noMatchingProvider))
    }

    /// Whether every byte of `token` is a base64url character or `.`.
    static func isCompactAlphabet(_ token: UnsafeRawBufferPointer) -> Bool {
        token.allSatisfy { $0 == UInt8(ascii: ".") || Base64URL.isAlphabet($0) }
    }

    /// Convenience for tests and the command line.
    public func verifyBearer(_ token: String, providers allowed: Set<String>? = nil, now: Double,
                             appleRawNonce: String? = nil) -> VerificationResult {
        var token = token
        return token.withUTF8 { verifyBearer(UnsafeRawBufferPointer($0), providers: allowed, now: now, appleRawNonce: appleRawNonce) }
    }

    private func verifyBearerJWE(_ token: UnsafeRawBufferPointer, allowed: Set<String>?, now: Double,
                                 cacheKey: VerifiedTokenCache.Key?) -> VerificationResult {
        var best: AuthFailure?
        for index in providers.indices where isAllowed(index, allowed) {
            guard case .cookie(let provider) = providers[index] else { continue }
            // v4 keys do not depend on the cookie name; v5 getToken uses the
            // configured cookie name as salt, so both forms are tried.
            let names = provider.isV4 ? [0] : Array(provider.cookieNames.indices)
            for nameIndex in names {
                switch provider.verify(token, nameIndex: nameIndex, now: now, source: .bearer) {
                case .success(let identity):
                    if let cacheKey {
                        cache.insert(cacheKey, identity: identity, validUntil: identity.expiresAt + provider.policy.leeway,
                                     provider: index, generation: 1)
                    }
                    return .verified(identity)
                case .failure(let failure):
                    if best == nil || failure.stage > best!.stage { best = failure }
                }
            }
        }
        return .failed(best ?? AuthFailure(.noMatchingProvider))
    }

    /// Verifies session cookies. `cookies` are the (name, value) pairs of the
    /// request's Cookie header(s); chunked cookies (`name.0`, `name.1`, …)
    /// are joined per the rule book. The `__Secure-` name is tried first.
    /// Returns `.noCredential` when no session cookie is present.
    public func verifySessionCookies(_ cookies: [(name: Substring, value: Substring)], providers allowed: Set<String>?,
                                     now: Double) -> VerificationResult {
        var best: AuthFailure?
        func record(_ failure: AuthFailure) {
            if best == nil || failure.stage > best!.stage { best = failure }
        }
        // A JWS in a cookie: verified as a Bearer token of that provider only, from the
        // cookie's own bytes.
        for entry in jwsCookies where isAllowed(entry.index, allowed) {
            guard let pair = cookies.first(where: { $0.name == entry.cookie && !$0.value.isEmpty }) else { continue }
            var value = pair.value
            switch value.withUTF8({ verifyBearer(UnsafeRawBufferPointer($0), providers: entry.only, now: now) }) {
            case .verified(let identity): return .verified(identity)
            case .failed(let failure): record(failure)
            }
        }
        for index in providers.indices where isAllowed(index, allowed) {
            guard case .cookie(let provider) = providers[index] else { continue }
            for (nameIndex, name) in provider.cookieNames.enumerated() {
                let candidates: [SessionCookieChunks.Candidate]
                switch SessionCookieChunks.candidates(named: name, in: cookies) {
                case .success(let list): candidates = list
                case .failure(let reason):
                    record(AuthFailure(reason, provider: provider.policy.name))
                    continue
                }
                for candidate in candidates {
                    let result = withBytes(of: candidate) { bytes -> Result<VerifiedIdentity, AuthFailure> in
                        guard bytes.count <= SessionCookieChunks.maxJoinedSize else {
                            return .failure(AuthFailure(.tooLarge, provider: provider.policy.name))
                        }
                        let key = cache.isEnabled ? cache.key(cookieName: name, value: bytes) : nil
                        if let key, let identity = cache.lookup(key, now: now, allowed: { $0 == index }) {
                            return .success(identity)
                        }
                        let result = provider.verify(bytes, nameIndex: nameIndex, now: now, source: .sessionCookie)
                        if case .success(let identity) = result, let key {
                            cache.insert(key, identity: identity, validUntil: identity.expiresAt + provider.policy.leeway,
                                         provider: index, generation: 1)
                        }
                        return result
                    }
                    switch result {
                    case .success(let identity): return .verified(identity)
                    case .failure(let failure): record(failure)
                    }
                }
            }
        }
        return .failed(best ?? AuthFailure(.noCredential))
    }

    private func withBytes<R>(of candidate: SessionCookieChunks.Candidate, _ body: (UnsafeRawBufferPointer) -> R) -> R {
        switch candidate {
        case .joined(let bytes):
            return bytes.withUnsafeBytes(body)
        case .whole(let value):
            if let result = value.utf8.withContiguousStorageIfAvailable({ body(UnsafeRawBufferPointer($0)) }) { return result }
            return Array(value.utf8).withUnsafeBytes(body)
        }
    }
}
