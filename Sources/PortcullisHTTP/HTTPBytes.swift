/// Helpers for reading header fields in place, on raw bytes, ASCII case-insensitively.
public enum HTTPBytes {
    /// Whether `bytes` are exactly `literal` (HTTP/2 field names arrive lower-cased).
    @inline(__always)
    public static func equals(_ bytes: UnsafeRawBufferPointer, _ literal: StaticString) -> Bool {
        literal.withUTF8Buffer { q in
            guard bytes.count == q.count else { return false }
            for i in 0..<q.count where bytes[i] != q[i] { return false }
            return true
        }
    }

    /// Whether `bytes[range]` equals `lowercaseASCII` ignoring ASCII case. `lowercaseASCII` must be lower case.
    public static func equalsCaseInsensitive(
        _ bytes: UnsafeRawBufferPointer, _ range: Range<Int>, _ lowercaseASCII: StaticString
    ) -> Bool {
        // withUTF8Buffer also works for a one-character literal (stored as a scalar, without a pointer).
        lowercaseASCII.withUTF8Buffer { q in
            guard range.count == q.count else { return false }
            var k = 0
            for i in range {
                if ByteClass.lower(bytes[i]) != q[k] { return false }
                k &+= 1
            }
            return true
        }
    }

    /// Name comparison for identity-header stripping: ASCII case-insensitive and treating '-', '_'
    /// and '.' as the same byte, so `X_User_Id`, `X.User.Id`, `x_user.id` and `X-USER_ID` all
    /// match `x-user-id` (CGI/WSGI/Rack/PHP map '-' to '_', and some stacks fold '.' too: a 2026
    /// Traefik advisory was a `.`-spelled identity header passing its filter).
    /// `name` as `equalsIdentityName` compares it: lower case, with '_' and '.' as '-'.
    /// For configuration checks and the precomputed lists the comparison runs against.
    public static func identityName(_ name: String) -> String {
        String(decoding: name.utf8.map { $0 == 0x5F || $0 == 0x2E ? 0x2D : ByteClass.lower($0) }, as: UTF8.self)
    }

    public static func equalsIdentityName(
        _ bytes: UnsafeRawBufferPointer, _ range: Range<Int>, _ lowercaseASCII: [UInt8]
    ) -> Bool {
        guard range.count == lowercaseASCII.count else { return false }
        @inline(__always) func fold(_ b: UInt8) -> UInt8 { b == 0x5F || b == 0x2E ? 0x2D : ByteClass.lower(b) }
        var k = 0
        for i in range {
            if fold(bytes[i]) != fold(lowercaseASCII[k]) { return false }
            k &+= 1
        }
        return true
    }

    /// Calls `body` with each non-empty element of a comma-separated field value (RFC 9110 §5.6.1),
    /// trimmed of OWS, e.g. the tokens of `Connection: keep-alive, Upgrade`.
    public static func forEachToken(
        _ bytes: UnsafeRawBufferPointer, _ range: Range<Int>, _ body: (Range<Int>) -> Void
    ) {
        var start = range.lowerBound
        while start <= range.upperBound {
            var end = start
            while end < range.upperBound && bytes[end] != ByteClass.comma { end &+= 1 }
            let element = trimOWS(bytes, start..<end)
            if !element.isEmpty { body(element) }
            start = end &+ 1
        }
    }

    /// `range` without leading and trailing SP / HTAB.
    static func trimOWS(_ bytes: UnsafeRawBufferPointer, _ range: Range<Int>) -> Range<Int> {
        var lo = range.lowerBound, hi = range.upperBound
        while lo < hi && ByteClass.isOWS(bytes[lo]) { lo &+= 1 }
        while hi > lo && ByteClass.isOWS(bytes[hi &- 1]) { hi &-= 1 }
        return lo..<hi
    }
}
