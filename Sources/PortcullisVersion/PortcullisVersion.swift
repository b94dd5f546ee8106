/// What this binary is: its release version, the commit it was built from and when
/// (`BuildStamp`, written by `BuildStampPlugin`). `portcullis --version` and
/// `portcullis_build_info` on `/metrics` print it, with the C libraries' versions.
public enum PortcullisVersion {
    /// The release (`CHANGELOG.md`); bumped when a release is cut.
    public static let version = "0.4.0"
    /// The commit (12 hex digits), or "unknown" when built outside a git clone.
    public static var commit: String { BuildStamp.commit }
    /// The commit's date (UTC), or `SOURCE_DATE_EPOCH`'s when set.
    public static var buildDate: String { BuildStamp.date }
}
