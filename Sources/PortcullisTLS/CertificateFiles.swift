#if canImport(Glibc)
import Glibc
#endif

/// Certificate files (listener certificates and keys, client certificates, CA files) and what
/// they look like on disk now, so a renewal (cert-manager swapping a Secret volume's symlink,
/// certbot's deploy hook, an operator's `cp`) is seen without a signal: the gateway's
/// `certificate_check` (default 60 s) compares two readings and reloads the certificates when
/// one changed.
public struct CertificateFiles: Equatable, Sendable {
    /// path → "inode:size:mtime" of the file the path leads to (symlinks followed), or
    /// "missing".
    public private(set) var signatures: [String: String]

    /// Reads the files at `paths` now (a path given twice is read once).
    public init(_ paths: [String]) {
        signatures = Dictionary(paths.map { ($0, Self.signature($0)) }, uniquingKeysWith: { a, _ in a })
    }

    public var isEmpty: Bool { signatures.isEmpty }

    /// The files whose signature differs in `now` (sorted).
    public func changed(in now: CertificateFiles) -> [String] {
        now.signatures.filter { signatures[$0.key] != $0.value }.map(\.key).sorted()
    }

    static func signature(_ path: String) -> String {
        var info = stat()
        guard stat(path, &info) == 0 else { return "missing" }
        return "\(info.st_ino):\(info.st_size):\(info.st_mtim.tv_sec).\(info.st_mtim.tv_nsec)"
    }
}
