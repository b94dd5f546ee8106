import Foundation
import PortcullisCore
#if canImport(Glibc)
import Glibc
#endif

/// An append-only file of JSON lines whose every acknowledged line survives: the one journal
/// under the embedded store's revocations (`revocations.jsonl`) and sessions
/// (`sessions.jsonl`). Its owner decides what a line means; the journal decides only what
/// reaches the disk.
///
/// - Appends go to the end of the last complete line (`pwrite`, no `O_APPEND`); a synced
///   append is on disk (`fdatasync`) before it returns.
/// - Any failure (a full disk: `ENOSPC` after part of the line; `EFBIG`; `EIO` from
///   `fdatasync`) cuts the file back to the end of the last good line before it is
///   reported, so a line is never glued onto the remains of one that failed, even when the
///   truncation itself failed (the next write starts at the good end and truncates after
///   itself).
/// - At start `lines(at:)` reads every complete line; a last line without its newline (a
///   crash during a write, before its acknowledgement) is ignored with a warning. `rewrite`
///   replaces the file atomically (temporary file, `fsync`, `rename`, directory `fsync`).
///
/// Threading: used only on its owner's serial queue.
public final class LineJournal: @unchecked Sendable {
    // @unchecked Sendable: confined to its owner's queue.
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

    /// Opens `<directory>/<name>` (creating the directory, mode 0700, and the file, 0600).
    public init(directory: String, name: String) throws(Failure) {
        path = (directory as NSString).appendingPathComponent(name)
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

    /// The complete lines of the file at `path` (empty ones skipped), read without opening it
    /// for writing (a gateway may be running on it: `portcullis verify`), each with its line
    /// number; nil when the file does not exist. Every line was complete before its change was
    /// acknowledged, so what was acknowledged is here; `warn` hears about a torn last line.
    public static func lines(at path: String, warn: (String) -> Void) throws(Failure) -> [(number: Int, text: Substring)]? {
        guard FileManager.default.fileExists(atPath: path) else { return nil }
        guard let data = FileManager.default.contents(atPath: path) else { throw Failure(description: "\(path): cannot be read") }
        let text = String(decoding: data, as: UTF8.self)
        var lines = text.split(separator: "\n", omittingEmptySubsequences: false)
        if let last = lines.last, last.isEmpty { lines.removeLast() } else if !lines.isEmpty {
            warn("\(path): the last line is incomplete (a write cut short before it was acknowledged); ignored")
            lines.removeLast()
        }
        return lines.enumerated().filter { !$0.element.isEmpty }.map { (number: $0.offset + 1, text: $0.element) }
    }

    /// This journal's complete lines (see `lines(at:warn:)`).
    public func lines(warn: (String) -> Void) throws(Failure) -> [(number: Int, text: Substring)] {
        try Self.lines(at: path, warn: warn) ?? []
    }

    /// Replaces the file with `lines` (each ending in a newline), atomically.
    public func rewrite(_ lines: [String]) throws(Failure) {
        let temporary = path + ".tmp"
        let out = Glibc.open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard out >= 0 else { throw Failure(description: "\(temporary): cannot be written (\(String(cString: strerror(errno))))") }
        let ok = Self.writeAll(out, Array(lines.joined().utf8), at: 0) == nil && fsync(out) == 0
        Glibc.close(out)
        guard ok, rename(temporary, path) == 0 else {
            unlink(temporary)
            throw Failure(description: "\(path): cannot be replaced (\(String(cString: strerror(errno))))")
        }
        Self.syncDirectory(of: path)
        try reopen()
    }

    /// Writes `line` (ending in a newline) after the last good line; `sync`: on disk before it
    /// returns. On any failure the file is cut back to the last good line before throwing.
    public func append(_ line: String, sync: Bool = true) throws(Failure) {
        let bytes = Array(line.utf8)
        let end = goodLength + off_t(bytes.count)
        var failure = Self.writeAll(fd, bytes, at: goodLength)
        if failure == nil, tailPastGoodLength, ftruncate(fd, end) != 0 { failure = errno }
        if failure == nil, sync, fdatasync(fd) != 0 { failure = errno }
        if let failure {
            // Cut the partial line off. If that fails too, the next write still starts at
            // `goodLength` and truncates after itself.
            tailPastGoodLength = !(ftruncate(fd, goodLength) == 0 && fdatasync(fd) == 0)
            throw Failure(description: "\(path): cannot be written (\(String(cString: strerror(failure))))")
        }
        goodLength = end
        tailPastGoodLength = false
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

    /// A line an older version glued onto the remains of a failed write: the text from the
    /// last place where one of `starts` begins (after the line's first byte), if any.
    public static func afterTornPrefix(_ line: Substring, starts: [String]) -> Substring? {
        let positions = starts.compactMap { line.ranges(of: $0).last?.lowerBound }.filter { $0 > line.startIndex }
        guard let start = positions.max() else { return nil }
        return line[start...]
    }
}
