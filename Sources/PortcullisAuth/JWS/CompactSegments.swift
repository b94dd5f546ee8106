#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The `.`-separated segments of a compact JWS (3) or JWE (5), as offsets
/// into the caller's bytes: nothing is copied.
struct CompactSegments {
    private var bounds: (Int, Int, Int, Int, Int, Int) = (0, 0, 0, 0, 0, 0)
    private(set) var count = 0

    /// Splits `bytes` at dots (found with `memchr`); nil when there are more
    /// than 5 segments.
    init?(_ bytes: UnsafeRawBufferPointer) {
        // bounds.k is the index of the k-th dot (segment k ends there, k+1 starts after it).
        var dots = (0, 0, 0, 0)
        var found = 0
        if let base = bytes.baseAddress {
            var position = 0
            while position < bytes.count, let hit = memchr(base + position, Int32(UInt8(ascii: ".")), bytes.count - position) {
                let index = base.distance(to: UnsafeRawPointer(hit))
                guard found < 4 else { return nil }
                switch found {
                case 0: dots.0 = index
                case 1: dots.1 = index
                case 2: dots.2 = index
                default: dots.3 = index
                }
                found += 1
                position = index + 1
            }
        }
        count = found + 1
        bounds = (dots.0, dots.1, dots.2, dots.3, bytes.count, found)
    }

    @inline(__always)
    private func dot(_ index: Int) -> Int {
        switch index {
        case 0: return bounds.0
        case 1: return bounds.1
        case 2: return bounds.2
        default: return bounds.3
        }
    }

    /// Segment `index` (0-based, below `count`).
    subscript(_ index: Int) -> Range<Int> {
        let start = index == 0 ? 0 : dot(index - 1) + 1
        let end = index == bounds.5 ? bounds.4 : dot(index)
        return start..<end
    }
}
