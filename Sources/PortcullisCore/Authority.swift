/// The one reading of an authority (`host [":" port]`, RFC 3986 §3.2.2, RFC 9110 §7.2) that
/// routing, TLS server names and the `Host` sent upstream all use, wherever it came from:
/// HTTP/1.1 `Host`, an absolute-form target, HTTP/2 `:authority` or `host`, a TLS SNI.
///
/// Accepted: a reg-name or IPv4 address of unreserved and sub-delim characters, or a
/// bracketed IPv6 literal; an optional port of 1 to 5 digits up to 65535. Normalized:
/// lower case; one trailing dot removed (`example.com.` names `example.com`); an empty port
/// dropped; leading zeros of the port dropped (port 0 and ports past 65535 are refused). Refused: userinfo (`a@b`, deprecated by RFC
/// 9110 §4.2.4 and a classic way to confuse host checks), percent-encoding (no client needs
/// it in a host, and decoding it is where two readers disagree), empty labels (`a..b`, a
/// leading dot, a name that is only dots), a second colon outside brackets, anything else.
///
/// Pure and allocation-free: `scan` validates and measures; `write` emits the normalized
/// bytes into a caller's buffer; `host` makes a `String` only when asked.
public enum Authority {
    /// Where the parts of a valid authority are in the scanned bytes.
    public struct Parts: Sendable, Equatable {
        /// The host, brackets included for an IPv6 literal, the trailing dot excluded.
        public var host: Range<Int>
        /// The port's significant digits (leading zeros excluded); nil without a port.
        public var port: Range<Int>?
    }

    /// Validates `p[range]`; nil when it is not an authority this gateway accepts.
    public static func scan(_ p: UnsafeRawBufferPointer, _ range: Range<Int>) -> Parts? {
        var i = range.lowerBound
        let end = range.upperBound
        guard i < end else { return nil }
        let hostStart = i
        var hostEnd: Int
        if p[i] == UInt8(ascii: "[") {
            i &+= 1
            let literalStart = i
            while i < end && p[i] != UInt8(ascii: "]") {
                let b = p[i]
                guard isHex(b) || b == UInt8(ascii: ":") || b == UInt8(ascii: ".") else { return nil }
                i &+= 1
            }
            guard i < end, i > literalStart else { return nil }
            i &+= 1
            hostEnd = i
        } else {
            var labelLength = 0
            while i < end && p[i] != UInt8(ascii: ":") {
                let b = p[i]
                if b == UInt8(ascii: ".") {
                    guard labelLength > 0 else { return nil }  // a leading dot or ".."
                    labelLength = 0
                } else {
                    guard isRegNameByte(b) else { return nil }
                    labelLength &+= 1
                }
                i &+= 1
            }
            guard i > hostStart else { return nil }
            hostEnd = i
            // One trailing dot: the same host (an absolute name).
            if p[hostEnd &- 1] == UInt8(ascii: ".") { hostEnd &-= 1 }
            guard hostEnd > hostStart else { return nil }
        }
        if i == end { return Parts(host: hostStart..<hostEnd, port: nil) }
        guard p[i] == UInt8(ascii: ":") else { return nil }
        i &+= 1
        guard end &- i <= 5 else { return nil }
        if i == end { return Parts(host: hostStart..<hostEnd, port: nil) }  // `host:`: no port
        var value = 0
        var significant = end
        while i < end {
            let b = p[i]
            guard b >= UInt8(ascii: "0") && b <= UInt8(ascii: "9") else { return nil }
            if significant == end && b != UInt8(ascii: "0") { significant = i }
            value = value &* 10 &+ Int(b &- UInt8(ascii: "0"))
            i &+= 1
        }
        guard value > 0 && value <= 65535 else { return nil }
        return Parts(host: hostStart..<hostEnd, port: significant..<end)
    }

    /// Whether `p[range]` is an authority this gateway accepts (`requirePort`: with a port).
    public static func isValid(_ p: UnsafeRawBufferPointer, _ range: Range<Int>, requirePort: Bool = false) -> Bool {
        guard let parts = scan(p, range) else { return false }
        return !requirePort || parts.port != nil
    }

    /// Appends the normalized authority (`host[:port]`, lower case) through `append`.
    public static func write(_ p: UnsafeRawBufferPointer, _ parts: Parts, _ append: (UInt8) -> Void) {
        for i in parts.host { append(lower(p[i])) }
        if let port = parts.port {
            append(UInt8(ascii: ":"))
            for i in port { append(p[i]) }
        }
    }

    /// The normalized host without its port.
    public static func host(_ p: UnsafeRawBufferPointer, _ parts: Parts) -> String {
        String(unsafeUninitializedCapacity: parts.host.count) { out in
            var n = 0
            for i in parts.host { out[n] = lower(p[i]); n &+= 1 }
            return n
        }
    }

    /// The normalized host of a name given as text (a TLS server name, a configured route
    /// host); nil when it is not a valid authority, or has a port and `allowPort` is false.
    public static func normalizedHost(_ text: String, allowPort: Bool = true) -> String? {
        var text = text
        return text.withUTF8 { utf8 in
            let raw = UnsafeRawBufferPointer(utf8)
            guard let parts = scan(raw, 0..<raw.count), allowPort || parts.port == nil else { return nil }
            return host(raw, parts)
        }
    }

    /// Whether two valid authorities name the same host and port once normalized.
    public static func same(_ p: UnsafeRawBufferPointer, _ a: Parts, _ q: UnsafeRawBufferPointer, _ b: Parts) -> Bool {
        guard a.host.count == b.host.count, a.port?.count == b.port?.count else { return false }
        for (i, j) in zip(a.host, b.host) where lower(p[i]) != lower(q[j]) { return false }
        if let x = a.port, let y = b.port {
            for (i, j) in zip(x, y) where p[i] != q[j] { return false }
        }
        return true
    }

    @inline(__always)
    static func lower(_ b: UInt8) -> UInt8 { b >= 65 && b <= 90 ? b | 0x20 : b }

    @inline(__always)
    static func isHex(_ b: UInt8) -> Bool {
        (b >= 48 && b <= 57) || (b | 0x20 >= 97 && b | 0x20 <= 102)
    }

    /// unreserved (ALPHA DIGIT - . _ ~) and sub-delims (! $ & ' ( ) * + , ; =), dot excluded
    /// (labels are counted); no '%', no '@'.
    @inline(__always)
    static func isRegNameByte(_ b: UInt8) -> Bool {
        switch b {
        case 48...57, 65...90, 97...122: return true
        case UInt8(ascii: "-"), UInt8(ascii: "_"), UInt8(ascii: "~"),
             UInt8(ascii: "!"), UInt8(ascii: "$"), UInt8(ascii: "&"), UInt8(ascii: "'"), UInt8(ascii: "("),
             UInt8(ascii: ")"), UInt8(ascii: "*"), UInt8(ascii: "+"), UInt8(ascii: ","), UInt8(ascii: ";"),
             UInt8(ascii: "="):
            return true
        default: return false
        }
    }
}
