import Dispatch
import PortcullisCore
import PortcullisIO

/// The default store: revocations live in this process only (no Redis needed on a
/// single node). Changes are made on a private serial queue, into the one table the
/// loops read (`ViewReplicas`), which is also the store's own: one table in the process.
/// Expired entries are pruned every `pruneInterval` seconds. Always healthy. With a
/// `RevocationJournal` (`store.state_dir`) revocations survive restarts.
public final class EmbeddedRevocationStore: RevocationStore, @unchecked Sendable {
    // @unchecked Sendable: `pruneTimer` and `journalFailing` are touched only on `queue`.
    private let policyValue: LockedValue<RevocationPolicy>
    public var policy: RevocationPolicy { policyValue.withLock { $0 } }
    private let replicas: ViewReplicas
    private let queue = DispatchQueue(label: "portcullis.revocations.embedded")
    private let pruneInterval: Double
    private var pruneTimer: DispatchSourceTimer?

    /// Persists revocations (`store.state_dir`); nil: in memory only.
    private let journal: RevocationJournal?
    /// Hears when journal writes start failing (the reason) and when they work again (nil).
    private let journalState: @Sendable (String?) -> Void
    private var journalFailing = false

    public init(loops: [EventLoop], policy: RevocationPolicy = RevocationPolicy(), pruneInterval: Double = 60) {
        policyValue = LockedValue(policy)
        self.pruneInterval = pruneInterval
        self.journal = nil
        self.journalState = { _ in }
        replicas = ViewReplicas(loops: loops, policy: policy, staleAfter: .infinity)
    }

    /// With a journal: the revocations it holds are enforced before the first request, and
    /// every new one is on disk before it is acknowledged. `warn` hears about a torn last line;
    /// `journalState`, once per change, that writes fail (why) or work again (nil).
    public init(loops: [EventLoop], policy: RevocationPolicy = RevocationPolicy(), pruneInterval: Double = 60,
                journal: RevocationJournal, warn: (String) -> Void,
                journalState: @escaping @Sendable (String?) -> Void = { _ in }) throws(RevocationJournal.Failure) {
        policyValue = LockedValue(policy)
        self.pruneInterval = pruneInterval
        self.journal = journal
        self.journalState = journalState
        replicas = ViewReplicas(loops: loops, policy: policy, staleAfter: .infinity)
        let live = try journal.load(now: Int64(WallClock.nowSeconds()), maxCredentialLifetime: policy.maxCredentialLifetime,
                                    warn: warn)
        try journal.rewrite(live)
        for revocation in live {
            replicas.apply(revocation, maxCredentialLifetime: policy.maxCredentialLifetime)
        }
    }

    /// How many revocations were read back from the journal at start (0 without one).
    public var restoredCount: Int { queue.sync { replicas.table.count } }

    public func view(loopIndex: Int) -> RevocationView { replicas.view(loopIndex: loopIndex) }

    public func update(policy: RevocationPolicy) {
        policyValue.withLock { $0 = policy }
        replicas.setPolicy(policy)
    }

    public var health: StoreHealth { .ok }

    public func start() {
        queue.async { [self] in
            guard pruneTimer == nil else { return }
            let timer = DispatchSource.makeTimerSource(queue: queue)
            let ns = Int(pruneInterval * 1e9)
            timer.schedule(deadline: .now() + .nanoseconds(ns), repeating: .nanoseconds(ns), leeway: .milliseconds(100))
            timer.setEventHandler { [weak self] in self?.prune() }
            timer.resume()
            pruneTimer = timer
        }
    }

    public func shutdown() {
        queue.async { [self] in
            pruneTimer?.cancel()
            pruneTimer = nil
        }
    }

    public func revoke(_ revocation: Revocation, completion: @escaping @Sendable (Result<Void, StoreError>) -> Void) {
        if let error = revocation.validate() { return completion(.failure(error)) }
        let policy = self.policy
        let r = revocation.resolved(maxCredentialLifetime: policy.maxCredentialLifetime)
        queue.async { [self] in
            let now = Int64(WallClock.nowSeconds())
            if r.expiry(maxCredentialLifetime: policy.maxCredentialLifetime) > now {
                replicas.apply(r, maxCredentialLifetime: policy.maxCredentialLifetime)
                if let journal {
                    // Enforced either way; acknowledged only once it is on disk.
                    do throws(RevocationJournal.Failure) { try journal.append(r) } catch {
                        journalWrite(failed: error)
                        return completion(.failure(.unavailable("not persisted: \(error)")))
                    }
                    journalWrite(failed: nil)
                }
            }
            completion(.success(()))
        }
    }

    public func undo(_ target: RevocationTarget, completion: @escaping @Sendable (Result<Bool, StoreError>) -> Void) {
        queue.async { [self] in
            let found = replicas.remove(target)
            if let journal {
                // Written even when nothing was found: the file may hold what the table pruned.
                do throws(RevocationJournal.Failure) { try journal.append(undo: target) } catch {
                    journalWrite(failed: error)
                    return completion(.failure(.unavailable("the undo is not persisted: \(error)")))
                }
                journalWrite(failed: nil)
            }
            completion(.success(found))
        }
    }

    /// Reports a change between failing and working journal writes (on `queue`).
    private func journalWrite(failed error: RevocationJournal.Failure?) {
        guard (error != nil) != journalFailing else { return }
        journalFailing = error != nil
        journalState(error?.description)
    }

    public func revocations(subject: String, completion: @escaping @Sendable (Result<[Revocation], StoreError>) -> Void) {
        queue.async { [self] in
            completion(.success(replicas.table.revocations(subject: subject, now: Int64(WallClock.nowSeconds()))))
        }
    }

    /// Prunes now (also runs every `pruneInterval`).
    public func prune() {
        queue.async { [self] in
            replicas.prune(now: Int64(WallClock.nowSeconds()))
        }
    }
}
