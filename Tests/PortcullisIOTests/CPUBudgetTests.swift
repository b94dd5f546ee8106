import Foundation
import Testing
@testable import PortcullisIO

/// `workers: 0` counts the CPUs the process may really use: the cgroup quota (v2 along the
/// cgroup path, v1's CFS quota) and the affinity mask bound the CPUs online. Cgroup files are
/// read from a copy of `/proc` and `/sys` made here, as a container runtime lays them out.
struct CPUBudgetTests {
    static func root(_ files: [String: String]) throws -> String {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("cpu-\(UUID().uuidString)").path
        for (path, text) in files {
            let full = root + path
            try FileManager.default.createDirectory(atPath: (full as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
            try text.write(toFile: full, atomically: true, encoding: .utf8)
        }
        return root
    }

    @Test func cgroupV2QuotaIsTheTightestAlongThePath() throws {
        let root = try Self.root([
            "/proc/self/cgroup": "0::/kubepods/pod1/c1\n",
            "/sys/fs/cgroup/kubepods/pod1/cpu.max": "150000 100000\n",
            "/sys/fs/cgroup/kubepods/pod1/c1/cpu.max": "max 100000\n",
            "/sys/fs/cgroup/kubepods/cpu.max": "400000 100000\n",
        ])
        #expect(CPUBudget.cgroupQuota(root: root) == 1.5)
        // 1.5 CPUs of 8: two loops (rounded up, as automaxprocs); an affinity of one: one.
        #expect(CPUBudget.Reading(online: 8, affinity: nil, quota: 1.5).count == 2)
        #expect(CPUBudget.Reading(online: 8, affinity: 1, quota: 1.5).count == 1)
    }

    @Test func cgroupV1CFSQuota() throws {
        let root = try Self.root([
            "/proc/self/cgroup": "4:memory:/docker/abc\n3:cpu,cpuacct:/docker/abc\n0::/\n",
            "/sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_quota_us": "50000\n",
            "/sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_period_us": "100000\n",
        ])
        #expect(CPUBudget.cgroupQuota(root: root) == 0.5)
        #expect(CPUBudget.Reading(online: 4, affinity: 4, quota: 0.5).count == 1)
    }

    @Test func noQuotaLeavesTheCPUsOnlineAndTheAffinity() throws {
        let root = try Self.root([
            "/proc/self/cgroup": "3:cpu,cpuacct:/\n0::/\n",
            "/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us": "-1\n",
            "/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us": "100000\n",
            "/sys/fs/cgroup/cpu.max": "max 100000\n",
        ])
        #expect(CPUBudget.cgroupQuota(root: root) == nil)
        #expect(CPUBudget.Reading(online: 4, affinity: 3, quota: nil).count == 3)
        #expect(CPUBudget.Reading(online: 4, affinity: nil, quota: nil).count == 4)
        // This process: at least one, at most the CPUs online.
        let mine = CPUBudget.read()
        #expect(mine.count >= 1 && mine.count <= mine.online, "\(mine)")
    }
}
