import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Reopening log files in place, for log rotation: SIGUSR1 (nginx's convention, which
/// logrotate's nginx recipe sends) and every applied reload. A file is opened again at its
/// path (a rotated one was renamed away) and put onto the descriptor it had with `dup2`, so
/// whatever holds the descriptor (the loops' access-log writers, the log handler on standard
/// error) writes to the new file from its next line: no descriptor changes hands, none is
/// leaked, no line goes to a reused number.
enum LogFiles {
    /// Opens `path` for appending and puts it onto `fd`. nil, or why not.
    static func reopen(_ path: String, onto fd: Int32) -> String? {
        let fresh = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0o644)
        guard fresh >= 0 else { return "\(path): cannot open (\(String(cString: strerror(errno))))" }
        defer { close(fresh) }
        guard dup2(fresh, fd) >= 0 else { return "\(path): cannot replace descriptor \(fd) (\(String(cString: strerror(errno))))" }
        return nil
    }

    /// Standard output and error, when a service manager pointed them at regular files
    /// (`>> /var/log/portcullis.log`), by the paths they had at start (`/proc/self/fd`
    /// follows a renamed file, so it must be read before any rotation). Pipes and terminals
    /// (journald, a container runtime) are left alone.
    static let standardStreamPaths: [(fd: Int32, path: String)] = [Int32(1), 2].compactMap { fd in
        var info = stat()
        guard fstat(fd, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG else { return nil }
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let n = readlink("/proc/self/fd/\(fd)", &buffer, buffer.count - 1)
        guard n > 0 else { return nil }
        let path = String(decoding: buffer[0..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return path.hasPrefix("/") && !path.hasSuffix(" (deleted)") ? (fd, path) : nil
    }

    /// Reopens standard output and error at their paths from start. The paths reopened, and failures.
    static func reopenStandardStreams() -> (reopened: [String], failures: [String]) {
        var reopened: [String] = [], failures: [String] = []
        for (fd, path) in standardStreamPaths {
            if let failure = reopen(path, onto: fd) { failures.append(failure) } else if !reopened.contains(path) { reopened.append(path) }
        }
        return (reopened, failures)
    }
}
