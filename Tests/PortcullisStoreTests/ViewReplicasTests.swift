import Synchronization
import Testing
import PortcullisTestSupport
import PortcullisIO
@testable import PortcullisStore

/// How a store's changes reach the loops' views (`RevocationView.post`/`catchUp`): applied
/// in order by the loop's next read, with no block per change; a loop that reads nothing
/// gets one block once `wakeAfter` changes wait, so the posted changes stay bounded.
@Suite struct ViewReplicasTests {
    let loops = [EventLoop(index: 0), EventLoop(index: 1)]

    @Test func theNextReadOnTheLoopAppliesEveryPostedChangeInOrder() {
        let replicas = ViewReplicas(loops: loops, policy: RevocationPolicy(), staleAfter: .infinity)
        let now = nowSeconds()
        replicas.apply(.token(id: "a", until: now + 60), maxCredentialLifetime: 3600)
        replicas.apply(.token(id: "b", until: now + 60), maxCredentialLifetime: 3600)
        replicas.remove(.token("a"))
        replicas.setStaleAfter(Double(now - 1))
        for loop in loops {
            let view = replicas.view(loopIndex: loop.index)
            let (a, b, c, count) = loop.queue.sync {
                (view.check(tokenID: "a", sessionID: nil, subject: "u", issuedAt: nil, now: now),
                 view.check(tokenID: "b", sessionID: nil, subject: "u", issuedAt: nil, now: now),
                 view.check(tokenID: "c", sessionID: nil, subject: "u", issuedAt: nil, now: now),
                 view.entryCount)
            }
            #expect(a == .unavailable, "removed after it was added; the view is stale (deny by default)")
            #expect(b == .revoked)
            #expect(c == .unavailable)
            #expect(count == 1)
        }
    }

    @Test func aLoopThatReadsNothingIsSentOneBlockPerBurst() {
        let replicas = ViewReplicas(loops: loops, policy: RevocationPolicy(), staleAfter: .infinity)
        let view = replicas.view(loopIndex: 0)
        // Fewer than wakeAfter posts: nothing applied yet, and no block was sent (the queue stays idle).
        for i in 0..<(RevocationView.wakeAfter - 1) { replicas.setStaleAfter(Double(i)) }
        let unapplied = loops[0].queue.sync { view.staleAfter }
        #expect(unapplied == .infinity, "posted, not applied: no block per change")
        // The wakeAfter-th change sends one block, which applies everything posted.
        replicas.setStaleAfter(1000)
        #expect(waitUntil(5) { loops[0].queue.sync { view.staleAfter } == 1000 })
        // Then the next burst can send its own block.
        for i in 0..<RevocationView.wakeAfter { replicas.setStaleAfter(Double(2000 + i)) }
        #expect(waitUntil(5) { loops[0].queue.sync { view.staleAfter } == Double(2000 + RevocationView.wakeAfter - 1) })
    }

    @Test func everyLoopReadsOneTableThatTakesNewEntriesInPlace() {
        let replicas = ViewReplicas(loops: loops, policy: RevocationPolicy(), staleAfter: .infinity)
        let now = nowSeconds()
        func check(_ loop: EventLoop, _ id: String) -> RevocationVerdict {
            let view = replicas.view(loopIndex: loop.index)
            return loop.queue.sync { view.check(tokenID: id, sessionID: nil, subject: "u", issuedAt: nil, now: now) }
        }
        // The first entry needs storage: a replacement, posted to every view and taken at its next read.
        replicas.apply(.token(id: "t0", until: now + 60), maxCredentialLifetime: 3600)
        for loop in loops { #expect(check(loop, "t0") == .revoked) }
        let shared = replicas.table
        for loop in loops {
            let view = replicas.view(loopIndex: loop.index)
            #expect(loop.queue.sync { view.table.sharesStorage(with: shared) }, "one table for the process, not a copy per loop")
        }
        // Entries that fit are written into that storage: no post, no block, seen at the next lookup.
        replicas.apply(.token(id: "t1", until: now + 60), maxCredentialLifetime: 3600)
        replicas.apply(.session(id: "s1", until: now + 60), maxCredentialLifetime: 3600)
        for loop in loops {
            let view = replicas.view(loopIndex: loop.index)
            #expect(!view.hasPostedChanges, "an entry added in place posts nothing")
            #expect(check(loop, "t1") == .revoked)
            #expect(loop.queue.sync { view.check(tokenID: nil, sessionID: "s1", subject: "u", issuedAt: nil, now: now) } == .revoked)
        }
        // Growth past the storage's room replaces it: every view moves to the new one, with every entry.
        for i in 2..<200 { replicas.apply(.token(id: "t\(i)", until: now + 60), maxCredentialLifetime: 3600) }
        #expect(!replicas.table.sharesStorage(with: shared))
        for loop in loops {
            for i in 0..<200 { #expect(check(loop, "t\(i)") == .revoked) }
            #expect(check(loop, "t200") == .allowed)
            let view = replicas.view(loopIndex: loop.index)
            #expect(loop.queue.sync { view.table.sharesStorage(with: replicas.table) })
            #expect(loop.queue.sync { view.entryCount } == 201)
        }
        // An undo replaces the storage too (nothing is ever taken out in place).
        replicas.remove(.token("t7"))
        for loop in loops { #expect(check(loop, "t7") == .allowed); #expect(check(loop, "t8") == .revoked) }
    }

    @Test func anInstalledSnapshotIsCopiedSoTheCallersTableNeverChanges() {
        let replicas = ViewReplicas(loops: loops, policy: RevocationPolicy(), staleAfter: -.infinity)
        let now = nowSeconds()
        var snapshot = RevocationTable()
        snapshot.apply(.token(id: "a", until: now + 60), maxCredentialLifetime: 3600)
        replicas.install(snapshot, staleAfter: .infinity)
        replicas.apply(.token(id: "b", until: now + 60), maxCredentialLifetime: 3600)
        #expect(snapshot.count == 1, "the store's own table is not the views' storage")
        for loop in loops {
            let view = replicas.view(loopIndex: loop.index)
            let (a, b) = loop.queue.sync {
                (view.check(tokenID: "a", sessionID: nil, subject: "u", issuedAt: nil, now: now),
                 view.check(tokenID: "b", sessionID: nil, subject: "u", issuedAt: nil, now: now))
            }
            #expect(a == .revoked && b == .revoked)
        }
    }

    @Test func aLoopFindsEveryEntryTheWriterFinishedWhileTheTableGrows() async {
        // The writer adds entries one by one (the storage grows several times meanwhile) and
        // says after each how many it finished; the loop, reading all the while, must find
        // the last one it was told of. (Under ThreadSanitizer in CI: publication by atomics.)
        let replicas = ViewReplicas(loops: loops, policy: RevocationPolicy(), staleAfter: .infinity)
        let now = nowSeconds()
        let view = replicas.view(loopIndex: 0)
        let reading = Reading()
        @Sendable func read() {
            let n = reading.written.load(ordering: .acquiring)
            if n > 0, view.check(tokenID: "w\(n - 1)", sessionID: nil, subject: "u", issuedAt: nil, now: now) != .revoked {
                reading.failures.add(1, ordering: .relaxed)
            }
            reading.reads.add(1, ordering: .relaxed)
            if reading.on.load(ordering: .relaxed) { loops[0].execute(read) } else { reading.done.store(true, ordering: .releasing) }
        }
        loops[0].execute(read)
        for i in 0..<3000 {
            replicas.apply(.token(id: "w\(i)", until: now + 60), maxCredentialLifetime: 3600)
            reading.written.store(i + 1, ordering: .releasing)
            if i % 100 == 0 { await Task.yield() }
        }
        reading.on.store(false, ordering: .relaxed)
        #expect(waitUntil(10) { reading.done.load(ordering: .acquiring) })
        #expect(reading.failures.load(ordering: .relaxed) == 0)
        #expect(reading.reads.load(ordering: .relaxed) > 0)
        #expect(loops[0].queue.sync { view.entryCount } == 3000)
    }

    @Test func postsFromManyThreadsAreNeitherLostNorAppliedTwice() async {
        let replicas = ViewReplicas(loops: loops, policy: RevocationPolicy(), staleAfter: .infinity)
        let now = nowSeconds()
        let view = replicas.view(loopIndex: 1)
        let reading = Reading()
        // The loop reads all the while (each read applies what is posted so far).
        @Sendable func read() {
            _ = view.check(tokenID: "x", sessionID: nil, subject: "u", issuedAt: nil, now: now)
            if reading.on.load(ordering: .relaxed) { loops[1].execute(read) }
        }
        loops[1].execute(read)
        await withTaskGroup(of: Void.self) { group in
            for t in 0..<4 {
                group.addTask {
                    for i in 0..<500 { replicas.apply(.token(id: "t\(t)-\(i)", until: now + 60), maxCredentialLifetime: 3600) }
                }
            }
        }
        reading.on.store(false, ordering: .relaxed)
        #expect(loops[1].queue.sync { view.entryCount } == 2000)
    }
}

private final class Reading: Sendable {
    let on = Atomic<Bool>(true)
    /// How many entries the writer finished (published after each one).
    let written = Atomic<Int>(0)
    let failures = Atomic<Int>(0)
    let reads = Atomic<Int>(0)
    let done = Atomic<Bool>(false)
}
