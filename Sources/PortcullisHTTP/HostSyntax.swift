/// Validation of `uri-host [ ":" port ]` (RFC 3986 §3.2.2, RFC 9110 §7.2) as found in `Host`,
/// in an absolute-form authority and in CONNECT's authority-form.
enum HostSyntax {
    /// Whether `p[range]` is `host [":" port]` where host is a non-empty reg-name / IPv4 address or a
    /// bracketed IP literal, and port is 1 to 5 digits. Userinfo (`user@host`) is rejected: it is
    /// deprecated (RFC 9110 §4.2.4) and a classic way to confuse host checks.
    static func isValid(_ p: UnsafeRawBufferPointer, _ range: Range<Int>, requirePort: Bool = false) -> Bool {
        var i = range.lowerBound
        let end = range.upperBound
        guard i < end else { return false }
        if p[i] == 0x5B {  // '[' IP-literal ']'
            i &+= 1
            let literalStart = i
            while i < end && p[i] != 0x5D {
                let b = p[i]
                guard ByteClass.hexValue(b) != nil || b == ByteClass.colon || b == 0x2E else { return false }
                i &+= 1
            }
            guard i < end, i > literalStart else { return false }
            i &+= 1
        } else {
            let nameStart = i
            while i < end && p[i] != ByteClass.colon {
                let b = p[i]
                guard ByteClass.isHostByte(b), b != 0x5B, b != 0x5D else { return false }
                i &+= 1
            }
            guard i > nameStart else { return false }
        }
        if i == end { return !requirePort }
        guard p[i] == ByteClass.colon else { return false }
        i &+= 1
        let digits = end &- i
        guard digits >= 1 && digits <= 5 else { return false }
        while i < end {
            guard ByteClass.isDigit(p[i]) else { return false }
            i &+= 1
        }
        return true
    }
}
