#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// A pthread mutex owned by one class. Used instead of `Synchronization.Mutex`
/// so the module keeps the package's macOS 14 deployment target.
final class Lock: @unchecked Sendable {
    // @unchecked Sendable: the mutex is heap-allocated once, never moved, and
    // only touched through pthread calls, which are thread-safe by contract.
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>

    init() {
        mutex = .allocate(capacity: 1)
        mutex.initialize(to: pthread_mutex_t())
        pthread_mutex_init(mutex, nil)
    }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
    }

    @inline(__always)
    func withLock<Result>(_ body: () throws -> Result) rethrows -> Result {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body()
    }
}

/// A value guarded by a `Lock`.
final class LockedValue<Value>: @unchecked Sendable {
    // @unchecked Sendable: `value` is only read or written inside `lock.withLock`.
    private let lock = Lock()
    private var value: Value

    init(_ value: Value) { self.value = value }

    @inline(__always)
    func withLock<Result>(_ body: (inout Value) throws -> Result) rethrows -> Result {
        try lock.withLock { try body(&value) }
    }
}
