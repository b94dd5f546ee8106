import PortcullisCore

/// How long Redis takes to answer, over every command this process sends (every client,
/// every loop, subscribers' commands included): from the command's queueing on its
/// connection to its reply, for `portcullis_redis_command_duration_seconds`. A reply that
/// came after its command timed out is counted at the time it took.
///
/// One short lock per reply: Redis is asked on sessions, key sharing and revocation sync,
/// never once per proxied request.
public final class RedisCommandTimings: Sendable {
    public static let shared = RedisCommandTimings()

    /// Upper bounds (seconds), from 100 µs (a loopback round trip) past the default command
    /// timeout (`+Inf` after).
    public static let buckets: [Double] = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                           0.1, 0.25, 0.5, 1, 2.5, 5]
    private static let bucketNanos: [UInt64] = buckets.map { UInt64($0 * 1e9) }

    private let counts = LockedValue<(buckets: [Int], sumNanos: UInt64)>(
        ([Int](repeating: 0, count: RedisCommandTimings.buckets.count + 1), 0))

    func record(nanoseconds: UInt64) {
        let bucket = HistogramBucket.index(of: nanoseconds, in: Self.bucketNanos)
        counts.withLock { counts in
            counts.buckets[bucket] &+= 1
            counts.sumNanos &+= nanoseconds
        }
    }

    /// Counts per bucket of `buckets` and `+Inf` (not cumulative) and the sum in seconds.
    public func snapshot() -> (buckets: [Int], sum: Double) {
        let counts = counts.withLock { $0 }
        return (counts.buckets, Double(counts.sumNanos) / 1e9)
    }
}
