/// The longest duration configuration accepts: 100 years. Every duration becomes monotonic
/// nanoseconds in a `UInt64` somewhere (deadlines), which holds about 584 years; a bound
/// here keeps every such conversion in range (an unbounded one trapped).
public let maxDurationSeconds: Double = 100 * 365 * 86_400

/// Parses the durations used in configuration: "250ms", "30s", "5m", "1h", "30d", or a bare
/// number of seconds, up to `maxDurationSeconds`. Returns nil on anything else.
public func parseDurationSeconds(_ text: String) -> Double? {
    let t = text.trimmingPrefixAndSuffixSpaces()
    let units: [(String, Double)] = [("ms", 0.001), ("s", 1), ("m", 60), ("h", 3600), ("d", 86_400)]
    var seconds: Double?
    for (suffix, factor) in units where t.hasSuffix(suffix) {
        let number = t.dropLast(suffix.count)
        // "ms" must not be read as "m" of "…s": the ms entry is checked first.
        guard let v = Double(number), v >= 0, v.isFinite else { return nil }
        seconds = v * factor
        break
    }
    if seconds == nil, let v = Double(t), v >= 0, v.isFinite { seconds = v }
    guard let seconds, seconds <= maxDurationSeconds else { return nil }
    return seconds
}

/// Parses sizes: "512", "64KiB", "10MiB", "1GiB" (also KB/MB/GB as powers of 1024, k/m/g).
public func parseByteSize(_ text: String) -> Int? {
    let t = text.trimmingPrefixAndSuffixSpaces()
    let units: [(String, Int)] = [("KiB", 1 << 10), ("MiB", 1 << 20), ("GiB", 1 << 30),
                                  ("KB", 1 << 10), ("MB", 1 << 20), ("GB", 1 << 30),
                                  ("k", 1 << 10), ("m", 1 << 20), ("g", 1 << 30), ("B", 1)]
    for (suffix, factor) in units where t.hasSuffix(suffix) {
        guard let v = Int(t.dropLast(suffix.count)), v >= 0 else { return nil }
        let (r, overflow) = v.multipliedReportingOverflow(by: factor)
        return overflow ? nil : r
    }
    if let v = Int(t), v >= 0 { return v }
    return nil
}

extension String {
    func trimmingPrefixAndSuffixSpaces() -> String {
        var s = Substring(self)
        while s.first == " " { s = s.dropFirst() }
        while s.last == " " { s = s.dropLast() }
        return String(s)
    }
}
