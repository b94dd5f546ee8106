import Foundation
import PortcullisCore
#if canImport(Glibc)
import Glibc
#endif

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
/// A failed write (a full disk: `ENOSPC` after part of the line; `EFBIG`; `EIO` from
/// `fdatasync`) is cut back off: the file is truncated to the end of the last acknowledged
/// line before the failure is reported, and every write goes to that offset (`pwrite`, no
/// `O_APPEND`), so a line is never glued onto the remains of one that failed, even when the
/// truncation itself failed. A start also recovers a line written by an older version onto
/// such remains (`{"kind":"token","id":"t-{"kind":…}`): the acknowledged line at its end is
/// read, with a warning.
///
/// Threading: used only on the embedded store's queue.
public final class RevocationJournal: @unchecked Sendable {
    // @unchecked Sendable: confined to the embedded store's queue.
    public let path: String
    private var fd: Int32 = -1
    /// The end of the last complete line: where the next line is written.
    private var goodLength: off_t = 0
    /// The file may hold bytes past `goodLength` (a failed write not yet cut off, or a torn
    /// last line found at open): the next write truncates after itself.
    private var tailPastGoodLength = false

    public struct Failure: Error, Sendable, CustomStringConvertible {
        public let description: String
    }

    /// Opens (creating the directory and file when needed) and checks it can be written.
    public init(directory: String) throws(Failure) {
        path = (directory as NSString).appendingPathComponent("revocations.jsonl")
        do {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true,
                                                    attributes: [.posixPermissions: 0o700])
        } catch {
            throw Failure(description: "\(directory): cannot create the state directory (\(error.localizedDescription))")
        }
        try reopen()
    }

    deinit { if fd >= 0 { Glibc.close(fd) } }

    private func reopen() throws(Failure) {
        if fd >= 0 { Glibc.close(fd) }
        fd = Glibc.open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        if fd < 0 { throw Failure(description: "\(path): cannot open for writing (\(String(cString: strerror(errno))))") }
        let size = lseek(fd, 0, SEEK_END)
        guard size >= 0 else { throw Failure(description: "\(path): cannot be read (\(String(cString: strerror(errno))))") }
        goodLength = Self.endOfLastLine(fd, size: size)
        tailPastGoodLength = goodLength != size
    }

    /// The offset just past the last newline in the first `size` bytes (0 without one).
    private static func endOfLastLine(_ fd: Int32, size: off_t) -> off_t {
        var chunk = [UInt8](repeating: 0, count: 4096)
        var end = size
        while end > 0 {
            let start = max(0, end - off_t(chunk.count))
            let wanted = Int(end - start)
            let n = chunk.withUnsafeMutableBytes { pread(fd, $0.baseAddress!, wanted, start) }
            guard n == wanted else { return 0 }
            if let i = chunk[0..<wanted].lastIndex(of: UInt8(ascii: "\n")) { return start + off_t(i) + 1 }
            end = start
        }
        return 0
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
        guard let data = FileManager.default.contents(atPath: path) else {
            throw Failure(description: "\(path): cannot be read")
        }
        let text = String(decoding: data, as: UTF8.self)
        var lines = text.split(separator: "\n", omittingEmptySubsequences: false)
        if let last = lines.last, last.isEmpty { lines.removeLast() } else if !lines.isEmpty {
            warn("\(path): the last line is incomplete (a write cut short before it was acknowledged); ignored")
            lines.removeLast()
        }
        var result: [Revocation] = []
        for (number, line) in lines.enumerated() where !line.isEmpty {
            var parsed = Self.decode(line)
            if parsed == nil, let recovered = Self.decodeAfterTornPrefix(line) {
                warn("\(path):\(number + 1): a line begins with the remains of a failed write; the line after them is read")
                parsed = recovered
            }
            switch parsed {
            case .revoke(let revocation)?:
                if revocation.expiry(maxCredentialLifetime: maxCredentialLifetime) > now { result.append(revocation) }
            case .undo(let target)?:
                result.removeAll { $0.target == target }
            case nil:
                throw Failure(description: "\(path):\(number + 1): not a revocation line")
            }
        }
        return result
    }

    /// Replaces the file with `revocations` (the live ones), atomically.
    public func rewrite(_ revocations: [Revocation]) throws(Failure) {
        let temporary = path + ".tmp"
        var text = ""
        for revocation in revocations { text += Self.encode(revocation) }
        let out = Glibc.open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard out >= 0 else { throw Failure(description: "\(temporary): cannot be written (\(String(cString: strerror(errno))))") }
        let ok = Self.writeAll(out, Array(text.utf8), at: 0) == nil && fsync(out) == 0
        Glibc.close(out)
        guard ok, rename(temporary, path) == 0 else {
            unlink(temporary)
            throw Failure(description: "\(path): cannot be replaced (\(String(cString: strerror(errno))))")
        }
        Self.syncDirectory(of: path)
        try reopen()
    }

    /// Appends one revocation and waits until it is on disk.
    public func append(_ revocation: Revocation) throws(Failure) {
        try appendLine(Self.encode(revocation))
    }

    /// Appends an undo and waits until it is on disk.
    public func append(undo target: RevocationTarget) throws(Failure) {
        try appendLine(Self.encode(undo: target))
    }

    /// Writes `line` at the end of the last good line and syncs it; on any failure cuts the
    /// file back to that end before throwing, so what follows never lands on a torn line.
    private func appendLine(_ line: String) throws(Failure) {
        let bytes = Array(line.utf8)
        let end = goodLength + off_t(bytes.count)
        var failure = Self.writeAll(fd, bytes, at: goodLength)
        if failure == nil, tailPastGoodLength, ftruncate(fd, end) != 0 { failure = errno }
        if failure == nil, fdatasync(fd) != 0 { failure = errno }
        if let failure {
            // Cut the partial line off. If that fails too, the next write still starts at
            // `goodLength` and truncates after itself.
            tailPastGoodLength = !(ftruncate(fd, goodLength) == 0 && fdatasync(fd) == 0)
            throw Failure(description: "\(path): cannot be written (\(String(cString: strerror(failure))))")
        }
        goodLength = end
        tailPastGoodLength = false
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

    /// A line an older version glued onto the remains of a failed write: the last
    /// `{"kind":` in it that starts a whole line.
    static func decodeAfterTornPrefix(_ line: Substring) -> Line? {
        guard let start = line.ranges(of: "{\"kind\":").last?.lowerBound, start > line.startIndex else { return nil }
        return decode(line[start...])
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

    /// Writes every byte at `position`; nil, or the errno of the write that failed (a write
    /// that makes no progress is `ENOSPC`).
    private static func writeAll(_ fd: Int32, _ bytes: [UInt8], at position: off_t) -> Int32? {
        var offset = 0
        while offset < bytes.count {
            let n = bytes.withUnsafeBytes { pwrite(fd, $0.baseAddress! + offset, $0.count - offset, position + off_t(offset)) }
            if n < 0 { if errno == EINTR { continue }; return errno }
            if n == 0 { return ENOSPC }
            offset += n
        }
        return nil
    }

    private static func syncDirectory(of path: String) {
        let directory = (path as NSString).deletingLastPathComponent
        let dfd = Glibc.open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        if dfd >= 0 { _ = fsync(dfd); Glibc.close(dfd) }
    }
}
