/// Request-target normalization for routing (issue item 5), equivalent to Envoy's `normalize_path`
/// plus `merge_slashes`, with escaped slashes rejected, so that no spelling of a protected path can
/// reach an upstream through a public route:
///
/// - percent-encoded unreserved characters (ALPHA DIGIT - . _ ~) are decoded, hex case-insensitive;
/// - `%2F`, `%5C` (encoded slash / backslash), `%00` and malformed escapes are rejected with 400;
/// - other escapes are kept, their hex upper-cased (`%3a` → `%3A`);
/// - `\` becomes `/`; repeated slashes are merged;
/// - dot segments are removed (RFC 3986 §5.2.4), including dots that were `%2E`, never above the root;
/// - a dot segment with path parameters (`/..;x/`, `/.;/`), which servlet containers treat as a dot segment, is rejected;
/// - the query is left untouched; a fragment (`#`) or a byte outside visible ASCII is rejected with 400.
public enum TargetNormalizer {
    /// Normalizes raw request-target bytes. For absolute-form the path after the authority is used
    /// (an empty path becomes `/`); asterisk-form gives path `*`; authority-form (CONNECT) is returned
    /// unchanged as the path. The path is built with a single allocation (none when it is short);
    /// the query, when present, costs one more.
    public static func normalize(
        _ target: UnsafeRawBufferPointer, form: RequestTargetForm
    ) -> Swift.Result<NormalizedTarget, HTTPParseError> {
        for b in target where !ByteClass.isTargetByte(b) {
            return .failure(.bad(b == 0x23 ? "fragment in request target" : "invalid character in request target"))
        }
        var start = 0
        switch form {
        case .asterisk:
            guard target.count == 1, target[0] == 0x2A else { return .failure(.bad("invalid asterisk-form target")) }
            return .success(NormalizedTarget(path: "*", query: nil))
        case .authority:
            return .success(NormalizedTarget(path: String(decoding: target, as: UTF8.self), query: nil))
        case .absolute:
            guard let authorityStart = RequestLine.afterScheme(target, 0..<target.count) else {
                return .failure(.bad("invalid request target"))
            }
            start = authorityStart
            while start < target.count && target[start] != ByteClass.slash && target[start] != 0x3F { start &+= 1 }
        case .origin:
            guard target.first == ByteClass.slash else { return .failure(.bad("invalid request target")) }
        }
        var pathEnd = start
        while pathEnd < target.count && target[pathEnd] != 0x3F { pathEnd &+= 1 }
        do throws(HTTPParseError) {
            let raw = UnsafeRawBufferPointer(rebasing: target[start..<pathEnd])
            // The output never exceeds the input plus a leading '/' (one spare byte for safety).
            // Written on the stack and copied into the String once: a path of up to 15 bytes
            // then costs no allocation (String(unsafeUninitializedCapacity:) allocated one
            // per request even for "/").
            let path = try withUnsafeTemporaryAllocation(of: UInt8.self, capacity: raw.count &+ 2) { out throws(HTTPParseError) -> String in
                let length = try normalizePath(raw, into: out)
                return String(decoding: UnsafeBufferPointer(rebasing: out[0..<length]), as: UTF8.self)
            }
            let query: String? = pathEnd < target.count
                ? String(decoding: UnsafeRawBufferPointer(rebasing: target[(pathEnd &+ 1)...]), as: UTF8.self)
                : nil
            return .success(NormalizedTarget(path: path, query: query))
        } catch {
            return .failure(error)
        }
    }

    /// Writes the normalized form of `path` (raw bytes, possibly empty) into `out`, returns its length.
    /// `out` must hold at least `path.count + 2` bytes.
    static func normalizePath(_ path: UnsafeRawBufferPointer, into out: UnsafeMutableBufferPointer<UInt8>) throws(HTTPParseError) -> Int {
        var o = 0
        out[o] = ByteClass.slash
        o = 1
        // Invariant: out[0..<o] ends with '/'; `segmentStart` is where the current segment begins.
        var segmentStart = 1
        var lastSegmentWasName = false
        var i = 0
        let n = path.count

        func closeSegment() throws(HTTPParseError) {
            let length = o &- segmentStart
            let dot: UInt8 = 0x2E
            // "..;x" / ".;x": servlet containers drop path parameters before removing dot segments,
            // so for them this segment is a dot segment. Ambiguous: reject rather than guess.
            if length >= 2 && out[segmentStart] == dot {
                let second = out[segmentStart &+ 1]
                if second == ByteClass.semicolon
                    || (second == dot && length >= 3 && out[segmentStart &+ 2] == ByteClass.semicolon) {
                    throw .bad("dot segment with path parameters")
                }
            }
            if length == 0 {
                lastSegmentWasName = false  // merged slash
                return
            }
            if length == 1 && out[segmentStart] == dot {
                o = segmentStart
                lastSegmentWasName = false
                return
            }
            if length == 2 && out[segmentStart] == dot && out[segmentStart &+ 1] == dot {
                o = segmentStart &- 1  // drop the '/' before "..", then the previous segment
                while o > 0 && out[o &- 1] != ByteClass.slash { o &-= 1 }
                if o == 0 { o = 1 }  // clamp at the root
                segmentStart = o
                lastSegmentWasName = false
                return
            }
            out[o] = ByteClass.slash
            o &+= 1
            segmentStart = o
            lastSegmentWasName = true
        }

        while i < n {
            var b = path[i]
            i &+= 1
            if b == 0x25 {  // '%'
                guard i &+ 1 < n, let hi = ByteClass.hexValue(path[i]), let lo = ByteClass.hexValue(path[i &+ 1])
                else { throw .bad("malformed percent-encoding in path") }
                let decoded = hi << 4 | lo
                i &+= 2
                if decoded == 0 || decoded == ByteClass.slash || decoded == 0x5C {
                    throw .bad("encoded slash, backslash or NUL in path")
                }
                if ByteClass.isUnreserved(decoded) {
                    out[o] = decoded
                    o &+= 1
                } else {
                    out[o] = 0x25
                    out[o &+ 1] = hexDigit(hi)
                    out[o &+ 2] = hexDigit(lo)
                    o &+= 3
                }
                continue
            }
            if b == 0x5C { b = ByteClass.slash }
            if b == ByteClass.slash {
                try closeSegment()
            } else {
                out[o] = b
                o &+= 1
            }
        }
        try closeSegment()
        // A final name segment got a '/' from closeSegment that the input did not have.
        if lastSegmentWasName { o &-= 1 }
        return o
    }

    @inline(__always)
    private static func hexDigit(_ v: UInt8) -> UInt8 { v < 10 ? 0x30 &+ v : 0x41 &+ v &- 10 }
}
