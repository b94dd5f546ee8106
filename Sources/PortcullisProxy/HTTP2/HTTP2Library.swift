import CNGHTTP2

/// The libnghttp2 this process runs with: `--version` and `portcullis_build_info`.
public enum HTTP2Library {
    public static var version: String {
        guard let info = nghttp2_version(0), let text = info.pointee.version_str else { return "unknown" }
        return String(cString: text)
    }
}
