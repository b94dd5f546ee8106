#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Monotonic time in nanoseconds, cheap enough to read on every event
/// (CLOCK_MONOTONIC is served from the vDSO without a system call on Linux).
public enum MonotonicClock {
    @inline(__always)
    public static func nowNanoseconds() -> UInt64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return UInt64(ts.tv_sec) &* 1_000_000_000 &+ UInt64(ts.tv_nsec)
    }
}

/// Wall-clock seconds since the epoch (for token expiry and access logs).
public enum WallClock {
    @inline(__always)
    public static func nowSeconds() -> Double {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
    }
}
