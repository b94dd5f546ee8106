/// Parsing of the request line (RFC 9112 §3): `method SP request-target SP HTTP-version`,
/// exactly one SP between the parts, nothing before or after.
enum RequestLine {
    /// Parses `p[line]` into `head`'s method, target, form, authority and version.
    static func parse(_ p: UnsafeRawBufferPointer, _ line: Range<Int>, into head: inout RequestHead) throws(HTTPParseError) {
        let end = line.upperBound
        var i = line.lowerBound
        while i < end && ByteClass.isToken(p[i]) { i &+= 1 }
        guard i > line.lowerBound, i < end, p[i] == ByteClass.sp else { throw .bad("invalid method") }
        head.methodRange = line.lowerBound..<i
        head.method = HTTPMethod.recognise(p, head.methodRange)
        i &+= 1

        let targetStart = i
        while i < end && p[i] != ByteClass.sp {
            if !ByteClass.isTargetByte(p[i]) {
                throw .bad(p[i] == 0x23 ? "fragment in request target" : "invalid character in request target")
            }
            i &+= 1
        }
        if i == targetStart { throw .bad("empty request target") }
        if i == end { throw .bad("missing HTTP version") }
        head.target = targetStart..<i
        i &+= 1

        head.version = try parseVersion(p, i..<end)
        try classifyTarget(p, &head)
    }

    /// `HTTP/1.1` or `HTTP/1.0`; another well-formed `HTTP/d.d` → 505; anything else (e.g. `http/1.1`) → 400.
    static func parseVersion(_ p: UnsafeRawBufferPointer, _ r: Range<Int>) throws(HTTPParseError) -> HTTPVersion {
        guard let v = version(p, r) else { throw .bad("malformed HTTP version") }
        switch v {
        case (1, 1): return .http11
        case (1, 0): return .http10
        default: throw HTTPParseError(status: 505, reason: "HTTP version not supported")
        }
    }

    /// The digits of `HTTP/d.d` (case-sensitive, RFC 9112 §2.3), or nil.
    static func version(_ p: UnsafeRawBufferPointer, _ r: Range<Int>) -> (UInt8, UInt8)? {
        guard r.count == 8 else { return nil }
        let s = r.lowerBound
        guard p[s] == 0x48, p[s &+ 1] == 0x54, p[s &+ 2] == 0x54, p[s &+ 3] == 0x50, p[s &+ 4] == ByteClass.slash,
              ByteClass.isDigit(p[s &+ 5]), p[s &+ 6] == 0x2E, ByteClass.isDigit(p[s &+ 7])
        else { return nil }
        return (p[s &+ 5] &- 0x30, p[s &+ 7] &- 0x30)
    }

    /// Sets `targetForm` and `absoluteAuthority`, rejecting forms that do not fit the method.
    static func classifyTarget(_ p: UnsafeRawBufferPointer, _ head: inout RequestHead) throws(HTTPParseError) {
        let t = head.target
        head.absoluteAuthority = nil
        if head.method == .connect {
            guard HostSyntax.isValid(p, t, requirePort: true) else { throw .bad("CONNECT needs host:port") }
            head.targetForm = .authority
            return
        }
        let first = p[t.lowerBound]
        if first == ByteClass.slash {
            head.targetForm = .origin
        } else if first == 0x2A && t.count == 1 {
            guard head.method == .options else { throw .bad("asterisk-form is only for OPTIONS") }
            head.targetForm = .asterisk
        } else if let authorityStart = afterScheme(p, t) {
            var i = authorityStart
            while i < t.upperBound && p[i] != ByteClass.slash && p[i] != 0x3F { i &+= 1 }
            let authority = authorityStart..<i
            guard HostSyntax.isValid(p, authority) else { throw .bad("invalid authority in request target") }
            head.targetForm = .absolute
            head.absoluteAuthority = authority
        } else {
            throw .bad("invalid request target")
        }
    }

    /// The offset after `http://` or `https://` (scheme case-insensitive), or nil.
    static func afterScheme(_ p: UnsafeRawBufferPointer, _ t: Range<Int>) -> Int? {
        let s = t.lowerBound
        if t.count >= 7, HTTPBytes.equalsCaseInsensitive(p, s..<(s &+ 7), "http://") { return s &+ 7 }
        if t.count >= 8, HTTPBytes.equalsCaseInsensitive(p, s..<(s &+ 8), "https://") { return s &+ 8 }
        return nil
    }
}
