/// Word-at-a-time searches for the two hot loops of head parsing: finding the next line break and
/// validating a field value. Eight bytes are tested with a few integer operations (the classic
/// "has zero byte" trick); only a word that may contain an interesting byte is looked at byte by byte.
enum ByteScan {
    private static let ones: UInt64 = 0x0101_0101_0101_0101
    private static let highs: UInt64 = 0x8080_8080_8080_8080

    /// Non-zero iff some byte of `w` is zero (exact as an existence test).
    @inline(__always)
    private static func hasZeroByte(_ w: UInt64) -> UInt64 { (w &- ones) & ~w & highs }

    /// Non-zero iff some byte of `w` is below 0x20 (bytes ≥ 0x80 never count).
    @inline(__always)
    private static func hasControlByte(_ w: UInt64) -> UInt64 { (w &- ones &* 0x20) & ~w & highs }

    /// The index of the first CR or LF in `p[from..<to]`, or `to`.
    @inline(__always)
    static func firstLineBreak(_ p: UnsafeRawBufferPointer, from: Int, to: Int) -> Int {
        var i = from
        while i &+ 8 <= to {
            let w = p.loadUnaligned(fromByteOffset: i, as: UInt64.self)
            if hasZeroByte(w ^ (ones &* 0x0D)) | hasZeroByte(w ^ (ones &* 0x0A)) != 0 { break }
            i &+= 8
        }
        while i < to {
            let b = p[i]
            if b == ByteClass.cr || b == ByteClass.lf { return i }
            i &+= 1
        }
        return to
    }

    /// The index of the first byte in `p[from..<to]` not allowed in a field value (a CTL other than
    /// HTAB, or DEL), or `to`. CR is such a byte, so this also finds the end of a field line.
    @inline(__always)
    static func firstNonFieldValueByte(_ p: UnsafeRawBufferPointer, from: Int, to: Int) -> Int {
        var i = from
        while i &+ 8 <= to {
            let w = p.loadUnaligned(fromByteOffset: i, as: UInt64.self)
            if hasControlByte(w) | hasZeroByte(w ^ (ones &* 0x7F)) != 0 {
                for k in i..<(i &+ 8) where !ByteClass.isFieldValueByte(p[k]) { return k }
            }
            i &+= 8
        }
        while i < to {
            if !ByteClass.isFieldValueByte(p[i]) { return i }
            i &+= 1
        }
        return to
    }
}
