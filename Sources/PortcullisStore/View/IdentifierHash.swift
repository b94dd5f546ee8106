/// The 64-bit hash of a revocation identifier (a jti, a session id, a subject)
/// used by `RevocationTable`: 16 bytes per step with one 64×64→128-bit multiply
/// (the structure of wyhash), seeded once per process.
///
/// Why not `Hasher`: Swift's `String` hashing is SipHash-1-3 over the normalized
/// UTF-8 plus a separate finalization, about 340 instructions for a 27-byte id
/// (callgrind, see Benchmarks/StoreBenchmarks/Profile), and `Dictionary` compares
/// the full `String` key against every occupied bucket of a probe chain. This
/// hash is about 40 instructions for the same id, and the table compares the
/// stored fingerprint first.
///
/// Not a cryptographic hash: it only decides where an entry sits. The table
/// confirms every fingerprint match on the full identifier, so a collision costs
/// a comparison, never a wrong answer. The per-process random seed keeps an
/// outsider from precomputing colliding identifiers (the table's contents are
/// revocations written by operators and by logouts, not chosen by clients anyway).
struct IdentifierHash: Sendable, Equatable {
    let seed: UInt64

    /// One seed for the whole process, so a table built on one queue can be read on any loop.
    static let process = IdentifierHash(seed: UInt64.random(in: .min ... .max))

    init(seed: UInt64) { self.seed = seed }

    private static let p0: UInt64 = 0xa076_1d64_78bd_642f
    private static let p1: UInt64 = 0xe703_7ed1_a0b4_28db
    private static let p2: UInt64 = 0x8ebc_6af0_9c88_c6e3

    /// Both operands carry the seed, so no input reaches the multiply's zero (which
    /// would drop the state) without knowing it.
    @inline(__always)
    private static func mix(_ a: UInt64, _ b: UInt64) -> UInt64 {
        let (high, low) = a.multipliedFullWidth(by: b)
        return high ^ low
    }

    /// The hash of `id` in the namespace `kind` (the same text as a jti and as a
    /// subject hashes differently). Never 0: the table uses 0 for an empty slot.
    @inline(__always)
    func hash(_ id: String, kind: UInt8) -> UInt64 {
        let h = id.utf8.withContiguousStorageIfAvailable { hash(UnsafeRawBufferPointer($0), kind: kind) }
        return h ?? hash(Array(id.utf8), kind: kind)
    }

    @inline(__always)
    private func hash(_ bytes: [UInt8], kind: UInt8) -> UInt64 {
        bytes.withUnsafeBytes { hash($0, kind: kind) }
    }

    @inline(__always)
    func hash(_ bytes: UnsafeRawBufferPointer, kind: UInt8) -> UInt64 {
        let n = bytes.count
        var s = seed ^ Self.mix(seed ^ Self.p0 ^ UInt64(kind), Self.p1)
        var a: UInt64 = 0
        var b: UInt64 = 0
        if n > 0, let p = bytes.baseAddress {
            if n <= 16 {
                if n >= 8 {
                    a = p.loadUnaligned(as: UInt64.self)
                    b = p.loadUnaligned(fromByteOffset: n - 8, as: UInt64.self)
                } else if n >= 4 {
                    a = UInt64(p.loadUnaligned(as: UInt32.self)) << 32 | UInt64(p.loadUnaligned(fromByteOffset: n - 4, as: UInt32.self))
                } else {
                    a = UInt64(p.load(as: UInt8.self)) << 16 | UInt64(p.load(fromByteOffset: n >> 1, as: UInt8.self)) << 8
                        | UInt64(p.load(fromByteOffset: n - 1, as: UInt8.self))
                }
            } else {
                var i = 0
                while n - i > 16 {
                    s = Self.mix(p.loadUnaligned(fromByteOffset: i, as: UInt64.self) ^ Self.p1 ^ seed,
                                 p.loadUnaligned(fromByteOffset: i + 8, as: UInt64.self) ^ s)
                    i += 16
                }
                a = p.loadUnaligned(fromByteOffset: n - 16, as: UInt64.self)
                b = p.loadUnaligned(fromByteOffset: n - 8, as: UInt64.self)
            }
        }
        let h = Self.mix(Self.p1 ^ UInt64(truncatingIfNeeded: n), Self.mix(a ^ Self.p1 ^ seed, b ^ s ^ Self.p2))
        return h == 0 ? 1 : h
    }
}
