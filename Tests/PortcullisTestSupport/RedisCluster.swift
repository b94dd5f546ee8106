import Foundation

/// A real local Redis Cluster for the tests that need one: `masters` primaries with
/// `replicas` replicas each (3 and 1: six `redis-server --cluster-enabled yes` on free
/// 127.0.0.1 ports, bus ports chosen free too), joined with `redis-cli --cluster create`
/// and waited for until every node says `cluster_state:ok` (bounded).
public final class RedisCluster: @unchecked Sendable {
    // @unchecked Sendable: used from one test at a time (suites are serialized).
    public let nodes: [RedisProcess]

    public init(masters: Int = 3, replicas: Int = 1, nodeTimeoutMilliseconds: Int = 2000) throws {
        var nodes: [RedisProcess] = []
        for _ in 0..<(masters * (1 + replicas)) {
            nodes.append(try RedisProcess(extra: ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                                                  "--cluster-port", "\(Loopback.freePort())",
                                                  "--cluster-node-timeout", "\(nodeTimeoutMilliseconds)",
                                                  // A replica syncs at once (Redis waits 5 s by default for
                                                  // more replicas to share a diskless transfer).
                                                  "--repl-diskless-sync-delay", "0"]))
        }
        self.nodes = nodes
        let created = RedisProcess.capture(["/usr/bin/redis-cli", "--cluster", "create"]
                                           + nodes.map { "127.0.0.1:\($0.port)" }
                                           + ["--cluster-replicas", "\(replicas)", "--cluster-yes"], timeout: 60)
        guard created.contains("All 16384 slots covered") else { throw RedisTestFailure("cluster create: \(created)") }
        guard waitUntil(30, { nodes.allSatisfy { $0.cli(["CLUSTER", "INFO"]).contains("cluster_state:ok") } }) else {
            throw RedisTestFailure("the cluster did not become ok: \(nodes.map { $0.cli(["CLUSTER", "INFO"]) })")
        }
        // A write on every master (30 keys cover the three slot ranges), so each replica's
        // offset moves past 0: `CLUSTER SLOTS` lists only replicas that have replicated data.
        for i in 0..<30 { _ = nodes[0].cli(["-c", "SET", "portcullis-cluster-seed-\(i)", "1"]) }
        // Replicas attached and in sync (a `WAIT 1` before then waits its whole timeout), and
        // every node's view listing them.
        guard waitUntil(30, {
            let masterNodes = nodes.filter { $0.cli(["ROLE"]).hasPrefix("master") }
            return masterNodes.count == masters
                && nodes.allSatisfy { node in
                    let replication = node.cli(["INFO", "replication"])
                    return replication.contains("role:master") ? replication.contains("connected_slaves:\(replicas)")
                                                               : replication.contains("master_link_status:up")
                }
                && nodes.allSatisfy { node in
                    let listed = Set(node.cli(["CLUSTER", "SLOTS"]).split(separator: "\n").map(String.init))
                    return nodes.allSatisfy { listed.contains("\($0.port)") }
                }
        }) else {
            throw RedisTestFailure("the replicas did not attach: \(nodes.map { $0.cli(["INFO", "replication"]) })")
        }
    }

    /// The ports of the nodes that are masters now.
    public var masterPorts: [UInt16] {
        nodes.filter { $0.pid > 0 && $0.cli(["ROLE"]).hasPrefix("master") }.map(\.port)
    }

    /// Gives `slot` to `owner` on every master (`CLUSTER SETSLOT … NODE`), the new owner
    /// first and with a config epoch of its own above all others (`CLUSTER BUMPEPOCH`): a
    /// replica of the old owner that has not heard of the move yet advertises its master's
    /// older claim, and without the higher epoch a master that hears it first hands the
    /// slot back (seen under load as a move that never settled). True when every node said OK.
    @discardableResult
    public func moveSlot(_ slot: Int, to owner: RedisProcess) -> Bool {
        let ownerID = owner.cli(["CLUSTER", "MYID"])
        var ok = owner.cli(["CLUSTER", "SETSLOT", "\(slot)", "NODE", ownerID]) == "OK"
        let bumped = owner.cli(["CLUSTER", "BUMPEPOCH"])  // STILL: its epoch is already the one highest
        ok = (bumped.hasPrefix("BUMPED") || bumped.hasPrefix("STILL")) && ok
        for node in nodes where node.port != owner.port && node.pid > 0 && node.cli(["ROLE"]).hasPrefix("master") {
            ok = node.cli(["CLUSTER", "SETSLOT", "\(slot)", "NODE", ownerID]) == "OK" && ok
        }
        return ok
    }

    /// The live master that serves `key`'s slot (the others answer `MOVED`); a channel name
    /// works too (a sharded channel lives in the slot of its name).
    public func master(ofKey key: String) -> RedisProcess? {
        nodes.first { node in
            guard node.pid > 0, node.cli(["ROLE"]).hasPrefix("master") else { return false }
            let answer = node.cli(["GET", key])
            return !answer.contains("MOVED") && !answer.contains("CLUSTERDOWN") && !answer.contains("ERR")
        }
    }

    /// `CLUSTER KEYSLOT key`, as the server computes it.
    public func keySlot(_ key: String) -> Int? { Int(nodes[0].cli(["CLUSTER", "KEYSLOT", key])) }
}

/// The Redis that gateway instances of a test share: one `redis-server` ("redis") or a real
/// 6-node cluster ("cluster"), with the `store:` line that reaches it, so one test body
/// runs on both.
public final class SharedRedis: @unchecked Sendable {
    // @unchecked Sendable: used from one test at a time.
    public let server: RedisProcess?
    public let cluster: RedisCluster?

    /// - Parameter kind: "redis" or "cluster".
    public init(_ kind: String) throws {
        switch kind {
        case "redis": server = try RedisProcess(); cluster = nil
        case "cluster": server = nil; cluster = try RedisCluster()
        default: throw RedisTestFailure("unknown shared Redis kind \(kind)")
        }
    }

    /// `store: {…}` for the gateway's file (two seed nodes of a cluster: the slot map names the rest).
    public var storeYAML: String {
        if let server { return "store: {redis: \"redis://127.0.0.1:\(server.port)/0\"}" }
        let seeds = cluster!.nodes.prefix(2).map { "\"127.0.0.1:\($0.port)\"" }.joined(separator: ", ")
        return "store: {cluster: {nodes: [\(seeds)]}}"
    }

    /// `redis-cli` against the server, or against the cluster following redirects (`-c`).
    @discardableResult
    public func cli(_ args: [String]) -> String {
        if let server { return server.cli(args) }
        return cluster!.nodes[0].cli(["-c"] + args)
    }

    /// Every key matching `pattern`, on every master.
    public func keys(_ pattern: String) -> [String] {
        if let server { return server.cli(["--scan", "--pattern", pattern]).split(separator: "\n").map(String.init) }
        return cluster!.nodes.filter { $0.pid > 0 && $0.cli(["ROLE"]).hasPrefix("master") }.flatMap {
            $0.cli(["--scan", "--pattern", pattern]).split(separator: "\n").map(String.init)
        }
    }
}
