import PortcullisIO

/// Which node serves each slot of a Redis Cluster, read from `CLUSTER SLOTS` (Redis 3 to 7:
/// each entry is `[first slot, last slot, [host, port, id, …] of the master, then one per
/// replica]`).
public struct ClusterTopology: Sendable, Equatable {
    /// A node as the cluster announces it.
    public struct Node: Sendable, Hashable, CustomStringConvertible {
        /// Nil when the node announced no endpoint (`?` or empty): the host of the node that
        /// answered.
        public let host: String?
        public let port: UInt16
        public let id: String?
        public init(host: String?, port: UInt16, id: String?) {
            self.host = host
            self.port = port
            self.id = id
        }
        public var description: String { "\(host ?? "?"):\(port)" }

        /// Where to connect: the announced host, which must be an IP address, else
        /// `fallbackHost` (the host of the node that announced it); nil when neither parses.
        public func address(fallbackHost: String? = nil) -> SocketAddress? {
            guard let host = host ?? fallbackHost else { return nil }
            return try? SocketAddress(parsing: host.utf8.contains(UInt8(ascii: ":")) ? "[\(host)]:\(port)" : "\(host):\(port)")
        }
    }

    /// One range of slots, its master and its replicas.
    public struct Shard: Sendable, Equatable {
        public let slots: ClosedRange<Int>
        public let master: Node
        public let replicas: [Node]
    }

    public let shards: [Shard]
    /// The distinct masters, in the order first seen.
    public let masters: [Node]
    /// For each slot, the index of its master in `masters` (-1: no node serves it).
    private let owner: [Int16]

    /// Parses a `CLUSTER SLOTS` reply; nil when it is not one.
    public init?(clusterSlots reply: RedisReply) {
        guard let entries = reply.array else { return nil }
        var shards: [Shard] = []
        var masters: [Node] = []
        var owner = [Int16](repeating: -1, count: HashSlot.count)
        for entry in entries {
            guard let fields = entry.array, fields.count >= 3, let first = fields[0].integer, let last = fields[1].integer,
                  first >= 0, last >= first, last < HashSlot.count,
                  let master = Self.node(fields[2]) else { return nil }
            var replicas: [Node] = []
            for field in fields.dropFirst(3) {
                guard let replica = Self.node(field) else { return nil }
                replicas.append(replica)
            }
            let index: Int
            if let known = masters.firstIndex(of: master) { index = known } else { masters.append(master); index = masters.count - 1 }
            for slot in Int(first)...Int(last) { owner[slot] = Int16(index) }
            shards.append(Shard(slots: Int(first)...Int(last), master: master, replicas: replicas))
        }
        self.shards = shards
        self.masters = masters
        self.owner = owner
    }

    private static func node(_ reply: RedisReply) -> Node? {
        guard let fields = reply.array, fields.count >= 2, let port = fields[1].integer, port > 0, port <= 65_535 else { return nil }
        let host = fields[0].string
        return Node(host: host == nil || host == "" || host == "?" ? nil : host, port: UInt16(port),
                    id: fields.count > 2 ? fields[2].string : nil)
    }

    /// The master serving `slot` (nil: none does; the cluster is not whole).
    public func master(forSlot slot: Int) -> Node? {
        masterIndex(forSlot: slot).map { masters[$0] }
    }

    /// The index in `masters` of the master serving `slot` (nil: none does).
    public func masterIndex(forSlot slot: Int) -> Int? {
        guard slot >= 0, slot < HashSlot.count else { return nil }
        let index = owner[slot]
        return index < 0 ? nil : Int(index)
    }

    /// Whether every slot has a master.
    public var coversEverySlot: Bool { !owner.contains(-1) }
}
