import PortcullisCore
import PortcullisIO

/// The views of all loops, the one revocation table they all read, and the one way to
/// change either.
///
/// One table per process, not one per loop: every view reads the storage of `shared`
/// without a lock (see `RevocationTable.Storage`). A revocation is added to that storage in
/// place, under `shared`'s lock, which only writers take; the loops see it at their next
/// lookup, with no block and no post. What needs a new storage (growth, an undo, pruning, a
/// resync's snapshot) is made under the lock and handed to the views by a post
/// (`RevocationView.post`): each loop takes the table current when it applies the post, so
/// posts carry no table, and the old storage is freed when the last loop let go of it.
/// Policy and staleness are per view, changed by posts too.
final class ViewReplicas: Sendable {
    let loops: [EventLoop]
    let views: [RevocationView]
    private let shared: LockedValue<RevocationTable>

    init(loops: [EventLoop], policy: RevocationPolicy, staleAfter: Double) {
        precondition(!loops.isEmpty, "a store needs the gateway's event loops")
        self.loops = loops
        let table = RevocationTable()
        shared = LockedValue(table)
        self.views = loops.map { RevocationView(loopIndex: $0.index, policy: policy, staleAfter: staleAfter, table: table) }
    }

    func view(loopIndex: Int) -> RevocationView {
        if loopIndex < views.count, views[loopIndex].loopIndex == loopIndex { return views[loopIndex] }
        guard let v = views.first(where: { $0.loopIndex == loopIndex }) else {
            preconditionFailure("no revocation view for loop \(loopIndex)")
        }
        return v
    }

    /// The table the views read (tests; a view may still hold the one before a replacement
    /// it has not applied yet).
    var table: RevocationTable { shared.withLock { $0 } }

    /// Runs `update` on every view, each on its own loop's queue: when the loop next reads
    /// its view (see `RevocationView.post`), not in a block of its own.
    func update(_ update: @escaping @Sendable (RevocationView) -> Void) {
        for (loop, view) in zip(loops, views) where view.post(update) {
            loop.execute { view.catchUp() }
        }
    }

    /// Changes the shared table under its lock; a change that replaced its storage is handed
    /// to the views (posted inside the lock, so replacements reach each view in order).
    private func change(_ body: (inout RevocationTable) -> Bool) {
        shared.withLock { table in
            guard body(&table) else { return }
            update { [shared] view in view.table = shared.withLock { $0 } }
        }
    }

    func apply(_ revocation: Revocation, maxCredentialLifetime: Int64) {
        change { $0.applyInPlace(revocation, maxCredentialLifetime: maxCredentialLifetime) }
    }

    /// False when no entry named `target`.
    @discardableResult
    func remove(_ target: RevocationTarget) -> Bool {
        var found = false
        change { table in
            found = table.remove(target)
            return found
        }
        return found
    }

    func prune(now: Int64) {
        change { table in
            let before = table
            table.prune(now: now)
            return !table.sharesStorage(with: before)
        }
    }

    /// Replaces every entry with `table`'s (copied: the views' storage changes in place,
    /// and `table` stays the caller's), and the staleness with `staleAfter`, both at once
    /// for each view.
    func install(_ table: RevocationTable, staleAfter: Double) {
        shared.withLock { current in
            current = table.detached()
            update { [shared] view in
                view.table = shared.withLock { $0 }
                view.staleAfter = staleAfter
            }
        }
    }

    func setPolicy(_ policy: RevocationPolicy) {
        update { $0.policy = policy }
    }

    func setStaleAfter(_ staleAfter: Double) {
        update { $0.staleAfter = staleAfter }
    }
}
