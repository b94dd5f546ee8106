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
        let now = nowSeconds()
        // Fewer than wakeAfter: nothing applied yet, and no block was sent (the queue stays idle).
        for i in 0..<(RevocationView.wakeAfter - 1) {
            replicas.apply(.token(id: "t\(i)", until: now + 60), maxCredentialLifetime: 3600)
        }
        let unapplied = loops[0].queue.sync { view.table.count }
        #expect(unapplied == 0, "posted, not applied: no block per change")
        // The wakeAfter-th change sends one block, which applies everything posted.
        replicas.apply(.token(id: "last", until: now + 60), maxCredentialLifetime: 3600)
        #expect(waitUntil(5) { loops[0].queue.sync { view.table.count } == RevocationView.wakeAfter })
        // Then the next burst can send its own block.
        for i in 0..<RevocationView.wakeAfter {
            replicas.apply(.token(id: "u\(i)", until: now + 60), maxCredentialLifetime: 3600)
        }
        #expect(waitUntil(5) { loops[0].queue.sync { view.table.count } == 2 * RevocationView.wakeAfter })
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
}
