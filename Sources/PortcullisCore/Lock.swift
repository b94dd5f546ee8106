#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// A pthread mutex owned by one class. Used instead of `Synchronization.Mutex`
/// so the package keeps the package's macOS 14 deployment target.
public final class Lock: @unchecked Sendable {
    // @unchecked Sendable: the mutex is heap-allocated once, never moved, and
    // only touched through pthread calls, which are thread-safe by contract.
    @usableFromInline let mutex: UnsafeMutablePointer<pthread_mutex_t>

    public init() {
        mutex = .allocate(capacity: 1)
        mutex.initialize(to: pthread_mutex_t())
        pthread_mutex_init(mutex, nil)
    }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
    }

    @inlinable
    public func withLock<Result>(_ body: () throws -> Result) rethrows -> Result {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body()
    }
}

/// A value guarded by a `Lock`.
///
/// The value lives behind a pointer allocated once, not in a stored `var`:
/// a class's `var` is accessed with dynamic exclusivity checks
/// (`swift_beginAccess`), which the lock already makes redundant, and
/// `withLock` runs on every cache lookup and context borrow.
public final class LockedValue<Value>: @unchecked Sendable {
    // @unchecked Sendable: `storage` is only read or written inside `lock.withLock`.
    @usableFromInline let lock = Lock()
    @usableFromInline let storage: UnsafeMutablePointer<Value>

    public init(_ value: Value) {
        storage = .allocate(capacity: 1)
        storage.initialize(to: value)
    }

    deinit {
        storage.deinitialize(count: 1)
        storage.deallocate()
    }

    @inlinable
    public func withLock<Result>(_ body: (inout Value) throws -> Result) rethrows -> Result {
        try lock.withLock { try body(&storage.pointee) }
    }
}
