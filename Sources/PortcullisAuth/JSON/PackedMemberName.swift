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
        guard let source = bytes.baseAddress else { return }
        if length > 8 {
            low = Self.load(source, 8)
            high = Self.load(source + 8, length &- 8)
        } else {
            low = Self.load(source, length)
        }
    }

    /// One of 64 buckets for a name, from its first 16 bytes and its
    /// length (any length): equal names always share a bucket.
    @inline(__always)
    static func bucket(_ bytes: UnsafeRawBufferPointer) -> UInt64 {
        guard let source = bytes.baseAddress else { return 0 }
        let count = bytes.count
        let low = load(source, min(count, 8))
        let high = count > 8 ? load(source + 8, min(count &- 8, 8)) : 0
        let mixed = (low &* 0x9E37_79B9_7F4A_7C15) ^ (high &* 0xC2B2_AE3D_27D4_EB4F) ^ UInt64(truncatingIfNeeded: count)
        return (mixed &* 0x1656_67B1_9E37_79F9) >> 58
    }

    /// `count` (0...8) bytes at `source` as a little-endian word, zero-filled
    /// above; never reads outside `source..<source + count`. Overlapping
    /// loads cover odd lengths (the bytes they share are the same).
    @inline(__always)
    static func load(_ source: UnsafeRawPointer, _ count: Int) -> UInt64 {
        switch count {
        case 8:
            return UInt64(littleEndian: source.loadUnaligned(as: UInt64.self))
        case 4...7:
            let first = UInt64(UInt32(littleEndian: source.loadUnaligned(as: UInt32.self)))
            let last = UInt64(UInt32(littleEndian: source.loadUnaligned(fromByteOffset: count &- 4, as: UInt32.self)))
            return first | last << (8 &* UInt64(count &- 4))
        case 1...3:
            let bytes = source.assumingMemoryBound(to: UInt8.self)
            let middle = count >> 1, last = count &- 1
            return UInt64(bytes[0]) | UInt64(bytes[middle]) << (8 &* UInt64(middle)) | UInt64(bytes[last]) << (8 &* UInt64(last))
        default:
            return 0
        }
    }

    /// The name of an unescaped string token, or nil (escaped or too long).
    @inline(__always)
    init?(_ buffer: UnsafeBufferPointer<UInt8>, _ token: JSONToken) {
        guard !token.flag else { return nil }
        self.init(UnsafeRawBufferPointer(UnsafeBufferPointer(rebasing: buffer[Int(token.start)..<Int(token.end)])))
    }
}
