#if canImport(Glibc)
import Glibc
#endif

/// The certificate files a configuration serves or presents (listener certificates and keys,
/// upstream client certificates, keys and CAs) and what they look like on disk now, so a
/// renewal (cert-manager swapping a Secret volume's symlink, certbot's deploy hook, an
/// operator's `cp`) is seen without a signal: `certificate_check` (default 60 s) compares
/// the signatures and reloads the certificates when one changed.
struct CertificateWatch: Equatable {
    /// path → "inode:size:mtime" of the file the path leads to (symlinks followed), or
    /// "missing".
    private(set) var signatures: [String: String]

    init(_ configuration: GatewayConfiguration) {
        var files: [String] = []
        for listen in configuration.listen {
            for pair in listen.tls?.certificates ?? [] { files += [pair.certificate, pair.privateKey] }
        }
        for upstream in configuration.proxy.upstreams {
            files += [upstream.clientCertificate, upstream.clientPrivateKey, upstream.caFile].compactMap { $0 }
        }
        signatures = Dictionary(files.map { ($0, Self.signature($0)) }, uniquingKeysWith: { a, _ in a })
    }

    var isEmpty: Bool { signatures.isEmpty }

    /// The files whose signature differs in `now` (sorted).
    func changed(in now: CertificateWatch) -> [String] {
        now.signatures.filter { signatures[$0.key] != $0.value }.map(\.key).sorted()
    }

    static func signature(_ path: String) -> String {
        var info = stat()
        guard stat(path, &info) == 0 else { return "missing" }
        return "\(info.st_ino):\(info.st_size):\(info.st_mtim.tv_sec).\(info.st_mtim.tv_nsec)"
    }
}
