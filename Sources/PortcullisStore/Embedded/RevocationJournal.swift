import Foundation
import PortcullisCore

/// The embedded store's revocations on disk (`store.state_dir`), so that what the admin
/// API acknowledged survives a restart: one JSON line per revocation in
/// `<state_dir>/revocations.jsonl`, appended and `fsync`ed before the acknowledgement.
///
/// At start the file is read (entries past their expiry skipped) and rewritten with the
/// live entries only (a temporary file, `fsync`, `rename`), so it never grows past what is
/// enforced plus what was added since. A last line without its newline (a crash during a
/// write, before the acknowledgement) is ignored with a warning; any other unreadable line
/// stops the start with the file and line number: silently dropping a revocation would
/// re-admit a credential.
///
/// Line format: `{"kind":"token","id":"…","until":1767225600}`, `{"kind":"session",…}`,
/// `{"kind":"subject","subject":"…","before":…,"until":…}`; an undo is
/// `{"kind":"undo","target":"token|session|subject","id":"…"}` and removes what the lines
/// before it revoked for that id (the start-up rewrite then drops both).
///
/// The file itself is a `LineJournal` (shared with the sessions' journal): a failed write is
/// cut back off before it is reported, so nothing acknowledged is ever glued onto a torn
/// line. A start also recovers a line written by an older version onto such remains
/// (`{"kind":"token","id":"t-{"kind":…}`): the acknowledged line at its end is read, with a
/// warning.
///
/// Threading: used only on the embedded store's queue.
public final class RevocationJournal: @unchecked Sendable {
    // @unchecked Sendable: confined to the embedded store's queue (as its `LineJournal`).
    private let file: LineJournal
    public var path: String { file.path }

    public typealias Failure = LineJournal.Failure

    /// Opens (creating the directory and file when needed) and checks it can be written.
    public init(directory: String) throws(Failure) {
        file = try LineJournal(directory: directory, name: "revocations.jsonl")
    }

    /// The revocations recorded, without those expired at `now`. `warn` hears about a torn last line.
    public func load(now: Int64, maxCredentialLifetime: Int64, warn: (String) -> Void) throws(Failure) -> [Revocation] {
        try Self.read(path: path, now: now, maxCredentialLifetime: maxCredentialLifetime, warn: warn)
    }

    /// The revocations in the journal at `path`, read without opening it for writing (a
    /// gateway may be running on it: `portcullis verify`). Every line was complete before
    /// its revocation was acknowledged, so what was acknowledged is here.
    public static func read(path: String, now: Int64, maxCredentialLifetime: Int64,
                            warn: (String) -> Void) throws(Failure) -> [Revocation] {
        guard let lines = try LineJournal.lines(at: path, warn: warn) else {
            throw Failure(description: "\(path): cannot be read")
        }
        var result: [Revocation] = []
        for (number, line) in lines {
            var parsed = Self.decode(line)
            if parsed == nil, let rest = LineJournal.afterTornPrefix(line, starts: ["{\"kind\":"]), let recovered = Self.decode(rest) {
                warn("\(path):\(number): a line begins with the remains of a failed write; the line after them is read")
                parsed = recovered
            }
            switch parsed {
            case .revoke(let revocation)?:
                if revocation.expiry(maxCredentialLifetime: maxCredentialLifetime) > now { result.append(revocation) }
            case .undo(let target)?:
                result.removeAll { $0.target == target }
            case nil:
                throw Failure(description: "\(path):\(number): not a revocation line")
            }
        }
        return result
    }

    /// Replaces the file with `revocations` (the live ones), atomically.
    public func rewrite(_ revocations: [Revocation]) throws(Failure) {
        try file.rewrite(revocations.map(Self.encode))
    }

    /// Appends one revocation and waits until it is on disk.
    public func append(_ revocation: Revocation) throws(Failure) {
        try file.append(Self.encode(revocation))
    }

    /// Appends an undo and waits until it is on disk.
    public func append(undo target: RevocationTarget) throws(Failure) {
        try file.append(Self.encode(undo: target))
    }

    static func encode(undo target: RevocationTarget) -> String {
        let (kind, id): (String, String)
        switch target {
        case .token(let t): (kind, id) = ("token", t)
        case .session(let s): (kind, id) = ("session", s)
        case .subject(let s): (kind, id) = ("subject", s)
        }
        return "{\"kind\":\"undo\",\"target\":\"\(kind)\",\"id\":\(JSONText.quoted(id))}\n"
    }

    enum Line: Equatable {
        case revoke(Revocation)
        case undo(RevocationTarget)
    }

    static func encode(_ revocation: Revocation) -> String {
        switch revocation {
        case .token(let id, let until):
            return "{\"kind\":\"token\",\"id\":\(JSONText.quoted(id)),\"until\":\(until)}\n"
        case .session(let id, let until):
            return "{\"kind\":\"session\",\"id\":\(JSONText.quoted(id)),\"until\":\(until)}\n"
        case .subject(let subject, let before, let until):
            return "{\"kind\":\"subject\",\"subject\":\(JSONText.quoted(subject)),\"before\":\(before)"
                + (until.map { ",\"until\":\($0)" } ?? "") + "}\n"
        }
    }

    static func decode(_ line: Substring) -> Line? {
        guard let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any],
              let kind = object["kind"] as? String else { return nil }
        func int(_ key: String) -> Int64? { (object[key] as? NSNumber).map { $0.int64Value } }
        switch kind {
        case "token":
            guard let id = object["id"] as? String, let until = int("until") else { return nil }
            return .revoke(.token(id: id, until: until))
        case "session":
            guard let id = object["id"] as? String, let until = int("until") else { return nil }
            return .revoke(.session(id: id, until: until))
        case "subject":
            guard let subject = object["subject"] as? String, let before = int("before") else { return nil }
            return .revoke(.subject(subject, before: before, until: int("until")))
        case "undo":
            guard let id = object["id"] as? String else { return nil }
            switch object["target"] as? String {
            case "token": return .undo(.token(id))
            case "session": return .undo(.session(id))
            case "subject": return .undo(.subject(id))
            default: return nil
            }
        default:
            return nil
        }
    }
}
