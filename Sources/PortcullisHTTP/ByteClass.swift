/// Character classes of RFC 9110 / RFC 3986 as 128-bit masks: a class test is two shifts,
/// with no table in memory and no lazy global initialisation.
enum ByteClass {
    /// ASCII bytes used by the codec.
    static let cr: UInt8 = 0x0D, lf: UInt8 = 0x0A, sp: UInt8 = 0x20, htab: UInt8 = 0x09
    static let colon: UInt8 = 0x3A, comma: UInt8 = 0x2C, semicolon: UInt8 = 0x3B, slash: UInt8 = 0x2F

    @inline(__always)
    static func inMask(_ b: UInt8, _ lo: UInt64, _ hi: UInt64) -> Bool {
        if b < 64 { return (lo >> UInt64(b)) & 1 != 0 }
        if b < 128 { return (hi >> UInt64(b &- 64)) & 1 != 0 }
        return false
    }

    /// `tchar` (RFC 9110 §5.6.2).
    @inline(__always)
    static func isToken(_ b: UInt8) -> Bool { inMask(b, 0x03ff_6cfa_0000_0000, 0x57ff_ffff_c7ff_fffe) }

    /// Bytes of a Host value: unreserved, sub-delims, '%', ':', '[' and ']' (RFC 3986 §3.2.2).
    @inline(__always)
    static func isHostByte(_ b: UInt8) -> Bool { inMask(b, 0x2fff_7ff2_0000_0000, 0x47ff_fffe_afff_fffe) }

    /// `unreserved` (RFC 3986 §2.3): ALPHA DIGIT - . _ ~
    @inline(__always)
    static func isUnreserved(_ b: UInt8) -> Bool { inMask(b, 0x03ff_6000_0000_0000, 0x47ff_fffe_87ff_fffe) }

    /// A byte allowed in a field value: VCHAR, obs-text, SP, HTAB (no other CTL, no DEL).
    @inline(__always)
    static func isFieldValueByte(_ b: UInt8) -> Bool { (b >= 0x20 && b != 0x7F) || b == htab }

    /// A byte allowed in a request-target: visible ASCII except '#' (fragments are never sent).
    @inline(__always)
    static func isTargetByte(_ b: UInt8) -> Bool { b > 0x20 && b < 0x7F && b != 0x23 }

    @inline(__always)
    static func isDigit(_ b: UInt8) -> Bool { b &- 0x30 < 10 }

    /// The value of a hex digit, or nil.
    @inline(__always)
    static func hexValue(_ b: UInt8) -> UInt8? {
        if b &- 0x30 < 10 { return b &- 0x30 }
        let l = b | 0x20
        if l &- 0x61 < 6 { return l &- 0x61 &+ 10 }
        return nil
    }

    @inline(__always)
    static func lower(_ b: UInt8) -> UInt8 { b &- 0x41 < 26 ? b | 0x20 : b }

    @inline(__always)
    static func isOWS(_ b: UInt8) -> Bool { b == sp || b == htab }
}
