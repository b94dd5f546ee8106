import CPortcullisSystem
import Foundation

/// How many CPUs the process may really use, for `workers: 0` (one loop per CPU): the
/// smallest of the CPUs online, the process's affinity mask (`taskset`, a cpuset, Kubernetes'
/// static CPU manager) and its cgroup CPU quota, rounded up (a container limited to 1.5 CPUs
/// gets 2 loops, as Go's automaxprocs and the JVM do; cgroup v2 `cpu.max` along the process's
/// cgroup path, or v1 `cpu.cfs_quota_us` / `cpu.cfs_period_us`). Read once, at start.
public enum CPUBudget {
    public struct Reading: Sendable, Equatable, CustomStringConvertible {
        public var online: Int
        public var affinity: Int?
        /// The quota in CPUs (e.g. 1.5), nil when none is set.
        public var quota: Double?
        public var count: Int {
            var count = max(1, online)
            if let affinity, affinity > 0 { count = min(count, affinity) }
            if let quota, quota > 0 { count = min(count, max(1, Int(quota.rounded(.up)))) }
            return count
        }
        public var description: String {
            "\(count) (online \(online), affinity \(affinity.map(String.init) ?? "-"), cgroup quota \(quota.map { String($0) } ?? "none"))"
        }
    }

    /// This process's budget. `root`: where `/proc` and `/sys` are (tests point it at a copy).
    public static func read(root: String = "") -> Reading {
        let affinity = root.isEmpty ? Int(portcullis_affinity_cpu_count()) : nil
        return Reading(online: ProcessInfo.processInfo.activeProcessorCount, affinity: affinity == 0 ? nil : affinity,
                       quota: cgroupQuota(root: root))
    }

    /// The tightest CPU quota on the process's cgroup path, in CPUs.
    public static func cgroupQuota(root: String) -> Double? {
        guard let membership = try? String(contentsOfFile: root + "/proc/self/cgroup", encoding: .utf8) else { return nil }
        var quotas: [Double] = []
        for line in membership.split(separator: "\n") {
            let parts = line.split(separator: ":", maxSplits: 2, omittingEmptySubsequences: false)
            guard parts.count == 3 else { continue }
            let path = String(parts[2])
            if parts[0] == "0" && parts[1].isEmpty {
                // cgroup v2: cpu.max ("max 100000" or "150000 100000") at each level up to the root.
                var directory = path
                while true {
                    let file = root + "/sys/fs/cgroup" + (directory == "/" ? "" : directory) + "/cpu.max"
                    if let text = try? String(contentsOfFile: file, encoding: .utf8) {
                        let fields = text.split(whereSeparator: { $0 == " " || $0 == "\n" })
                        if fields.count == 2, let limit = Double(fields[0]), let period = Double(fields[1]), period > 0 {
                            quotas.append(limit / period)
                        }
                    }
                    guard directory != "/", !directory.isEmpty else { break }
                    directory = (directory as NSString).deletingLastPathComponent
                }
            } else if parts[1].split(separator: ",").contains("cpu") {
                // cgroup v1: the cpu controller's CFS quota (-1: none).
                for base in ["/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct"] {
                    for directory in [path, "/"] {
                        let prefix = root + base + (directory == "/" ? "" : directory)
                        guard let q = try? String(contentsOfFile: prefix + "/cpu.cfs_quota_us", encoding: .utf8),
                              let p = try? String(contentsOfFile: prefix + "/cpu.cfs_period_us", encoding: .utf8),
                              let quota = Double(q.trimmingCharacters(in: .whitespacesAndNewlines)),
                              let period = Double(p.trimmingCharacters(in: .whitespacesAndNewlines)), quota > 0, period > 0 else { continue }
                        quotas.append(quota / period)
                    }
                }
            }
        }
        return quotas.min()
    }
}
