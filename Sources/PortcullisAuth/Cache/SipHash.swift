/// SipHash with 128-bit output (Aumasson & Bernstein), a keyed PRF: without
/// the per-process random key nobody can find two credentials that share a
/// cache slot. Streaming, so a cookie's name and value are hashed without
/// joining them.
///
/// The cache uses SipHash-1-3 (the variant Swift's `Hasher` and Rust's
/// `HashMap` use against hash flooding): half the compression work of
/// SipHash-2-4, which matters for 1.1 KB Google tokens on every cache hit.
/// The outputs are never shown to anyone, so an attacker can only probe
/// collisions online, against a 128-bit space. SipHash-2-4 is kept for the
/// reference-vector test.
struct SipHash128 {
    private var v0: UInt64, v1: UInt64, v2: UInt64, v3: UInt64
    private let compressionRounds: Int
    private let finalizationRounds: Int
    private var tail: UInt64 = 0
    private var tailCount = 0
    private var length = 0

    /// SipHash-1-3-128, the cache's hash.
    static func cacheHasher(key: (UInt64, UInt64)) -> SipHash128 { SipHash128(key: key, compressionRounds: 1, finalizationRounds: 3) }

    init(key: (UInt64, UInt64), compressionRounds: Int = 2, finalizationRounds: Int = 4) {
        self.compressionRounds = compressionRounds
        self.finalizationRounds = finalizationRounds
        v0 = 0x736f6d6570736575 ^ key.0
        v1 = 0x646f72616e646f6d ^ key.1 ^ 0xee
        v2 = 0x6c7967656e657261 ^ key.0
        v3 = 0x7465646279746573 ^ key.1
    }

    @inline(__always)
    private mutating func round() {
        v0 &+= v1; v1 = v1.rotateLeft(13); v1 ^= v0; v0 = v0.rotateLeft(32)
        v2 &+= v3; v3 = v3.rotateLeft(16); v3 ^= v2
        v0 &+= v3; v3 = v3.rotateLeft(21); v3 ^= v0
        v2 &+= v1; v1 = v1.rotateLeft(17); v1 ^= v2; v2 = v2.rotateLeft(32)
    }

    @inline(__always)
    private mutating func compress(_ m: UInt64) {
        v3 ^= m
        for _ in 0..<compressionRounds { round() }
        v0 ^= m
    }

    mutating func update(_ bytes: UnsafeRawBufferPointer) {
        var index = 0
        let count = bytes.count
        length &+= count
        while tailCount != 0 && index < count {
            tail |= UInt64(bytes[index]) << (8 * UInt64(tailCount))
            tailCount += 1
            index += 1
            if tailCount == 8 { compress(tail); tail = 0; tailCount = 0 }
        }
        if index + 8 <= count {
            // The bulk loop keeps the state in locals so it stays in registers.
            var a = v0, b = v1, c = v2, d = v3
            let base = bytes.baseAddress!
            let rounds = compressionRounds
            if rounds == 1 {  // SipHash-1-3: one round per block, unrolled
                let end = index + ((count - index) & ~7)
                while index < end {
                    let m = UInt64(littleEndian: base.loadUnaligned(fromByteOffset: index, as: UInt64.self))
                    d ^= m
                    a &+= b; b = b.rotateLeft(13); b ^= a; a = a.rotateLeft(32)
                    c &+= d; d = d.rotateLeft(16); d ^= c
                    a &+= d; d = d.rotateLeft(21); d ^= a
                    c &+= b; b = b.rotateLeft(17); b ^= c; c = c.rotateLeft(32)
                    a ^= m
                    index &+= 8
                }
            }
            while index + 8 <= count {
                let m = UInt64(littleEndian: base.loadUnaligned(fromByteOffset: index, as: UInt64.self))
                d ^= m
                for _ in 0..<rounds {
                    a &+= b; b = b.rotateLeft(13); b ^= a; a = a.rotateLeft(32)
                    c &+= d; d = d.rotateLeft(16); d ^= c
                    a &+= d; d = d.rotateLeft(21); d ^= a
                    c &+= b; b = b.rotateLeft(17); b ^= c; c = c.rotateLeft(32)
                }
                a ^= m
                index += 8
            }
            v0 = a; v1 = b; v2 = c; v3 = d
        }
        while index < count {
            tail |= UInt64(bytes[index]) << (8 * UInt64(tailCount))
            tailCount += 1
            index += 1
        }
    }

    mutating func update(byte: UInt8) {
        withUnsafeBytes(of: byte) { update($0) }
    }

    mutating func finalize() -> (UInt64, UInt64) {
        let b = tail | UInt64(truncatingIfNeeded: length) << 56
        compress(b)
        v2 ^= 0xee
        for _ in 0..<finalizationRounds { round() }
        let first = v0 ^ v1 ^ v2 ^ v3
        v1 ^= 0xdd
        for _ in 0..<finalizationRounds { round() }
        let second = v0 ^ v1 ^ v2 ^ v3
        return (first, second)
    }
}

extension UInt64 {
    @inline(__always)
    fileprivate func rotateLeft(_ count: UInt64) -> UInt64 { (self << count) | (self >> (64 - count)) }
}
