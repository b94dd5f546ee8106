import PortcullisIO

/// The views of all loops, and the one way to change them: a closure each view's loop
/// applies on its own queue (posted, see `RevocationView`).
final class ViewReplicas: Sendable {
    let loops: [EventLoop]
    let views: [RevocationView]

    init(loops: [EventLoop], policy: RevocationPolicy, staleAfter: Double) {
        precondition(!loops.isEmpty, "a store needs the gateway's event loops")
        self.loops = loops
        self.views = loops.map { RevocationView(loopIndex: $0.index, policy: policy, staleAfter: staleAfter) }
    }

    func view(loopIndex: Int) -> RevocationView {
        if loopIndex < views.count, views[loopIndex].loopIndex == loopIndex { return views[loopIndex] }
        guard let v = views.first(where: { $0.loopIndex == loopIndex }) else {
            preconditionFailure("no revocation view for loop \(loopIndex)")
        }
        return v
    }

    /// Runs `update` on every view, each on its own loop's queue: when the loop next reads
    /// its view (see `RevocationView.post`), not in a block of its own.
    func update(_ update: @escaping @Sendable (RevocationView) -> Void) {
        for (loop, view) in zip(loops, views) where view.post(update) {
            loop.execute { view.catchUp() }
        }
    }

    func apply(_ revocation: Revocation, maxCredentialLifetime: Int64) {
        update { $0.table.apply(revocation, maxCredentialLifetime: maxCredentialLifetime) }
    }

    func remove(_ target: RevocationTarget) {
        update { $0.table.remove(target) }
    }

    func install(_ table: RevocationTable, staleAfter: Double) {
        update { view in
            view.table = table
            view.staleAfter = staleAfter
        }
    }

    func setPolicy(_ policy: RevocationPolicy) {
        update { $0.policy = policy }
    }

    func setStaleAfter(_ staleAfter: Double) {
        update { $0.staleAfter = staleAfter }
    }

    func prune(now: Int64) {
        update { $0.table.prune(now: now) }
    }
}
