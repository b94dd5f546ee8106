import Atomics
import PortcullisCore
import PortcullisIO

/// The slot map the cluster clients of one process share, one board per seed list: every
/// loop's client (and each store's: revocations, sessions, rate limits, the key cache) has
/// its own connections and its own copy of the map, but a map one of them read — after a
/// `MOVED`, a failover, at start — is posted here, and every other client takes it before
/// its next command instead of meeting the same `MOVED` itself. Posting bumps
/// `generation`, which a client compares with the one it last took: one atomic load per
/// command, the lock only when something changed.
///
/// Threading: any thread. The registry holds boards weakly: a board lives as long as a
/// client holds it.
final class ClusterMapBoard: Sendable {
    private let posted = ManagedAtomic<Int>(0)
    private let latest = LockedValue<(generation: Int, map: ClusterTopology?)>((0, nil))

    init() {}

    /// Bumped by every `post`.
    var generation: Int { posted.load(ordering: .acquiring) }

    /// Posts a map just read; returns its generation.
    func post(_ map: ClusterTopology) -> Int {
        latest.withLock { latest in
            latest.generation += 1
            latest.map = map
            posted.store(latest.generation, ordering: .releasing)
            return latest.generation
        }
    }

    /// The last map posted, and its generation.
    func current() -> (generation: Int, map: ClusterTopology?) { latest.withLock { $0 } }

    private final class Weak: @unchecked Sendable {
        // @unchecked Sendable: only touched under `registry`'s lock.
        weak var board: ClusterMapBoard?
        init(_ board: ClusterMapBoard) { self.board = board }
    }

    private static let registry = LockedValue<[String: Weak]>([:])

    /// The board of the cluster these seeds name (the same list in any order, one board).
    static func shared(seeds: [SocketAddress]) -> ClusterMapBoard {
        let name = seeds.map(\.description).sorted().joined(separator: ",")
        return registry.withLock { boards in
            if let board = boards[name]?.board { return board }
            boards = boards.filter { $0.value.board != nil }
            let board = ClusterMapBoard()
            boards[name] = Weak(board)
            return board
        }
    }
}
