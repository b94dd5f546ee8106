/// SipHash-2-4 with 128-bit output (Aumasson & Bernstein), a keyed PRF:
/// without the per-process random key nobody can find two credentials that
/// share a cache slot. Streaming, so a cookie's name and value are hashed
/// without joining them.
struct SipHash128 {
    private var v0: UInt64, v1: UInt64, v2: UInt64, v3: UInt64
    private var tail: UInt64 = 0
    private var tailCount = 0
    private var length = 0

    init(key: (UInt64, UInt64)) {
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
        round(); round()
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
        while index + 8 <= count {
            compress(UInt64(littleEndian: bytes.loadUnaligned(fromByteOffset: index, as: UInt64.self)))
            index += 8
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
        round(); round(); round(); round()
        let first = v0 ^ v1 ^ v2 ^ v3
        v1 ^= 0xdd
        round(); round(); round(); round()
        let second = v0 ^ v1 ^ v2 ^ v3
        return (first, second)
    }
}

extension UInt64 {
    @inline(__always)
    fileprivate func rotateLeft(_ count: UInt64) -> UInt64 { (self << count) | (self >> (64 - count)) }
}
