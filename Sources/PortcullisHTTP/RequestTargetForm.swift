/// The four request-target forms of RFC 9112 §3.2.
public enum RequestTargetForm: Sendable, Equatable {
    /// `/path?query`
    case origin
    /// `http://authority/path?query` or `https://…`
    case absolute
    /// `*`, only with OPTIONS.
    case asterisk
    /// `host:port`, only with CONNECT.
    case authority
}
