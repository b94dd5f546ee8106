import PortcullisProxy
import PortcullisRedis
import PortcullisTLS
import PortcullisVersion

/// What this binary is and what it runs with: `portcullis --version` prints it, `/metrics`
/// has it as `portcullis_build_info` (value 1, these as labels).
public enum BuildInfo {
    public static var fields: [(name: String, value: String)] {
        [("version", PortcullisVersion.version), ("commit", PortcullisVersion.commit), ("build_date", PortcullisVersion.buildDate),
         ("openssl", TLSLibrary.version), ("nghttp2", HTTP2Library.version), ("hiredis", RedisLibrary.version)]
    }

    /// `portcullis 0.4.0 (commit 0123456789ab, built 2026-11-28T00:00:00Z)` and one line per library.
    public static var text: String {
        """
        portcullis \(PortcullisVersion.version) (commit \(PortcullisVersion.commit), built \(PortcullisVersion.buildDate))
        openssl: \(TLSLibrary.version)
        nghttp2: \(HTTP2Library.version)
        hiredis: \(RedisLibrary.version)
        """
    }
}
