import PortcullisCore
/// A small pool of per-key OpenSSL contexts.
///
/// `EVP_PKEY_CTX`, `EVP_MD_CTX` (and the HMAC contexts built on it) and `EVP_CIPHER_CTX` must not be
/// used by two threads at once, and the proxy verifies on several serial
/// queues concurrently. Each verification borrows a context (a pop under a
/// short uncontended lock, ~20 ns), uses it without the lock, and returns it.
/// When the pool is empty a new context is built from the key's template, so
/// the pool grows to the peak concurrency (2-4 on this machine) and stops.
///
/// Chosen over `EVP_PKEY_CTX_dup` per call (an allocation and provider
/// context copy per token) and over thread-locals (Swift has no cheap
/// thread-local storage, and queues migrate between threads).
final class ContextPool<Context: AnyObject>: Sendable {
    private let available: LockedValue<[Context]>
    private let make: @Sendable () -> Context?
    private let limit: Int

    init(limit: Int = 16, make: @escaping @Sendable () -> Context?) {
        self.available = LockedValue([])
        self.make = make
        self.limit = limit
    }

    /// Pre-builds one context so configuration errors surface at load time.
    func prime() -> Bool {
        guard let context = make() else { return false }
        available.withLock { $0.append(context) }
        return true
    }

    @inline(__always)
    func withContext<Result>(_ body: (Context) -> Result) -> Result? {
        let borrowed = available.withLock { $0.popLast() }
        guard let context = borrowed ?? make() else { return nil }
        let result = body(context)
        available.withLock { pool in
            if pool.count < limit { pool.append(context) }
        }
        return result
    }
}
