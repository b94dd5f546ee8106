import Synchronization

/// Who a verified credential says the caller is.
///
/// A value type with copy-on-write storage: the fields live in one class
/// instance, so copying an identity (out of the verified-token cache on every
/// hit, into the result, into the request) is one retain instead of one per
/// string and dictionary field. Setters copy the storage first when it is
/// shared.
public struct VerifiedIdentity: Sendable, Equatable {
    /// How the credential arrived.
    public enum Source: String, Sendable { case bearer, sessionCookie }

    private var storage: Storage

    /// The configured provider name that verified it.
    public var provider: String {
        get { storage.provider }
        set { uniqueStorage().provider = newValue }
    }
    /// `sub`.
    public var subject: String {
        get { storage.subject }
        set { uniqueStorage().subject = newValue }
    }
    /// `iss`, when the token has one (NextAuth cookies do not).
    public var issuer: String? {
        get { storage.issuer }
        set { uniqueStorage().issuer = newValue }
    }
    /// `exp`, seconds since the epoch.
    public var expiresAt: Double {
        get { storage.expiresAt }
        set { uniqueStorage().expiresAt = newValue }
    }
    /// `iat`, when present; without it `exp` minus the provider's maximum lifetime (the
    /// earliest it can have been issued), which subject revocations judge it by; nil when
    /// the provider has no maximum.
    public var issuedAt: Double? {
        get { storage.issuedAt }
        set { uniqueStorage().issuedAt = newValue }
    }
    /// `jti`, when present.
    public var tokenID: String? {
        get { storage.tokenID }
        set { uniqueStorage().tokenID = newValue }
    }
    /// `sid`, when present (OIDC session ID).
    public var sessionID: String? {
        get { storage.sessionID }
        set { uniqueStorage().sessionID = newValue }
    }
    /// Selected claims rendered as strings (strings as is, booleans
    /// `true`/`false`, numbers in JSON form), in the provider's configured
    /// order. Which claims: `ProviderConfiguration.forwardedClaims`. A short
    /// list searched linearly (`claim(_:)`): building it costs one
    /// allocation and no hashing, which a dictionary would on every
    /// verification.
    public var claimList: [IdentityClaim] {
        get { storage.claims }
        set { uniqueStorage().claims = newValue }
    }
    /// The value of forwarded claim `name`, if the token had it.
    public func claim(_ name: String) -> String? {
        for claim in storage.claims where claim.name == name { return claim.value }
        return nil
    }
    /// `claimList` as a dictionary (for display and tests; the request path
    /// uses `claim(_:)`). Setting it stores the pairs sorted by name.
    public var claims: [String: String] {
        get { Dictionary(storage.claims.map { ($0.name, $0.value) }, uniquingKeysWith: { first, _ in first }) }
        set { uniqueStorage().claims = IdentityClaim.list(newValue) }
    }
    /// Forwarded claims that are arrays of strings, element by element (in
    /// `claims` they appear joined with ","), for route claim rules.
    public var listClaims: [String: [String]] {
        get { storage.listClaims }
        set { uniqueStorage().listClaims = newValue }
    }
    /// Hex SHA-256 (first 128 bits) naming the credential for revocation when it carries
    /// no `jti`: of a JWS's signing input (header and payload, which its signature cannot
    /// change: an ECDSA signature has two valid forms, `s` and `n − s`), of a session
    /// cookie's whole value (an encrypted cookie cannot be changed and still decrypt).
    /// Bearer JWTs with a `jti` leave it nil (they are revoked by `jti`).
    public var credentialHash: String? {
        get { storage.credentialHash }
        set { uniqueStorage().credentialHash = newValue }
    }
    /// The hash a JWS without `jti` was revoked by before (its whole text): checked too, so
    /// a revocation recorded by an earlier version is never lost. Nil for other credentials.
    public var legacyCredentialHash: String? {
        get { storage.legacyCredentialHash }
        set { uniqueStorage().legacyCredentialHash = newValue }
    }
    public var source: Source {
        get { storage.source }
        set { uniqueStorage().source = newValue }
    }

    public init(provider: String, subject: String, issuer: String?, expiresAt: Double, issuedAt: Double?,
                tokenID: String?, sessionID: String?, claims: [String: String], listClaims: [String: [String]] = [:],
                credentialHash: String? = nil, source: Source) {
        self.init(provider: provider, subject: subject, issuer: issuer, expiresAt: expiresAt, issuedAt: issuedAt,
                  tokenID: tokenID, sessionID: sessionID, claimList: IdentityClaim.list(claims), listClaims: listClaims,
                  credentialHash: credentialHash, source: source)
    }

    public init(provider: String, subject: String, issuer: String?, expiresAt: Double, issuedAt: Double?,
                tokenID: String?, sessionID: String?, claimList: [IdentityClaim], listClaims: [String: [String]] = [:],
                credentialHash: String? = nil, legacyCredentialHash: String? = nil, source: Source) {
        storage = Storage(provider: provider, subject: subject, issuer: issuer, expiresAt: expiresAt, issuedAt: issuedAt,
                          tokenID: tokenID, sessionID: sessionID, claims: claimList, listClaims: listClaims,
                          credentialHash: credentialHash, source: source)
        storage.legacyCredentialHash = legacyCredentialHash
    }

    /// Values derived from this exact verified credential (the gateway's signed assertion
    /// per upstream), shared by every copy served from the verified-token cache, so they
    /// are made once per credential and cache lifetime. A changed identity starts empty.
    public var memo: IdentityMemo { storage.memo }

    /// The same identity on storage of its own (an empty memo): for a value kept on this
    /// identity's memo that must carry the identity without referring to its keeper.
    public func withStorageOfItsOwn() -> VerifiedIdentity {
        var copy = self
        copy.storage = storage.copy()
        return copy
    }

    /// The storage, copied first if another identity shares it.
    private mutating func uniqueStorage() -> Storage {
        if !isKnownUniquelyReferenced(&storage) { storage = storage.copy() }
        return storage
    }

    public static func == (lhs: VerifiedIdentity, rhs: VerifiedIdentity) -> Bool {
        lhs.storage === rhs.storage || lhs.storage.hasSameFields(as: rhs.storage)
    }
}

extension VerifiedIdentity {
    /// The fields of one identity.
    final class Storage: @unchecked Sendable {
        // @unchecked Sendable: mutated only through `uniqueStorage()`, that is
        // while exactly one identity refers to it, so a storage that another
        // thread can see is never written again.
        var provider: String
        var subject: String
        var issuer: String?
        var expiresAt: Double
        var issuedAt: Double?
        var tokenID: String?
        var sessionID: String?
        var claims: [IdentityClaim]
        var listClaims: [String: [String]]
        var credentialHash: String?
        var legacyCredentialHash: String?
        var source: Source
        /// Not copied by `copy()`: a modified identity derives its values anew.
        let memo = IdentityMemo()

        init(provider: String, subject: String, issuer: String?, expiresAt: Double, issuedAt: Double?,
             tokenID: String?, sessionID: String?, claims: [IdentityClaim], listClaims: [String: [String]],
             credentialHash: String?, source: Source) {
            self.provider = provider
            self.subject = subject
            self.issuer = issuer
            self.expiresAt = expiresAt
            self.issuedAt = issuedAt
            self.tokenID = tokenID
            self.sessionID = sessionID
            self.claims = claims
            self.listClaims = listClaims
            self.credentialHash = credentialHash
            self.source = source
        }

        func copy() -> Storage {
            let copy = Storage(provider: provider, subject: subject, issuer: issuer, expiresAt: expiresAt, issuedAt: issuedAt,
                               tokenID: tokenID, sessionID: sessionID, claims: claims, listClaims: listClaims,
                               credentialHash: credentialHash, source: source)
            copy.legacyCredentialHash = legacyCredentialHash
            return copy
        }

        func hasSameFields(as other: Storage) -> Bool {
            provider == other.provider && subject == other.subject && issuer == other.issuer
                && expiresAt == other.expiresAt && issuedAt == other.issuedAt && tokenID == other.tokenID
                && sessionID == other.sessionID && IdentityClaim.sameClaims(claims, other.claims) && listClaims == other.listClaims
                && credentialHash == other.credentialHash && legacyCredentialHash == other.legacyCredentialHash
                && source == other.source
        }
    }
}

/// A few values memoized for one verified identity, by slot (the gateway uses the
/// upstream's index), each good until a time. Any thread: a `Mutex` inline in the
/// object (no allocation until something is stored).
public final class IdentityMemo: Sendable {
    private struct Entry {
        let slot: Int
        let value: String
        let until: Double
    }
    private let entries = Mutex<[Entry]>([])
    /// Distinct slots kept; the oldest stored is replaced beyond it.
    static let capacity = 8
    /// One object derived once from the identity by the request path (the gateway's
    /// injected headers and grants): set at most once, the first store wins. A `Mutex`
    /// (uncontended: two atomic operations per read) rather than the standard library's
    /// `AtomicLazyReference`, whose `load` is not inlinable (a generic call into
    /// libswiftSynchronization and a metadata lookup per request: 0.16 µs in `perf` of the
    /// authenticated h2 row); swift-atomics would add a dependency to this module, which
    /// the fuzz build compiles on its own.
    private let derivedObject = Mutex<(any AnyObject & Sendable)?>(nil)

    /// What `storeDerived` kept, if anything (of any type: callers check theirs).
    @inline(__always)
    public var derived: (any AnyObject & Sendable)? { derivedObject.withLock { $0 } }

    /// Keeps `object` unless another was kept first; returns the one kept.
    @discardableResult
    public func storeDerived(_ object: any AnyObject & Sendable) -> any AnyObject & Sendable {
        derivedObject.withLock { kept in
            if let kept { return kept }
            kept = object
            return object
        }
    }

    /// The value stored for `slot` while `now` is before its `until`.
    public func value(slot: Int, now: Double) -> String? {
        entries.withLock { list in
            for entry in list where entry.slot == slot { return entry.until > now ? entry.value : nil }
            return nil
        }
    }

    public func store(_ value: String, slot: Int, until: Double) {
        entries.withLock { list in
            list.removeAll { $0.slot == slot }
            if list.count >= Self.capacity { list.removeFirst() }
            list.append(Entry(slot: slot, value: value, until: until))
        }
    }
}

/// One forwarded claim of a `VerifiedIdentity`, rendered as a string.
public struct IdentityClaim: Sendable, Equatable {
    public let name: String
    public let value: String

    public init(name: String, value: String) {
        self.name = name
        self.value = value
    }

    /// A dictionary's pairs in name order.
    static func list(_ claims: [String: String]) -> [IdentityClaim] {
        claims.sorted { $0.key < $1.key }.map { IdentityClaim(name: $0.key, value: $0.value) }
    }

    /// The same claims, in any order (compared as sorted lists, so
    /// repeated names count as often as they appear).
    static func sameClaims(_ lhs: [IdentityClaim], _ rhs: [IdentityClaim]) -> Bool {
        if lhs == rhs { return true }
        guard lhs.count == rhs.count else { return false }
        let order: (IdentityClaim, IdentityClaim) -> Bool = { ($0.name, $0.value) < ($1.name, $1.value) }
        return lhs.sorted(by: order) == rhs.sorted(by: order)
    }
}

/// The outcome of verifying one credential: never a bare boolean.
public enum VerificationResult: Sendable, Equatable {
    case verified(VerifiedIdentity)
    case failed(AuthFailure)

    public var identity: VerifiedIdentity? {
        if case .verified(let identity) = self { return identity }
        return nil
    }

    public var failure: AuthFailure? {
        if case .failed(let failure) = self { return failure }
        return nil
    }
}
