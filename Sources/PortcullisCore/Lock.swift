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
public final class LockedValue<Value>: @unchecked Sendable {
    // @unchecked Sendable: `value` is only read or written inside `lock.withLock`.
    @usableFromInline let lock = Lock()
    @usableFromInline var value: Value

    public init(_ value: Value) { self.value = value }

    @inlinable
    public func withLock<Result>(_ body: (inout Value) throws -> Result) rethrows -> Result {
        try lock.withLock { try body(&value) }
    }
}
