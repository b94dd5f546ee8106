/// The `.`-separated segments of a compact JWS (3) or JWE (5), as offsets
/// into the caller's bytes: nothing is copied.
struct CompactSegments {
    private(set) var starts: (Int, Int, Int, Int, Int) = (0, 0, 0, 0, 0)
    private(set) var ends: (Int, Int, Int, Int, Int) = (0, 0, 0, 0, 0)
    private(set) var count = 0

    /// Splits `bytes`; nil when there are more than 5 segments.
    init?(_ bytes: UnsafeRawBufferPointer) {
        var start = 0
        var index = 0
        var found = 0
        var s = (0, 0, 0, 0, 0), e = (0, 0, 0, 0, 0)
        func set(_ tuple: inout (Int, Int, Int, Int, Int), _ i: Int, _ value: Int) {
            switch i {
            case 0: tuple.0 = value
            case 1: tuple.1 = value
            case 2: tuple.2 = value
            case 3: tuple.3 = value
            default: tuple.4 = value
            }
        }
        while index < bytes.count {
            if bytes[index] == UInt8(ascii: ".") {
                guard found < 4 else { return nil }
                set(&s, found, start)
                set(&e, found, index)
                found += 1
                start = index + 1
            }
            index += 1
        }
        set(&s, found, start)
        set(&e, found, bytes.count)
        self.starts = s
        self.ends = e
        self.count = found + 1
    }

    subscript(_ index: Int) -> Range<Int> {
        switch index {
        case 0: return starts.0..<ends.0
        case 1: return starts.1..<ends.1
        case 2: return starts.2..<ends.2
        case 3: return starts.3..<ends.3
        default: return starts.4..<ends.4
        }
    }
}
