#if canImport(Glibc)
import Glibc
#endif

/// Lines for standard output and standard error, written with `write(2)`. A stream that
/// fails (a closed pipe: EPIPE with SIGPIPE ignored; a full disk; a file-size limit) drops
/// the line: Foundation's `FileHandle.write(_:)` traps on such a failure, and a gateway
/// must not die because its log reader went away.
public enum Console {
    public static func out(_ text: String) { write(1, text) }
    public static func error(_ text: String) { write(2, text) }

    public static func write(_ fd: Int32, _ text: String) {
        var text = text
        text.withUTF8 { bytes in
            var offset = 0
            while offset < bytes.count {
                let n = Glibc.write(fd, bytes.baseAddress! + offset, bytes.count - offset)
                if n < 0 && errno == EINTR { continue }
                if n <= 0 { return }
                offset += n
            }
        }
    }
}
