import Dispatch
import PortcullisCore
import PortcullisIO
import PortcullisRedis

/// Revocations shared by every gateway instance through Redis (key schema:
/// `RedisRevocationSchema`, REDIS-SCHEMA.md).
///
/// - Reads: each loop's `RevocationView`, never Redis.
/// - Coherence: a subscriber on `portcullis:revocations` (and keyspace
///   notifications when enabled) applies every announced revocation to all views
///   at once; every change is also logged in order (`RedisRevocationSchema.logKey`),
///   and this instance follows the log with a cursor per stream (`catchUp`: every
///   `catchUpInterval`, and at once when the subscription comes back), so a missed
///   announcement is applied from the log without scanning. A full `SCAN` runs at
///   start, after the data connection reconnects (a failover, a restart), when a
///   stream trimmed past a cursor, on a `resync` message, and every `resyncInterval`
///   when one is set (default: never).
/// - Writes: `revoke` applies locally first, then `SET … EXAT` + `XADD` (the log) +
///   `PUBLISH` in one pipeline. If Redis is down the revocation stays enforced here, is queued, and
///   is written when Redis returns (the completion reports `.unavailable`).
/// - Degraded mode: when the subscription drops, views keep the last synchronized
///   state for `policy.maxStaleness`, then answer by policy; on reconnect, a full
///   resync restores `.ok` without recreating the store.
///
/// Threading: all mutable state lives on `ioLoop.queue` (the Redis client's and
/// subscriber's loop); `health` is readable from anywhere through a lock.
public final class RedisRevocationStore: RevocationStore, @unchecked Sendable {
    // @unchecked Sendable: mutable state is confined to `ioLoop.queue`, except
    // `healthState`, which is guarded by `healthLock`.
    private let policyValue: LockedValue<RevocationPolicy>
    public var policy: RevocationPolicy { policyValue.withLock { $0 } }
    public let ioLoop: EventLoop
    let replicas: ViewReplicas
    let client: RedisClient
    private(set) var subscriber: RedisSubscriber!
    private let resyncInterval: Double
    private let catchUpInterval: Double
    private let pruneInterval: Double
    private let onEvent: (@Sendable (StoreEvent) -> Void)?

    // On ioLoop.queue:
    /// What this instance believes Redis holds (the last resync plus announcements since).
    var table = RevocationTable()
    private var subscribed = false
    private var synchronized = false
    private var resyncInProgress = false
    private var resyncRequested = false
    private var resyncGeneration = 0
    /// The table a resync is building, batch by batch. Held here (not
    /// captured by the SCAN callbacks) so it is uniquely referenced and each
    /// batch grows it in place instead of copying it.
    private var resyncSnapshot = RevocationTable()
    /// Announcements received while a resync was scanning; re-applied over its snapshot.
    private var deltasDuringResync: [Delta] = []
    /// A change announced while a resync scans, re-applied in order over its snapshot.
    private enum Delta {
        case revoke(Revocation)
        case undo(RevocationTarget)
    }
    /// Revocations accepted while Redis was unreachable, written when it returns.
    private var pendingWrites: [Revocation] = []
    private var timers: [DispatchSourceTimer] = []
    private var degradedGeneration = 0
    private var isShutdown = false

    private let healthLock = Lock()
    /// nil: synchronized. Otherwise wall-clock seconds since when it is not (or since start).
    private var unsyncedSince: Double?
    private var everSynchronized = false

    /// - Parameters:
    ///   - loops: the gateway's event loops; one view each.
    ///   - ioLoop: where the Redis connections run; by default a dedicated loop, so
    ///     resync parsing never delays request handling.
    ///   - catchUpInterval: seconds between reads of the log from the cursors.
    ///   - resyncInterval: seconds between full re-reads, 0 for none (catches keys written
    ///     without a `PUBLISH`, and deletions).
    ///   - onEvent: state changes, once each, on `ioLoop.queue`.
    public init(configuration: RedisConfiguration, loops: [EventLoop], policy: RevocationPolicy = RevocationPolicy(),
                resyncInterval: Double = 0, catchUpInterval: Double = 1, pruneInterval: Double = 60, ioLoop: EventLoop? = nil,
                onEvent: (@Sendable (StoreEvent) -> Void)? = nil) {
        policyValue = LockedValue(policy)
        confirmReplication = configuration.canFailOver
        if case .cluster = configuration.topology { onCluster = true }
        self.resyncInterval = resyncInterval
        self.catchUpInterval = catchUpInterval
        self.pruneInterval = pruneInterval
        self.onEvent = onEvent
        let io = ioLoop ?? EventLoop(index: -1)
        self.ioLoop = io
        // Never synchronized yet: the policy applies until the first load.
        replicas = ViewReplicas(loops: loops, policy: policy, staleAfter: -.infinity)
        unsyncedSince = WallClock.nowSeconds()
        client = RedisClient(configuration: configuration, loop: io)
        let keyspacePattern = "__keyspace@\(configuration.database)__:\(RedisRevocationSchema.keyPrefix)*"
        subscriber = RedisSubscriber(
            configuration: configuration, loop: io,
            channels: [RedisRevocationSchema.channel], patterns: [keyspacePattern],
            shardChannels: onCluster ? [RedisRevocationSchema.channel] : [],
            onMessage: { [weak self] message in self?.received(message) },
            onSubscribed: { [weak self] in self?.didSubscribe() },
            onStateChange: { [weak self] state in self?.subscriberStateChanged(state) })
    }

    public func view(loopIndex: Int) -> RevocationView { replicas.view(loopIndex: loopIndex) }

    /// A degraded view's trust ends `maxStaleness` after the disconnection under the new
    /// policy too.
    public func update(policy: RevocationPolicy) {
        policyValue.withLock { $0 = policy }
        replicas.setPolicy(policy)
        ioLoop.execute { [self] in
            guard !synchronized, everSynchronizedOnLoop, let since = healthLock.withLock({ unsyncedSince }) else { return }
            replicas.setStaleAfter(since + policy.maxStaleness)
        }
    }

    public var health: StoreHealth {
        healthLock.withLock {
            guard let since = unsyncedSince else { return .ok }
            guard everSynchronized else { return .unavailable }
            let elapsed = WallClock.nowSeconds() - since
            return elapsed >= policy.maxStaleness ? .unavailable : .degraded(sinceSeconds: elapsed)
        }
    }

    public func start() {
        // Every (re)connection of the data client — after a failover, to the new master —
        // writes what was not acknowledged and re-reads the view from where it now lives.
        client.observeState { [weak self] state in
            guard let self, case .connected(let address) = state, !self.isShutdown else { return }
            // A reconnection (another master after a failover, or the same address after a
            // restart that may have lost its data): the next resync must not forget what this
            // instance knew (see `mergeAfterSwitch`).
            if self.lastMaster != nil { self.mergeAfterSwitch = true }
            self.lastMaster = address
            if !self.pendingWrites.isEmpty && !self.subscribed { self.flushPendingWrites() }
            self.resync()
        }
        client.start()
        subscriber.start()
        ioLoop.execute { [self] in
            guard !isShutdown, timers.isEmpty else { return }
            if resyncInterval > 0 { timers.append(repeating(every: resyncInterval) { [weak self] in self?.periodicResync() }) }
            timers.append(repeating(every: catchUpInterval) { [weak self] in self?.catchUp() })
            timers.append(repeating(every: pruneInterval) { [weak self] in self?.prune() })
        }
    }

    public func shutdown() {
        ioLoop.execute { [self] in
            isShutdown = true
            for t in timers { t.cancel() }
            timers = []
        }
        subscriber.shutdown()
        client.shutdown()
    }

    // MARK: Writes

    public func revoke(_ revocation: Revocation, completion: @escaping @Sendable (Result<Void, StoreError>) -> Void) {
        if let error = revocation.validate() { return completion(.failure(error)) }
        let r = revocation.resolved(maxCredentialLifetime: policy.maxCredentialLifetime)
        ioLoop.execute { [self] in
            let now = Int64(WallClock.nowSeconds())
            guard r.expiry(maxCredentialLifetime: policy.maxCredentialLifetime) > now else { return completion(.success(())) }
            applyLocally(r)
            write(r) { [self] error in
                if let error {
                    pendingWrites.append(r)
                    completion(.failure(.unavailable("\(error); enforced by this instance, written to Redis when it returns")))
                } else {
                    completion(.success(()))
                }
            }
        }
    }

    /// With Sentinel (where a failover can promote a replica), a write is acknowledged
    /// only once it is where the next master will have it: `WAIT 1` saw a replica take
    /// it, or `ROLE` says the master has no replica (nothing to fail over to: right after
    /// a failover, until Sentinel turns the old master into the new one's replica, about
    /// ten seconds). A write that reached only a master in the middle of a failover (its
    /// replica already promoted) gets neither, so it is not acknowledged: it stays enforced
    /// here, queued, and written again to the new master when the client follows the
    /// switch. A second failover inside that window can promote the old master without
    /// the writes acknowledged meanwhile: every instance that knew them writes them to the
    /// new master again (`mergeAfterSwitch`).
    private var confirmReplication = false
    /// On a cluster the key and its log entry may live on two shards, each confirmed.
    private var onCluster = false
    /// How long a write waits for a replica's acknowledgement (milliseconds).
    static let replicationWaitMilliseconds = 1000

    private func write(_ r: Revocation, done: @escaping @Sendable (RedisError?) -> Void) {
        writeDurably(RedisRevocationSchema.writeCommands(for: r, sharded: onCluster)) { _, error in done(error) }
    }

    /// Runs a change: `commands` are the key's write (which decides), its log entry and its
    /// announcement (a failed `PUBLISH`/`SPUBLISH` is repaired by the log). Durable once the key and
    /// the log entry are written and, with Sentinel or Cluster, each confirmed on its own
    /// node (see `confirmReplication`; on a cluster they live on different shards).
    /// `done` gets the first command's integer reply (a `DEL`'s count) and nil, or the
    /// reason the change is not durable.
    private func writeDurably(_ commands: [[String]], done: @escaping @Sendable (Int64?, RedisError?) -> Void) {
        // Each command with the key it goes with: the key's write, then its log entry and the
        // announcement (a `PUBLISH` with the log entry, an `SPUBLISH` to its channel's shard),
        // all before any `WAIT` (a `WAIT` holds its connection until a replica answers:
        // nothing queued behind it on that connection, an announcement included, runs
        // sooner). Then a confirmation from the log's node and from the key's (one server, or
        // two shards of a cluster: each `WAIT` counts its own node's replicas).
        let key = RedisCommandKey.key(of: commands[0]) ?? ""
        let logKey = commands.count > 1 ? RedisCommandKey.key(of: commands[1]) ?? key : key
        var keyed = commands.map { (key: RedisCommandKey.key(of: $0) ?? logKey, arguments: $0) }
        let confirm = confirmReplication
        var confirmations: [Int] = []
        if confirm {
            // One server: one `WAIT` covers every write before it on the connection (a second
            // would only wait again when no replica is attached).
            for node in onCluster && HashSlot.of(key) != HashSlot.of(logKey) ? [logKey, key] : [logKey] {
                confirmations.append(keyed.count)
                keyed += [(node, ["WAIT", "1", "\(Self.replicationWaitMilliseconds)"]), (node, ["ROLE"])]
            }
        }
        client.pipeline(keyed: keyed, timeout: confirm ? Double(Self.replicationWaitMilliseconds) / 1000 + 2 : nil) { [confirmations] results in
            let first: Int64?
            switch results[0] {
            case .failure(let e): return done(nil, e)
            case .success(let reply): first = reply.integer
            }
            if results.count > 1, case .failure(let e) = results[1] { return done(first, e) }
            for at in confirmations {
                let replicated = (try? results[at].get())?.integer ?? 0
                let role = (try? results[at + 1].get())?.array
                let isMaster = role?.first?.string == "master"
                let replicas = role.flatMap { $0.count > 2 ? $0[2].array?.count : nil } ?? 0
                if isMaster && (replicated >= 1 || replicas == 0) { continue }
                return done(first, .disconnected(reason: isMaster ? "no replica confirmed the write within \(Self.replicationWaitMilliseconds) ms (a failover may be under way)"
                                                                  : "the server is no longer the master"))
            }
            done(first, nil)
        }
    }

    private func flushPendingWrites() {
        let writes = pendingWrites
        pendingWrites = []
        for r in writes {
            write(r) { [self] error in if error != nil { pendingWrites.append(r) } }
        }
    }

    /// Deletes the key and announces the undo (`unrevoke …`); every instance removes the
    /// entry at once. Acknowledged only when Redis took the `DEL` (with Sentinel, when a
    /// replica took it too, as for revocations): an undo that cannot be made durable is
    /// refused, so a later resync never brings the revocation back unannounced. A queued
    /// rewrite of the same revocation (made during an outage) is dropped.
    public func undo(_ target: RevocationTarget, completion: @escaping @Sendable (Result<Bool, StoreError>) -> Void) {
        ioLoop.execute { [self] in
            writeDurably(RedisRevocationSchema.undoCommands(for: target, sharded: onCluster)) { [self] deleted, error in
                guard let deleted else { return completion(.failure(.unavailable("\(error.map { "\($0)" } ?? "no reply"); the revocation stays"))) }
                let found = removeLocally(target) || deleted > 0
                if let error { return completion(.failure(.unavailable("\(error); try the undo again"))) }
                completion(.success(found))
            }
        }
    }

    /// Removes an undone entry here (a local undo, or an announcement); true when it was enforced.
    @discardableResult
    private func removeLocally(_ target: RevocationTarget, fromLog: Bool = false) -> Bool {
        // A logged undo replayed while this instance holds a revocation of the target it
        // could not write yet: that revocation is newer; it stays.
        if fromLog && pendingWrites.contains(where: { $0.target == target }) { return false }
        let found = table.remove(target)
        replicas.remove(target)
        pendingWrites.removeAll { $0.target == target }
        if resyncInProgress { deltasDuringResync.append(.undo(target)) }
        return found
    }

    public func revocations(subject: String, completion: @escaping @Sendable (Result<[Revocation], StoreError>) -> Void) {
        ioLoop.execute { [self] in
            if case .unavailable = health, everSynchronizedOnLoop {
                return completion(.failure(.unavailable("Redis unreachable for longer than max staleness")))
            }
            completion(.success(table.revocations(subject: subject, now: Int64(WallClock.nowSeconds()))))
        }
    }

    private var everSynchronizedOnLoop: Bool { healthLock.withLock { everSynchronized } }

    // MARK: Announcements

    private func received(_ message: RedisPubSubMessage) {
        if let pattern = message.pattern, pattern.hasPrefix("__keyspace@") {
            return keyspaceEvent(channel: message.channel, event: message.text)
        }
        apply(message.text, fromLog: false)
    }

    /// Applies an announcement or a log entry; false when it asked for a full read.
    @discardableResult
    private func apply(_ text: String, fromLog: Bool) -> Bool {
        switch RedisRevocationSchema.parse(message: text) {
        case .revocation(let r)?: applyLocally(r)
        case .undo(let target)?: removeLocally(target, fromLog: fromLog)
        case .resync?: resync(); return false
        case nil: break  // not ours; ignored
        }
        return true
    }

    private func keyspaceEvent(channel: String, event: String) {
        guard let colon = channel.firstIndex(of: ":") else { return }
        let key = String(channel[channel.index(after: colon)...])
        switch event {
        case "set", "expire", "expireat", "pexpire", "pexpireat":
            client.pipeline([["GET", key], ["EXPIRETIME", key]]) { [self] results in
                guard let expireTime = (try? results[1].get())?.integer,
                      let r = RedisRevocationSchema.revocation(key: key, value: (try? results[0].get())?.string,
                                                                expireTime: expireTime) else { return }
                applyLocally(r)
            }
        case "del", "unlink", "persist":
            resync()
        default:
            break
        }
    }

    /// The loops' views change only when this table did: the announcement of a revocation
    /// this instance made, and the keyspace event that follows every one, change nothing
    /// and wake no loop (each fan-out wakes one thread per loop: on the 2-core VM that was
    /// most of the 350 µs of CPU a revocation cost here, and the A→B tail).
    private func applyLocally(_ r: Revocation) {
        if table.apply(r, maxCredentialLifetime: policy.maxCredentialLifetime) {
            replicas.apply(r, maxCredentialLifetime: policy.maxCredentialLifetime)
        }
        if resyncInProgress { deltasDuringResync.append(.revoke(r)) }
    }

    // MARK: Synchronization

    private func didSubscribe() {
        subscribed = true
        // Back after a drop: what was announced meanwhile is in the log after the cursors
        // (unless a stream trimmed past one: then everything is read again).
        if cursors != nil && !resyncInProgress {
            checkGaps = true
            catchUp()
        } else {
            resync()
        }
    }

    private func subscriberStateChanged(_ state: RedisConnectionState) {
        guard case .disconnected(let error) = state, !isShutdown else { return }
        subscribed = false
        guard synchronized else {
            if !everSynchronizedOnLoop && !reportedUnreachable {
                reportedUnreachable = true
                onEvent?(.unreachable(reason: error.description))
            }
            return
        }
        synchronized = false
        let now = WallClock.nowSeconds()
        healthLock.withLock { unsyncedSince = now }
        replicas.setStaleAfter(now + policy.maxStaleness)
        onEvent?(.degraded(reason: error.description))
        degradedGeneration &+= 1
        let generation = degradedGeneration
        ioLoop.queue.asyncAfter(deadline: .now() + .nanoseconds(Int(policy.maxStaleness * 1e9))) { [weak self] in
            guard let self, !self.synchronized, self.degradedGeneration == generation else { return }
            self.onEvent?(.stale)
        }
    }

    /// The master the data client last reached. Only on `ioLoop`.
    private var lastMaster: SocketAddress?
    /// After a reconnection (to another master, or to a restarted one), the next resync keeps
    /// every live revocation the snapshot lacks and writes it to Redis again, announced: a
    /// failover that promoted a replica without some acknowledged writes (Sentinel promoting a
    /// demoted master that never synced, or a replica that lagged), or a restart of a Redis
    /// without persistence, loses nothing while any instance that knew them lives. The cost:
    /// an undo whose announcement this instance missed while disconnected is undone again
    /// (fail closed; undo it once more).
    private var mergeAfterSwitch = false

    /// `.unreachable` was reported (before the first synchronization). Only on `ioLoop`.
    private var reportedUnreachable = false

    private func periodicResync() {
        if subscribed { resync() }
    }

    /// Re-reads every revocation key with SCAN and replaces the views' tables.
    func resync() {
        guard subscribed, !isShutdown else { return }
        if resyncInProgress { resyncRequested = true; return }
        resyncInProgress = true
        resyncRequested = false
        deltasDuringResync = []
        // Written first: on the same connection, Redis applies them before the SCAN sees their keys.
        flushPendingWrites()
        resyncGeneration &+= 1
        resyncSnapshot = RevocationTable()
        let generation = resyncGeneration
        // Where each stream ends before the scan: what is logged from there on is replayed
        // over the scanned table (nothing written during the scan is missed).
        let ends = (0..<RedisRevocationSchema.logGroups).map { ["XINFO", "STREAM", RedisRevocationSchema.logKey(group: $0)] }
        client.pipeline(ends) { [self] results in
            guard generation == resyncGeneration else { return }
            var cursors: [LogCursor] = []
            for result in results {
                guard let info = Self.streamInfo(result) else { return resyncFailed() }
                cursors.append(LogCursor(id: info.lastID, consumed: info.added))
            }
            resyncCursors = cursors
            scan(from: .start, generation: generation)
        }
    }

    /// On a cluster every master is read in turn; a node that fails fails the resync (it is
    /// tried again), so a partial read never replaces the table.
    private func scan(from cursor: RedisScanCursor, generation: Int) {
        client.scan(from: cursor, match: RedisRevocationSchema.keyPrefix + "*", count: 1000) { [self] result in
            guard generation == resyncGeneration else { return }
            guard case .success(let (next, keys)) = result else { return resyncFailed() }
            if keys.isEmpty { return scanned(next: next, generation: generation) }
            var commands: [[String]] = []
            commands.reserveCapacity(keys.count * 2)
            for key in keys {
                commands.append(["GET", key])
                commands.append(["EXPIRETIME", key])
            }
            client.pipeline(commands) { [self] results in
                guard generation == resyncGeneration else { return }
                for (i, key) in keys.enumerated() {
                    guard case .success(let expiry) = results[2 * i + 1], let expireTime = expiry.integer else {
                        return resyncFailed()
                    }
                    let value = (try? results[2 * i].get())?.string
                    if let r = RedisRevocationSchema.revocation(key: key, value: value, expireTime: expireTime) {
                        resyncSnapshot.apply(r, maxCredentialLifetime: policy.maxCredentialLifetime)
                    }
                }
                scanned(next: next, generation: generation)
            }
        }
    }

    private func scanned(next: RedisScanCursor?, generation: Int) {
        if let next { return scan(from: next, generation: generation) }
        var snapshot = resyncSnapshot
        resyncSnapshot = RevocationTable()
        for delta in deltasDuringResync {
            switch delta {
            case .revoke(let r): snapshot.apply(r, maxCredentialLifetime: policy.maxCredentialLifetime)
            case .undo(let target): snapshot.remove(target)
            }
        }
        // Not in Redis yet, but already enforced here: keep enforcing them.
        for r in pendingWrites { snapshot.apply(r, maxCredentialLifetime: policy.maxCredentialLifetime) }
        var restored: [Revocation] = []
        if mergeAfterSwitch && subscribed {
            mergeAfterSwitch = false
            restored = table.revocations(missingFrom: snapshot, now: Int64(WallClock.nowSeconds()))
            for r in restored { snapshot.apply(r, maxCredentialLifetime: policy.maxCredentialLifetime) }
            if !restored.isEmpty { onEvent?(.restoredAfterSwitch(count: restored.count)) }
        }
        deltasDuringResync = []
        resyncInProgress = false
        cursors = resyncCursors
        checkGaps = false
        let now = Int64(WallClock.nowSeconds())
        snapshot.prune(now: now)
        table = snapshot
        if subscribed {
            replicas.install(snapshot, staleAfter: .infinity)
            markSynchronized()
        }
        // Written (and announced) again on the new master: every instance enforces them again.
        for r in restored { write(r) { [self] error in if error != nil { pendingWrites.append(r) } } }
        if resyncRequested { return resync() }
        catchUp()
    }

    private func markSynchronized() {
        let wasSynchronized = synchronized
        synchronized = true
        replicas.setStaleAfter(.infinity)
        healthLock.withLock {
            unsyncedSince = nil
            everSynchronized = true
        }
        if !wasSynchronized { onEvent?(.synchronized(entries: table.count)) }
    }

    // MARK: The log

    /// Where this instance stands in a stream of the log: the last entry id it read, and how
    /// many entries the stream had received up to it (`entries-added`), so a stream that
    /// trimmed entries this instance never read can be told from one that did not.
    struct LogCursor: Equatable {
        var id: String
        var consumed: Int64
    }

    /// One per stream; nil until a full read set them. Only on `ioLoop`.
    private var cursors: [LogCursor]?
    /// The streams' ends read before the scan in progress.
    private var resyncCursors: [LogCursor]?
    private var catchingUp = false
    private var catchUpAgain = false
    /// The subscription came back: the next catch-up checks that no stream trimmed entries
    /// past its cursor, and synchronizes the views when it is done.
    private var checkGaps = false
    /// Entries read from one stream per round.
    static let catchUpBatch = 512

    /// Reads every stream of the log after its cursor and applies the entries in order.
    func catchUp() {
        guard subscribed, !isShutdown, !resyncInProgress, let from = cursors else { return }
        if catchingUp { catchUpAgain = true; return }
        catchingUp = true
        let gaps = checkGaps
        let generation = resyncGeneration
        let groups = RedisRevocationSchema.logGroups
        var commands = (0..<groups).map {
            ["XRANGE", RedisRevocationSchema.logKey(group: $0), "(" + from[$0].id, "+", "COUNT", String(Self.catchUpBatch)]
        }
        if gaps { commands += (0..<groups).map { ["XINFO", "STREAM", RedisRevocationSchema.logKey(group: $0)] } }
        client.pipeline(commands) { [self] results in
            catchingUp = false
            guard generation == resyncGeneration, !resyncInProgress, var positions = cursors else { return }
            if gaps {
                for g in 0..<groups {
                    // Entries added since the cursor that the stream no longer holds were
                    // trimmed unread (or the stream was deleted and made again): a gap.
                    guard let info = Self.streamInfo(results[groups + g]) else { continue }
                    let unread = info.added - positions[g].consumed
                    if unread < 0 || unread > info.length {
                        onEvent?(.logGap(group: g))
                        return resync()
                    }
                }
            }
            var more = false
            var failed = false
            for g in 0..<groups {
                guard case .success(let reply) = results[g], let entries = reply.array else { failed = true; continue }
                for entry in entries {
                    guard let parts = entry.array, parts.count == 2, let id = parts[0].string else { continue }
                    positions[g].id = id
                    positions[g].consumed += 1
                    if let text = Self.field("m", of: parts[1])?.string, !apply(text, fromLog: true) {
                        cursors = positions  // up to this entry; the full read it asked for sets them anew
                        return
                    }
                }
                if entries.count == Self.catchUpBatch { more = true }
            }
            cursors = positions
            if gaps {
                if failed { checkGaps = true } else if subscribed { markSynchronized() }
            }
            if more || catchUpAgain {
                catchUpAgain = false
                catchUp()
            }
        }
    }

    /// `XINFO STREAM`'s last id, entries ever added and length; a stream that does not
    /// exist yet is empty; nil when the server did not answer.
    static func streamInfo(_ result: Result<RedisReply, RedisError>) -> (lastID: String, added: Int64, length: Int64)? {
        switch result {
        case .failure(.server(let message)) where message.contains("no such key"):
            return ("0-0", 0, 0)
        case .failure:
            return nil
        case .success(let reply):
            guard let lastID = field("last-generated-id", of: reply)?.string, let added = field("entries-added", of: reply)?.integer,
                  let length = field("length", of: reply)?.integer else { return nil }
            return (lastID, added, length)
        }
    }

    /// A field of a flat [name, value, …] reply (a stream entry's fields, `XINFO STREAM`).
    static func field(_ name: String, of reply: RedisReply) -> RedisReply? {
        guard let items = reply.array else { return nil }
        var i = 0
        while i + 1 < items.count {
            if items[i].string == name { return items[i + 1] }
            i += 2
        }
        return nil
    }

    private func resyncFailed() {
        resyncInProgress = false
        deltasDuringResync = []
        resyncSnapshot = RevocationTable()
        // The subscriber is up but commands failed (the client reconnects on its own): try again soon.
        ioLoop.queue.asyncAfter(deadline: .now() + .milliseconds(200)) { [weak self] in
            guard let self, self.subscribed else { return }
            self.resync()
        }
    }

    private func prune() {
        let now = Int64(WallClock.nowSeconds())
        table.prune(now: now)
        replicas.prune(now: now)
    }

    private func repeating(every seconds: Double, _ body: @escaping @Sendable () -> Void) -> DispatchSourceTimer {
        let timer = DispatchSource.makeTimerSource(queue: ioLoop.queue)
        let ns = Int(seconds * 1e9)
        timer.schedule(deadline: .now() + .nanoseconds(ns), repeating: .nanoseconds(ns), leeway: .milliseconds(50))
        timer.setEventHandler(handler: body)
        timer.resume()
        return timer
    }
}
