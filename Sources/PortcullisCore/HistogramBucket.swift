/// Histograms counted in plain integers (the edge request durations per loop, the Redis round
/// trips): the bucket a value falls in, one rule for both.
public enum HistogramBucket {
    /// The index of the first upper bound `value` does not exceed (`upperBounds.count`: past
    /// them all, the `+Inf` bucket). Bounds ascending.
    @inlinable @inline(__always)
    public static func index(of value: UInt64, in upperBounds: [UInt64]) -> Int {
        var bucket = 0
        while bucket < upperBounds.count && value > upperBounds[bucket] { bucket &+= 1 }
        return bucket
    }
}
