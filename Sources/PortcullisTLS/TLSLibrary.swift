internal import COpenSSL

/// The libssl this process runs with (not the headers it was built against): `--version` and
/// `portcullis_build_info`.
public enum TLSLibrary {
    /// "OpenSSL 3.0.17 1 Jul 2025" as the library says it.
    public static var version: String { String(cString: OpenSSL_version(OPENSSL_VERSION)) }
}
