import Foundation
import Testing
@testable import PortcullisMetrics

/// The text `/metrics` writes itself: cumulative histogram buckets from per-bucket counts,
/// escaped label values, and `process_*` read from the kernel.
struct PrometheusTextTests {
    @Test func histogramBucketsAreCumulativeWithSumAndCount() {
        let text = PrometheusText.histogram("x_seconds", help: "Help.", bounds: [0.001, 0.5, 2],
                                            rows: [("route=\"/a\"", [1, 0, 2, 3], 7.25), ("", [0, 1, 0, 0], 0.2)])
        let lines = text.split(separator: "\n").map(String.init)
        #expect(lines.prefix(2) == ["# HELP x_seconds Help.", "# TYPE x_seconds histogram"])
        #expect(lines.contains("x_seconds_bucket{route=\"/a\",le=\"0.001\"} 1"))
        #expect(lines.contains("x_seconds_bucket{route=\"/a\",le=\"0.5\"} 1"))
        #expect(lines.contains("x_seconds_bucket{route=\"/a\",le=\"2\"} 3"))
        #expect(lines.contains("x_seconds_bucket{route=\"/a\",le=\"+Inf\"} 6"))
        #expect(lines.contains("x_seconds_sum{route=\"/a\"} 7.25") && lines.contains("x_seconds_count{route=\"/a\"} 6"))
        // No labels: no empty braces on _sum and _count.
        #expect(lines.contains("x_seconds_bucket{le=\"0.5\"} 1") && lines.contains("x_seconds_count 1") && lines.contains("x_seconds_sum 0.2"))
        #expect(PrometheusText.histogram("x", help: "", bounds: [1], rows: []).isEmpty)
        #expect(PrometheusText.redisCommands(([0, 0], 0), bounds: [1]).isEmpty, "no Redis command, no series")
    }

    @Test func labelValuesAreEscaped() {
        let text = PrometheusText.certificates([(listener: "0.0.0.0:443", file: "/etc/a \"b\"\\c\n.pem", notAfter: 1_900_000_000)])
        #expect(text.contains(#"certificate="/etc/a \"b\"\\c\n.pem"} 1900000000"#), "\(text)")
    }

    @Test func processMetricsComeFromTheKernel() {
        let series = PrometheusText.process().split(separator: "\n").filter { !$0.hasPrefix("#") }
        var values: [String: Double] = [:]
        for line in series {
            let parts = line.split(separator: " ")
            if parts.count == 2 { values[String(parts[0])] = Double(parts[1]) }
        }
        #expect((values["process_open_fds"] ?? 0) >= 3 && (values["process_max_fds"] ?? 0) > (values["process_open_fds"] ?? 0))
        #expect((values["process_resident_memory_bytes"] ?? 0) > 1_000_000)
        // The start time is the process's, not the first scrape's: this test process began
        // before this call, and not long ago.
        let start = values["process_start_time_seconds"] ?? 0
        let now = Date().timeIntervalSince1970
        #expect(start <= now && now - start < 3600, "\(start) vs \(now)")
    }
}
