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
/// of the loop it lives on, `shardHint`) and loads a weak reference in place. The methods are
/// inlinable, so each target type's table is specialized where it is used (an unspecialized
/// generic lookup instantiated its metadata on every call: 4 % of the gateway's CPU on the
/// authenticated h2 row). One table per target type, as a static of that type.
public final class CallbackHandles<Target: AnyObject>: @unchecked Sendable {
    // @unchecked Sendable: each shard's storage is read and written only under its lock.
    @usableFromInline static var shardCount: Int { 16 }

    @usableFromInline
    struct Entry {
        @usableFromInline var generation: UInt32
        @usableFromInline weak var target: Target?
        @usableFromInline init(generation: UInt32, target: Target?) {
            self.generation = generation
            self.target = target
        }
    }

    /// One shard's slots: entries in a buffer of its own (read in place: a weak reference is
    /// loaded, never copied), the free slots, under the shard's lock.
    @usableFromInline
    final class Shard: @unchecked Sendable {
        @usableFromInline let lock = Lock()
        @usableFromInline var entries: UnsafeMutablePointer<Entry>
        @usableFromInline var count = 0
        @usableFromInline var capacity = 16
        @usableFromInline var free: [Int] = []

        @usableFromInline init() {
            entries = .allocate(capacity: capacity)
        }

        deinit {
            entries.deinitialize(count: count)
            entries.deallocate()
        }

        /// A new slot at the end, the buffer grown as needed. Under `lock`.
        @usableFromInline func append(_ target: Target) -> Int {
            if count == capacity {
                let grown = UnsafeMutablePointer<Entry>.allocate(capacity: capacity * 2)
                grown.moveInitialize(from: entries, count: count)
                entries.deallocate()
                entries = grown
                capacity *= 2
            }
            (entries + count).initialize(to: Entry(generation: 1, target: target))
            count += 1
            return count - 1
        }
    }

    @usableFromInline let shards: [Shard]

    public init() {
        shards = (0..<Self.shardCount).map { _ in Shard() }
    }

    /// A handle for `target`, in the shard `shardHint` selects (the index of the loop the
    /// target lives on: lookups from that loop then never wait for another's).
    @inlinable
    public func register(_ target: Target, shardHint: Int = 0) -> UnsafeMutableRawPointer {
        let shardIndex = Int(UInt(bitPattern: shardHint) % UInt(Self.shardCount))
        let shard = shards[shardIndex]
        let (slot, generation) = shard.lock.withLock { () -> (Int, UInt32) in
            if let reused = shard.free.popLast() {
                shard.entries[reused].target = target
                return (reused, shard.entries[reused].generation)
            }
            precondition(shard.count < 1 << 28, "more than 2^28 live callback handles in one shard")
            return (shard.append(target), 1)
        }
        let bits = UInt64(generation) << 32 | UInt64(slot) << 4 | UInt64(shardIndex)
        return UnsafeMutableRawPointer(bitPattern: UInt(bits))!  // generation ≥ 1: never null
    }

    /// Ends a handle: its lookups find nil from now on, and its slot is reused under a new
    /// generation. A handle removed already (or never made here) is ignored.
    @inlinable
    public func remove(_ handle: UnsafeRawPointer) {
        let (shard, slot, generation) = decode(handle)
        shard.lock.withLock {
            guard slot < shard.count, shard.entries[slot].generation == generation else { return }
            shard.entries[slot].target = nil
            let next = generation &+ 1
            shard.entries[slot].generation = next == 0 ? 1 : next
            shard.free.append(slot)
        }
    }

    /// The object a handle stands for, or nil (removed, freed, or not a handle of this table).
    @inlinable @inline(__always)
    public func target(_ handle: UnsafeRawPointer?) -> Target? {
        guard let handle else { return nil }
        let (shard, slot, generation) = decode(handle)
        return shard.lock.withLock { () -> Target? in
            guard slot < shard.count else { return nil }
            let entry = shard.entries + slot
            return entry.pointee.generation == generation ? entry.pointee.target : nil
        }
    }

    @inlinable @inline(__always)
    func decode(_ handle: UnsafeRawPointer) -> (Shard, Int, UInt32) {
        let bits = UInt64(UInt(bitPattern: handle))
        return (shards[Int(bits & 0xF)], Int((bits >> 4) & 0xFFF_FFFF), UInt32(truncatingIfNeeded: bits >> 32))
    }
}

/// What a `CallbackHandles` table holds for an object many references reach on the request
/// path (an HTTP/2 connection, a TLS session): the object owns its anchor, the table holds the
/// anchor weakly, and the anchor reaches the object through a checked `unowned` reference.
///
/// Why not the object itself: a weak reference moves an object's reference count into a side
/// table for good, and every retain and release of it then takes the runtime's slow path
/// (1.5 % of the authenticated h2 row's CPU: `incrementSlow`/`doDecrementSlow` on the
/// connection from streams, exchanges and the callbacks). An unowned reference needs no side
/// table. Safety is the table's as before: once the object is freed, so is its anchor (only
/// the object holds it), and a late callback's lookup finds nil. A lookup racing the object's
/// `deinit` on another thread (a C library calling back on a thread it was not called on,
/// which neither nghttp2 nor a BIO does) would stop the process at the `unowned` check,
/// never reach freed memory.
public final class CallbackAnchor<Target: AnyObject>: @unchecked Sendable {
    // @unchecked Sendable: immutable; the target is used on the thread its callbacks run on.
    public unowned let target: Target

    @inlinable
    public init(_ target: Target) {
        self.target = target
    }
}
