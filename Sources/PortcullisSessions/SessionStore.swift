import Dispatch
import Foundation
import PortcullisAuth
import PortcullisCore
import PortcullisStore

/// One signed-in device: what the session endpoints keep per session (nothing per token).
public struct SessionRecord: Sendable, Equatable {
    public var id: String
    public var user: String
    public var provider: String
    public var device: String
    public var createdAt: Int64
    public var lastUsedAt: Int64
    /// The session ends at this time whatever its use (`refresh_token.lifetime`).
    public var expiresAt: Int64
    /// The counter of the current refresh token; the one before it is `counter - 1`.
    public var counter: UInt64
    /// When the current refresh token was issued (the reuse grace runs from here).
    public var rotatedAt: Int64
    /// The access token issued with the current refresh token (what a racing refresh within
    /// the grace gets again; kept in memory only, empty after a restart), and when it expires.
    public var accessToken: String
    public var accessExpiresAt: Int64
    /// The app's claims for this user from the lookup hook (a JSON object's text; "" none),
    /// carried by every access token of the session.
    public var claims: String = ""
    /// The ID provider's `sub` the session began with ("" in a session from before it was
    /// kept). With `provider`, the other names its user may be signed out everywhere under.
    public var subject: String = ""
    /// Which ID token began it (`<provider>:<jti>`, or its signing input's hash): the same ID
    /// token exchanged again finds this session instead of making another.
    public var idToken: String = ""
}

/// What ending a session did.
public enum SessionEnd: Sendable, Equatable {
    /// Ended (durably, where the store keeps sessions on disk); the record it had.
    case ended(SessionRecord)
    /// No such session (or another user's).
    case notFound
    /// The store could not record the end (a failed journal write, Redis unreachable): not
    /// acknowledged; the session is still there.
    case failed
}

/// What a refresh found.
public enum RotateOutcome: Sendable, Equatable {
    /// The presented token was current: the session moved on to `record`'s counter.
    case rotated(SessionRecord)
    /// The presented token was the previous one, within the reuse grace: the current pair.
    case current(SessionRecord)
    /// Any other reuse: the session was ended.
    case reused(SessionRecord)
    /// No such session (ended, expired, never existed).
    case unknown
    /// Past its lifetime or idle timeout: ended.
    case expired
    /// The store could not be asked (Redis unreachable or too slow): nothing is known to have
    /// changed, so the client may retry with the same token (a rotation that did happen
    /// unseen answers that retry with its pair, within the reuse grace).
    case failed
}

/// What the store holds under a session id.
public enum SessionFound: Sendable, Equatable {
    case found(SessionRecord)
    /// No such session (ended, expired, never existed).
    case missing
    /// The store could not be asked: unknown.
    case failed
}

/// Where sessions live: the embedded store (this process, `store.state_dir` to survive a
/// restart). Completions may run on any queue.
public protocol SessionStore: AnyObject, Sendable {
    /// Keeps at most `maxPerUser` sessions for the record's user: past it the least recently
    /// used are ended (`evicted`, for their access tokens to be revoked).
    func create(_ record: SessionRecord, maxPerUser: Int, completion: @escaping @Sendable (_ ok: Bool, _ evicted: [SessionRecord]) -> Void)
    /// The session `id` as kept now.
    func record(id: String, completion: @escaping @Sendable (SessionFound) -> Void)
    /// The refresh of `id` with the token of `counter`, at `now`. `next` is the record to
    /// store when the token is current (the counter one more, the new access token); `known`
    /// is the record just read by `record(id:)`, which a store may use instead of reading it
    /// again (the rotation itself still compares counters atomically).
    func rotate(id: String, counter: UInt64, now: Int64, grace: Int64, idleTimeout: Int64, known: SessionRecord?,
                next: @escaping @Sendable (SessionRecord) -> SessionRecord,
                completion: @escaping @Sendable (RotateOutcome) -> Void)
    /// Ends the session (if `user` is given, only one of that user's).
    func end(id: String, user: String?, completion: @escaping @Sendable (SessionEnd) -> Void)
    /// The user's live sessions.
    func list(user: String, now: Int64, completion: @escaping @Sendable ([SessionRecord]) -> Void)
}

/// Sessions in this process, on a serial queue, with a journal in `store.state_dir`
/// (`sessions.jsonl`, a `LineJournal` as the revocations': one line per change, the last
/// line of an id wins). Creations and ends are written and `fsync`ed before they are
/// acknowledged, and a failed write is cut off the file and not acknowledged (a creation
/// answers 503, an end `.failed` with the session kept as on disk); rotations are written
/// without waiting for the disk: a rotation lost in a crash is harmless, because a refresh
/// token's MAC proves the gateway issued it, so a token one counter ahead of what was kept
/// is accepted as current (and the session moves on from it). An end the store makes
/// itself (a reuse, an expiry, the cap) leaves memory at once whatever the disk says; its
/// session id is revoked through the revocation path too.
public final class EmbeddedSessionStore: SessionStore, @unchecked Sendable {
    // @unchecked Sendable: `sessions`, `byUser` and the journal are touched only on `queue`.
    private let queue = DispatchQueue(label: "portcullis.sessions.embedded")
    private var sessions: [String: SessionRecord] = [:]
    private var byUser: [String: Set<String>] = [:]
    private let journal: LineJournal?
    /// Says once per change that journal writes fail (why) or work again (nil).
    private let journalState: @Sendable (String?) -> Void
    private var journalFailing = false

    public struct Failure: Error, CustomStringConvertible { public let description: String }

    /// `directory`: keep sessions there across restarts (nil: memory only).
    public init(directory: String?, now: Int64 = Int64(WallClock.nowSeconds()), warn: (String) -> Void = { _ in },
                journalState: @escaping @Sendable (String?) -> Void = { _ in }) throws {
        self.journalState = journalState
        guard let directory else { journal = nil; return }
        let journal = try LineJournal(directory: directory, name: "sessions.jsonl")
        self.journal = journal
        for (number, line) in try journal.lines(warn: warn) {
            var entry = Self.decode(line)
            if entry == nil, let rest = LineJournal.afterTornPrefix(line, starts: ["{\"id\":", "{\"ended\":"]),
               let recovered = Self.decode(rest) {
                // An older version glued an acknowledged line onto the remains of a failed one.
                warn("\(journal.path):\(number): a line begins with the remains of a failed write; the line after them is read")
                entry = recovered
            }
            switch entry {
            case .record(let record)?: sessions[record.id] = record
            case .ended(let id)?: sessions[id] = nil
            case nil: throw Failure(description: "\(journal.path):\(number): not a session line")
            }
        }
        sessions = sessions.filter { $0.value.expiresAt > now }
        for record in sessions.values { byUser[record.user, default: []].insert(record.id) }
        // Rewritten with the live sessions only, then appended to.
        try journal.rewrite(sessions.values.map(Self.encode))
    }

    /// Sessions kept now (tests, metrics).
    public var count: Int { queue.sync { sessions.count } }

    public func create(_ record: SessionRecord, maxPerUser: Int,
                       completion: @escaping @Sendable (_ ok: Bool, _ evicted: [SessionRecord]) -> Void) {
        queue.async { [self] in
            guard write(Self.encode(record), sync: true) else { return completion(false, []) }  // cut off, not acknowledged
            sessions[record.id] = record
            byUser[record.user, default: []].insert(record.id)
            var evicted: [SessionRecord] = []
            let mine = (byUser[record.user] ?? []).compactMap { sessions[$0] }
            if mine.count > maxPerUser {
                for old in mine.filter({ $0.id != record.id }).sorted(by: { $0.lastUsedAt < $1.lastUsedAt }).prefix(mine.count - maxPerUser) {
                    remove(old)
                    evicted.append(old)
                }
            }
            completion(true, evicted)
        }
    }

    public func record(id: String, completion: @escaping @Sendable (SessionFound) -> Void) {
        queue.async { [self] in completion(sessions[id].map { .found($0) } ?? .missing) }
    }

    public func rotate(id: String, counter: UInt64, now: Int64, grace: Int64, idleTimeout: Int64, known: SessionRecord?,
                       next: @escaping @Sendable (SessionRecord) -> SessionRecord,
                       completion: @escaping @Sendable (RotateOutcome) -> Void) {
        queue.async { [self] in
            guard var record = sessions[id] else { return completion(.unknown) }
            switch Rotation.decide(record, presented: counter, now: now, grace: grace, idleTimeout: idleTimeout) {
            case .expired:
                remove(record)
                completion(.expired)
            case .rotate:
                record.counter = counter
                let rotated = next(record)
                _ = write(Self.encode(rotated), sync: false)
                sessions[id] = rotated
                completion(.rotated(rotated))
            case .current:
                completion(.current(record))
            case .reused:
                remove(record)
                completion(.reused(record))
            }
        }
    }

    public func end(id: String, user: String?, completion: @escaping @Sendable (SessionEnd) -> Void) {
        queue.async { [self] in
            guard let record = sessions[id], user == nil || record.user == user else { return completion(.notFound) }
            // Acknowledged only once on disk; otherwise the session stays, as the disk has it.
            guard write(Self.endLine(record.id), sync: true) else { return completion(.failed) }
            forget(record)
            completion(.ended(record))
        }
    }

    public func list(user: String, now: Int64, completion: @escaping @Sendable ([SessionRecord]) -> Void) {
        queue.async { [self] in
            let records = (byUser[user] ?? []).compactMap { sessions[$0] }.filter { $0.expiresAt > now }
            completion(records.sorted { $0.createdAt < $1.createdAt })
        }
    }

    /// An end the store decides itself (reuse, expiry, the cap): out of memory at once; the
    /// line is written, and a failure is reported through `journalState` (the session id
    /// is revoked through the revocation path as well).
    private func remove(_ record: SessionRecord) {
        forget(record)
        _ = write(Self.endLine(record.id), sync: true)
    }

    private func forget(_ record: SessionRecord) {
        sessions[record.id] = nil
        byUser[record.user]?.remove(record.id)
        if byUser[record.user]?.isEmpty == true { byUser[record.user] = nil }
    }

    private static func endLine(_ id: String) -> String { "{\"ended\":\(JSONText.quoted(id))}\n" }

    /// Appends one line (nothing without a journal); `sync`: on disk before it returns. A
    /// failure leaves no part of the line in the file.
    private func write(_ line: String, sync: Bool) -> Bool {
        guard let journal else { return true }
        let failure: LineJournal.Failure?
        do throws(LineJournal.Failure) { try journal.append(line, sync: sync); failure = nil } catch { failure = error }
        if (failure != nil) != journalFailing {
            journalFailing = failure != nil
            journalState(failure?.description)
        }
        return failure == nil
    }

    enum Entry { case record(SessionRecord), ended(String) }

    static func encode(_ r: SessionRecord) -> String {
        "{\"id\":\(JSONText.quoted(r.id)),\"user\":\(JSONText.quoted(r.user)),\"provider\":\(JSONText.quoted(r.provider)),"
            + "\"device\":\(JSONText.quoted(r.device)),\"created\":\(r.createdAt),\"used\":\(r.lastUsedAt),"
            + "\"expires\":\(r.expiresAt),\"counter\":\(r.counter),\"rotated\":\(r.rotatedAt),"
            + "\"access_expires\":\(r.accessExpiresAt),\"claims\":\(JSONText.quoted(r.claims)),"
            + "\"subject\":\(JSONText.quoted(r.subject)),\"id_token\":\(JSONText.quoted(r.idToken))}\n"  // never a token
    }

    static func decode(_ line: Substring) -> Entry? {
        guard let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any] else { return nil }
        if let id = object["ended"] as? String { return .ended(id) }
        func int(_ key: String) -> Int64? { (object[key] as? NSNumber)?.int64Value }
        guard let id = object["id"] as? String, let user = object["user"] as? String, let provider = object["provider"] as? String,
              let device = object["device"] as? String, let created = int("created"), let used = int("used"),
              let expires = int("expires"), let counter = int("counter"), let rotated = int("rotated"),
              let accessExpires = int("access_expires") else { return nil }
        return .record(SessionRecord(id: id, user: user, provider: provider, device: device, createdAt: created,
                                     lastUsedAt: used, expiresAt: expires, counter: UInt64(max(0, counter)), rotatedAt: rotated,
                                     accessToken: "", accessExpiresAt: accessExpires, claims: object["claims"] as? String ?? "",
                                     subject: object["subject"] as? String ?? "", idToken: object["id_token"] as? String ?? ""))
    }
}
