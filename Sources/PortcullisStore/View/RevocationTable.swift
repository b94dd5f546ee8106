/// The revocation entries themselves: three hash maps keyed by the opaque ids.
/// A value type: each view holds its own copy; a snapshot given to several
/// views shares storage until one of them changes it (copy-on-write).
struct RevocationTable: Sendable, Equatable {
    struct SubjectCutoff: Sendable, Equatable {
        var before: Int64
        var until: Int64
    }

    /// jti → until.
    private(set) var tokens: [String: Int64] = [:]
    /// session id → until.
    private(set) var sessions: [String: Int64] = [:]
    private(set) var subjects: [String: SubjectCutoff] = [:]

    var count: Int { tokens.count + sessions.count + subjects.count }

    /// Adds or widens an entry (later `until`, later `before` win: a revocation
    /// never gets weaker by being applied twice or out of order).
    mutating func apply(_ revocation: Revocation, maxCredentialLifetime: Int64) {
        let until = revocation.expiry(maxCredentialLifetime: maxCredentialLifetime)
        switch revocation {
        case .token(let id, _):
            if let old = tokens[id], old >= until { return }
            tokens[id] = until
        case .session(let id, _):
            if let old = sessions[id], old >= until { return }
            sessions[id] = until
        case .subject(let subject, let before, _):
            var cutoff = subjects[subject] ?? SubjectCutoff(before: before, until: until)
            cutoff.before = max(cutoff.before, before)
            cutoff.until = max(cutoff.until, until)
            subjects[subject] = cutoff
        }
    }

    /// Drops entries whose `until` has passed.
    mutating func prune(now: Int64) {
        if tokens.contains(where: { $0.value <= now }) { tokens = tokens.filter { $0.value > now } }
        if sessions.contains(where: { $0.value <= now }) { sessions = sessions.filter { $0.value > now } }
        if subjects.contains(where: { $0.value.until <= now }) { subjects = subjects.filter { $0.value.until > now } }
    }

    /// The hot path: hash lookups only, no allocation (empty maps are skipped).
    /// A subject cutoff revokes a credential without `iat`: it cannot prove it is newer.
    @inline(__always)
    func isRevoked(tokenID: String?, sessionID: String?, subject: String, issuedAt: Int64?, now: Int64) -> Bool {
        if let tokenID, !tokens.isEmpty, let until = tokens[tokenID], until > now { return true }
        if let sessionID, !sessions.isEmpty, let until = sessions[sessionID], until > now { return true }
        if !subjects.isEmpty, let cutoff = subjects[subject], cutoff.until > now {
            guard let issuedAt else { return true }
            if issuedAt < cutoff.before { return true }
        }
        return false
    }

    /// Revocations that name `subject` (token and session entries carry no subject).
    func revocations(subject: String, now: Int64) -> [Revocation] {
        guard let cutoff = subjects[subject], cutoff.until > now else { return [] }
        return [.subject(subject, before: cutoff.before, until: cutoff.until)]
    }

    func contains(_ revocation: Revocation) -> Bool {
        switch revocation {
        case .token(let id, _): return tokens[id] != nil
        case .session(let id, _): return sessions[id] != nil
        case .subject(let s, _, _): return subjects[s] != nil
        }
    }
}
