/// How a C library's callback finds the Swift object it belongs to, without a pointer to it:
/// the context the C object stores (nghttp2's `user_data`, a BIO's data, an `SSL_CTX`'s ex
/// data or callback argument, a thread's argument) is a handle — shard, slot and generation
/// packed into the pointer's bits, never dereferenced — and the callback looks the object up
/// here. The table holds its objects weakly, and an object's handle is removed when it goes
/// (`remove`, from its `deinit` or close path), so a callback that comes late (a stale handle,
/// a freed object) finds nil and returns an error to the library: nothing can dangle, whatever
/// order the C object and the Swift object are freed in.
///
/// Cost: a lookup takes its shard's lock (uncontended: an object is registered in the shard
/// of the loop it lives on, `shardHint`) and loads a weak reference. One table per target
/// type, as a static of that type.
public final class CallbackHandles<Target: AnyObject>: @unchecked Sendable {
    // @unchecked Sendable: each shard's arrays are read and written only under its lock.
    static var shardCount: Int { 16 }

    final class Shard: @unchecked Sendable {
        let lock = Lock()
        var generations: [UInt32] = []
        var targets: [Weak] = []
        var free: [Int] = []
    }

    struct Weak {
        weak var target: Target?
    }

    private let shards: [Shard]

    public init() {
        shards = (0..<Self.shardCount).map { _ in Shard() }
    }

    /// A handle for `target`, in the shard `shardHint` selects (the index of the loop the
    /// target lives on: lookups from that loop then never wait for another's).
    public func register(_ target: Target, shardHint: Int = 0) -> UnsafeMutableRawPointer {
        let shardIndex = Int(UInt(bitPattern: shardHint) % UInt(Self.shardCount))
        let shard = shards[shardIndex]
        let (slot, generation) = shard.lock.withLock { () -> (Int, UInt32) in
            let slot: Int
            if let reused = shard.free.popLast() {
                slot = reused
                shard.targets[slot].target = target
            } else {
                slot = shard.targets.count
                precondition(slot < 1 << 28, "more than 2^28 live callback handles in one shard")
                shard.targets.append(Weak(target: target))
                shard.generations.append(1)
            }
            return (slot, shard.generations[slot])
        }
        let bits = UInt64(generation) << 32 | UInt64(slot) << 4 | UInt64(shardIndex)
        return UnsafeMutableRawPointer(bitPattern: UInt(bits))!  // generation ≥ 1: never null
    }

    /// Ends a handle: its lookups find nil from now on, and its slot is reused under a new
    /// generation. A handle removed already (or never made here) is ignored.
    public func remove(_ handle: UnsafeRawPointer) {
        let (shard, slot, generation) = decode(handle)
        shard.lock.withLock {
            guard slot < shard.generations.count, shard.generations[slot] == generation else { return }
            shard.targets[slot].target = nil
            let next = generation &+ 1
            shard.generations[slot] = next == 0 ? 1 : next
            shard.free.append(slot)
        }
    }

    /// The object a handle stands for, or nil (removed, freed, or not a handle of this table).
    @inline(__always)
    public func target(_ handle: UnsafeRawPointer?) -> Target? {
        guard let handle else { return nil }
        let (shard, slot, generation) = decode(handle)
        return shard.lock.withLock {
            guard slot < shard.generations.count, shard.generations[slot] == generation else { return nil }
            return shard.targets[slot].target
        }
    }

    @inline(__always)
    private func decode(_ handle: UnsafeRawPointer) -> (Shard, Int, UInt32) {
        let bits = UInt64(UInt(bitPattern: handle))
        return (shards[Int(bits & 0xF)], Int((bits >> 4) & 0xFFF_FFFF), UInt32(truncatingIfNeeded: bits >> 32))
    }
}
