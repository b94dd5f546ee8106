import PortcullisCore

/// Validation of `uri-host [ ":" port ]` (RFC 3986 §3.2.2, RFC 9110 §7.2) as found in `Host`,
/// in an absolute-form authority and in CONNECT's authority-form: the rules of `Authority`,
/// which routing, TLS server names and the forwarded `Host` share.
enum HostSyntax {
    static func isValid(_ p: UnsafeRawBufferPointer, _ range: Range<Int>, requirePort: Bool = false) -> Bool {
        Authority.isValid(p, range, requirePort: requirePort)
    }
}
