#if canImport(Glibc)
import Glibc
#endif
import Foundation
import PortcullisCore

/// Series `/metrics` writes itself in the Prometheus text format, after the registry's:
/// histograms made from bucket counts kept elsewhere (the loops' request durations, Redis
/// round trips: nothing recorded through a registry lock on the request path), certificate
/// expiry, and the standard `process_*` metrics Prometheus' client libraries export (read from
/// the kernel at scrape time).
public enum PrometheusText {
    /// When this process started (seconds since the epoch), as the Prometheus client libraries
    /// read it: the kernel's boot time (`btime` in /proc/stat) plus the process's start in
    /// clock ticks after boot (field 22 of /proc/self/stat). The first call's clock if the
    /// kernel says nothing (not Linux).
    public static let processStart: Double = {
        let stat = (try? String(contentsOfFile: "/proc/self/stat", encoding: .utf8)) ?? ""
        let boot = ((try? String(contentsOfFile: "/proc/stat", encoding: .utf8)) ?? "").split(separator: "\n")
            .first { $0.hasPrefix("btime ") }.flatMap { Double($0.dropFirst(6).trimmingCharacters(in: .whitespaces)) }
        // The command name (field 2) may hold spaces and parentheses: count from the last ')'.
        guard let close = stat.lastIndex(of: ")"), let boot else { return WallClock.nowSeconds() }
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        // fields[0] is field 3 (state): field 22 (starttime) is fields[19].
        guard fields.count > 19, let ticks = Double(fields[19]) else { return WallClock.nowSeconds() }
        return boot + ticks / Double(sysconf(Int32(_SC_CLK_TCK)))
    }()

    /// `portcullis_request_duration_seconds{route, code_class}`: from the request's head to its
    /// answer's end as the gateway saw it; `bounds`: the buckets' upper bounds.
    public static func durations(_ rows: [(route: String?, statusClass: String, buckets: [Int], sum: Double)],
                                 bounds: [Double]) -> String {
        histogram("portcullis_request_duration_seconds",
                  help: "Requests answered by the gateway listeners, from the request head to the end of the answer, "
                      + "by route (\"unmatched\" when none matched) and status class (2xx, 4xx…).",
                  bounds: bounds,
                  rows: rows.sorted { ($0.route ?? "", $0.statusClass) < ($1.route ?? "", $1.statusClass) }.map {
                      ("route=\"\(escape($0.route ?? "unmatched"))\",code_class=\"\($0.statusClass)\"", $0.buckets, $0.sum)
                  })
    }

    /// `portcullis_redis_command_duration_seconds`: every Redis command's round trip (nothing
    /// when no command was sent: no Redis store).
    public static func redisCommands(_ timings: (buckets: [Int], sum: Double), bounds: [Double]) -> String {
        guard timings.buckets.contains(where: { $0 != 0 }) else { return "" }
        return histogram("portcullis_redis_command_duration_seconds",
                         help: "Redis commands the gateway sent (revocations, sessions, key sharing, sync), "
                             + "from queueing on the connection to the reply.",
                         bounds: bounds, rows: [("", timings.buckets, timings.sum)])
    }

    /// A Prometheus histogram from per-bucket counts (not cumulative; the last is `+Inf`).
    public static func histogram(_ name: String, help: String, bounds: [Double],
                          rows: [(labels: String, buckets: [Int], sum: Double)]) -> String {
        guard !rows.isEmpty else { return "" }
        var out = "# HELP \(name) \(help)\n# TYPE \(name) histogram\n"
        let bounds = bounds.map { format($0) } + ["+Inf"]
        for row in rows {
            let prefix = row.labels.isEmpty ? "" : row.labels + ","
            let labels = row.labels.isEmpty ? "" : "{\(row.labels)}"
            var cumulative = 0
            for (index, count) in row.buckets.enumerated() where index < bounds.count {
                cumulative += count
                out += "\(name)_bucket{\(prefix)le=\"\(bounds[index])\"} \(cumulative)\n"
            }
            out += "\(name)_sum\(labels) \(row.sum)\n"
            out += "\(name)_count\(labels) \(cumulative)\n"
        }
        return out
    }

    /// `process_cpu_seconds_total`, `process_resident_memory_bytes`, `process_virtual_memory_bytes`,
    /// `process_open_fds`, `process_max_fds`, `process_start_time_seconds`, as the Prometheus
    /// client libraries name them.
    public static func process() -> String {
        var usage = rusage()
        getrusage(RUSAGE_SELF.rawValue, &usage)
        let cpu = Double(usage.ru_utime.tv_sec) + Double(usage.ru_utime.tv_usec) / 1e6
            + Double(usage.ru_stime.tv_sec) + Double(usage.ru_stime.tv_usec) / 1e6
        let page = Double(sysconf(Int32(_SC_PAGESIZE)))
        let statm = ((try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8)) ?? "").split(separator: " ")
        let virtual = statm.count > 1 ? (Double(statm[0]) ?? 0) * page : 0
        let resident = statm.count > 1 ? (Double(statm[1]) ?? 0) * page : 0
        let fds = ((try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []).count
        var limit = rlimit()
        getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
        return """
        # HELP process_cpu_seconds_total Total user and system CPU time spent in seconds.
        # TYPE process_cpu_seconds_total counter
        process_cpu_seconds_total \(cpu)
        # HELP process_resident_memory_bytes Resident memory size in bytes.
        # TYPE process_resident_memory_bytes gauge
        process_resident_memory_bytes \(Int(resident))
        # HELP process_virtual_memory_bytes Virtual memory size in bytes.
        # TYPE process_virtual_memory_bytes gauge
        process_virtual_memory_bytes \(Int(virtual))
        # HELP process_open_fds Number of open file descriptors.
        # TYPE process_open_fds gauge
        process_open_fds \(fds)
        # HELP process_max_fds Maximum number of open file descriptors.
        # TYPE process_max_fds gauge
        process_max_fds \(limit.rlim_cur == rlim_t.max ? Int64(-1) : Int64(limit.rlim_cur))
        # HELP process_start_time_seconds Start time of the process since unix epoch in seconds.
        # TYPE process_start_time_seconds gauge
        process_start_time_seconds \(processStart)

        """
    }

    /// `portcullis_certificate_expiry_timestamp_seconds{listener, certificate}`: when each served
    /// certificate expires (alert on `… - time() < 14 * 86400`).
    public static func certificates(_ served: [(listener: String, file: String, notAfter: Double)]) -> String {
        guard !served.isEmpty else { return "" }
        var out = "# HELP portcullis_certificate_expiry_timestamp_seconds When each certificate a TLS listener serves expires "
            + "(seconds since the epoch), by listener address and certificate file.\n"
            + "# TYPE portcullis_certificate_expiry_timestamp_seconds gauge\n"
        for entry in served {
            out += "portcullis_certificate_expiry_timestamp_seconds{listener=\"\(escape(entry.listener))\",certificate=\"\(escape(entry.file))\"} \(Int(entry.notAfter))\n"
        }
        return out
    }

    static func format(_ bound: Double) -> String {
        bound == bound.rounded() ? String(Int(bound)) : String(bound)
    }

    static func escape(_ text: String) -> String {
        text.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"")
            .replacingOccurrences(of: "\n", with: "\\n")
    }
}
