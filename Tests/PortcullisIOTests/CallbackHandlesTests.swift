import Dispatch
import PortcullisCore
import Testing

/// `CallbackHandles`: what a C library's late callback finds — the live object, or nil for a
/// removed handle, a freed object, a reused slot's old handle, or bits that were never a handle.
struct CallbackHandlesTests {
    final class Target: Sendable { let name: String; init(_ name: String) { self.name = name } }

    @Test func aLateCallbackFindsNilNeverAFreedObject() {
        let table = CallbackHandles<Target>()
        var first: Target? = Target("first")
        let handle = table.register(first!, shardHint: 3)
        #expect(table.target(handle)?.name == "first")
        // Freed without removing its handle: the table held it weakly.
        first = nil
        #expect(table.target(handle) == nil)
        table.remove(handle)
        // The slot is reused under a new generation: the old handle still finds nothing.
        let second = Target("second")
        let reused = table.register(second, shardHint: 3)
        #expect(reused != handle && table.target(handle) == nil && table.target(reused)?.name == "second")
        table.remove(reused)
        table.remove(reused)  // twice: ignored
        #expect(table.target(reused) == nil)
        // Not a handle of this table (a slot it never gave, null): nil, no trap.
        #expect(table.target(UnsafeRawPointer(bitPattern: UInt(0x0000_0001_0000_FFF3))) == nil)
        #expect(table.target(nil) == nil)
        withExtendedLifetime(second) {}
    }

    @Test func shardsAndThreadsKeepHandlesApart() {
        let table = CallbackHandles<Target>()
        let targets = (0..<64).map { Target("t\($0)") }
        // Registered and looked up from many threads at once, each in its loop's shard.
        let handles = LockedValue<[Int: UInt]>([:])  // handles' bit patterns
        @Sendable func pointer(_ bits: UInt) -> UnsafeRawPointer { UnsafeRawPointer(bitPattern: bits)! }
        DispatchQueue.concurrentPerform(iterations: targets.count) { i in
            let handle = table.register(targets[i], shardHint: i)
            handles.withLock { $0[i] = UInt(bitPattern: handle) }
            for _ in 0..<1000 { precondition(table.target(handle) === targets[i]) }
        }
        let all = handles.withLock { $0 }
        #expect(Set(all.values).count == targets.count, "every handle distinct")
        for (i, handle) in all { #expect(table.target(pointer(handle)) === targets[i]) }
        DispatchQueue.concurrentPerform(iterations: targets.count) { i in table.remove(pointer(all[i]!)) }
        #expect(all.values.allSatisfy { table.target(pointer($0)) == nil })
    }

    /// An object that owns its anchor: the table reaches it through the anchor, and once the
    /// object is freed (its handle never removed) the anchor is gone with it: nil, no trap.
    @Test func anAnchoredObjectIsFoundWhileItLivesAndNilAfter() {
        final class Owner: @unchecked Sendable {
            let name: String
            var anchor: CallbackAnchor<Owner>?
            let freed: LockedValue<Bool>
            init(_ name: String, freed: LockedValue<Bool>) { self.name = name; self.freed = freed }
            deinit { freed.withLock { $0 = true } }
        }
        let freed = LockedValue(false)
        let table = CallbackHandles<CallbackAnchor<Owner>>()
        var owner: Owner? = Owner("conn", freed: freed)
        owner!.anchor = CallbackAnchor(owner!)
        let handle = table.register(owner!.anchor!, shardHint: 1)
        #expect(table.target(handle)?.target.name == "conn")
        #expect(table.target(handle)?.target === owner)
        owner = nil
        #expect(freed.withLock { $0 }, "neither the table nor the anchor keeps the object alive")
        #expect(table.target(handle) == nil)
        table.remove(handle)
        #expect(table.target(handle) == nil)
    }
}
