/// A member name of up to 16 bytes packed little-endian into two words, so
/// matching a key against every claim name `ClaimIndex` knows is integer
/// compares: no array of names is walked (and retained) per key.
struct PackedMemberName: Equatable {
    var low: UInt64 = 0
    var high: UInt64 = 0
    var length = 0

    /// nil when longer than 16 bytes.
    @inline(__always)
    init?(_ bytes: UnsafeRawBufferPointer) {
        guard bytes.count <= 16 else { return nil }
        length = bytes.count
        for (offset, byte) in bytes.enumerated() {
            if offset < 8 {
                low |= UInt64(byte) << (8 * UInt64(offset))
            } else {
                high |= UInt64(byte) << (8 * UInt64(offset - 8))
            }
        }
    }

    /// The name of an unescaped string token, or nil (escaped or too long).
    @inline(__always)
    init?(_ buffer: UnsafeBufferPointer<UInt8>, _ token: JSONToken) {
        guard !token.flag else { return nil }
        self.init(UnsafeRawBufferPointer(UnsafeBufferPointer(rebasing: buffer[Int(token.start)..<Int(token.end)])))
    }
}
