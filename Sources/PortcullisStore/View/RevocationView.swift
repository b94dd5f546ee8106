import PortcullisCore
import Synchronization

/// One event loop's window on the process's revocation table (`ViewReplicas`: one table
/// every loop reads, entries added in place), plus how long it may be trusted. The hot
/// path (`check`) reads plain stored properties and one atomic flag: no lock, no
/// allocation.
///
/// Threading: created by a store for loop `loopIndex`; `table` (which storage this loop
/// reads), `policy` and `staleAfter` are read and replaced on that loop's queue. The store
/// does not dispatch a block per change (one thread woken per loop per change: on the
/// 2-core VM most of a change's CPU, and a hop between its announcement and its
/// enforcement): it posts the change (`post`, any thread) and the loop applies what was
/// posted when it next reads the view (`catchUp`, first thing in every accessor). A loop
/// that reads nothing for a while is sent one block once `wakeAfter` changes wait, so the
/// posted changes stay bounded. (New entries need no post at all: they are written into
/// the storage this loop reads.)
public final class RevocationView: @unchecked Sendable {
    // @unchecked Sendable: the replica is confined to its loop's queue (see type comment);
    // `pending` and `inbox` are the only members touched from other threads, and they
    // are an atomic and a pthread mutex (`LockedValue`: ThreadSanitizer sees its
    // happens-before, which it does not see through `Synchronization.Mutex`'s futex).

    public let loopIndex: Int
    /// Replaced by a reload that changes `revocation:` (on the loop's queue, as every update).
    @exclusivity(unchecked) var policy: RevocationPolicy
    // @exclusivity(unchecked): only ever touched on the loop's queue (see type
    // comment), so the runtime access tracking (swift_beginAccess, about 70
    // instructions per check) buys nothing here.
    /// The process's table as this loop last took it (shares its storage with every view).
    @exclusivity(unchecked) var table: RevocationTable
    /// Epoch seconds after which the view is stale; `.infinity` while synchronized.
    @exclusivity(unchecked) var staleAfter: Double

    typealias Change = @Sendable (RevocationView) -> Void

    /// Set (under `inbox`'s lock) when a change waits; read without the lock on every check.
    private let pending = Atomic<Bool>(false)
    private let inbox = LockedValue(Inbox())

    struct Inbox {
        var changes: [Change] = []
        var wakeScheduled = false
    }

    /// Changes waiting before a loop that reads nothing is sent a block to apply them.
    static let wakeAfter = 64

    init(loopIndex: Int, policy: RevocationPolicy, staleAfter: Double, table: RevocationTable) {
        self.loopIndex = loopIndex
        self.policy = policy
        self.staleAfter = staleAfter
        self.table = table
    }

    /// Whether a posted change waits for this loop's next read (tests).
    var hasPostedChanges: Bool { pending.load(ordering: .acquiring) }

    /// Posts a change for the loop to apply (any thread). True when the caller must send
    /// the loop a block that calls `catchUp` (enough changes wait and none was sent yet).
    func post(_ change: @escaping Change) -> Bool {
        inbox.withLock { inbox in
            inbox.changes.append(change)
            pending.store(true, ordering: .releasing)
            guard inbox.changes.count >= Self.wakeAfter, !inbox.wakeScheduled else { return false }
            inbox.wakeScheduled = true
            return true
        }
    }

    /// Applies every posted change, in the order posted. On the loop's queue.
    @inline(__always)
    func catchUp() {
        if pending.load(ordering: .acquiring) { applyPosted() }
    }

    @inline(never)
    private func applyPosted() {
        let changes = inbox.withLock { inbox in
            pending.store(false, ordering: .relaxed)
            inbox.wakeScheduled = false
            defer { inbox.changes = [] }
            return inbox.changes
        }
        for change in changes { change(self) }
    }

    /// Hot path: no allocation, no lock; about 30–60 ns with 10,000 entries on the
    /// 2-core VM (StoreBenchmarks; ~440 instructions, see `RevocationTable`).
    /// `subject` is an opaque string (the gateway passes the user id it injects,
    /// e.g. "google:1175…"); identifiers are compared as UTF-8 bytes.
    ///
    /// Known revocations win; otherwise a view past its staleness answers by policy:
    /// `.unavailable` (deny, the default) or `.allowed`.
    @inline(__always)
    public func check(tokenID: String?, sessionID: String?, subject: String, issuedAt: Int64?, now: Int64) -> RevocationVerdict {
        catchUp()
        if table.isRevoked(tokenID: tokenID, sessionID: sessionID, subject: subject, issuedAt: issuedAt, now: now) {
            return .revoked
        }
        if Double(now) >= staleAfter {
            return policy.denyWhenUnavailable ? .unavailable : .allowed
        }
        return .allowed
    }

    /// Whether a subject ("sign out everywhere") entry is held. On the loop's queue.
    public var hasSubjectRevocations: Bool { catchUp(); return table.hasSubjects }

    /// Number of entries held (including expired ones not yet pruned). On the loop's queue.
    public var entryCount: Int { catchUp(); return table.count }
}
