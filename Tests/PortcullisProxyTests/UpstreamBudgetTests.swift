import PortcullisTestSupport
import PortcullisIO
import Testing
@testable import PortcullisProxy

/// The budget every loop's pool shares for one upstream (`UpstreamTarget`): which request
/// gets a freed or idle connection and which one is refused must not depend on the loop a
/// client landed on (the PoolLimit end-to-end test saw [200, 503 × 5] where [200, 200,
/// 503 × 4] was due, when the last connection idled on the other loop).
@Suite struct UpstreamBudgetTests {
    static func target(maxConnections: Int, maxPending: Int) throws -> UpstreamTarget {
        let address = try SocketAddress(parsing: "127.0.0.1:9")
        return try UpstreamTarget(configuration: UpstreamConfiguration(name: "app", address: address, maxConnections: maxConnections,
                                                                       maxPending: maxPending), logger: nil)
    }

    /// One slot, held by an idle connection on loop 0; two requests arrive on loop 1.
    @Test func aWaiterThatAnIdleConnectionElsewhereWillServeTakesNoQueuePlace() throws {
        let target = try Self.target(maxConnections: 1, maxPending: 1)
        let trimmed = Locked<[Int]>([])
        target.trimIdle = { except in trimmed.update { $0.append(except) } }
        #expect(target.claimSlot())
        target.idleChanged(by: 1)  // the connection idles on loop 0
        #expect(!target.claimSlot())
        #expect(target.claimWaiter(loop: 1), "served as soon as loop 0 trims its idle connection")
        #expect(target.claimWaiter(loop: 1), "the one place max_pending gives")
        #expect(!target.claimWaiter(loop: 1), "a third is refused")
        #expect(trimmed.get() == [1, 1])
        // Loop 0 must not reuse its idle connection for a newcomer: the waiters are older.
        #expect(!target.takeIdle())
        // Loop 0 trims: the slot passes to loop 1's oldest waiter.
        let granted = Locked<[Int]>([])
        target.grantSlot = { loop in granted.update { $0.append(loop) } }
        target.idleChanged(by: -1)
        target.releaseSlot()
        #expect(granted.get() == [1])
        // One waiter left, no idle connection: the queue is full again.
        #expect(!target.claimWaiter(loop: 0))
        // The waiter is served and leaves; a connection idles again and is reused.
        target.leaveQueue(loop: 1)
        target.idleChanged(by: 1)
        #expect(target.takeIdle())
    }

    @Test func withoutWaitersAnIdleConnectionIsReusedAndCounted() throws {
        let target = try Self.target(maxConnections: 2, maxPending: 0)
        #expect(target.claimSlot())
        target.idleChanged(by: 1)
        #expect(target.takeIdle())
        #expect(target.claimSlot(), "a second slot")
        #expect(!target.claimSlot(), "max_connections 2")
        #expect(!target.claimWaiter(loop: 0), "max_pending 0 and nothing idle")
        target.idleChanged(by: 1)
        #expect(target.claimWaiter(loop: 1), "an idle connection will serve it")
    }
}
