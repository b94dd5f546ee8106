import Dispatch
import PortcullisCore

/// A `SharedKeyCache` held in this process: the default when no Redis is
/// configured, and, shared by several `KeyManager`s, a stand-in for Redis in
/// tests of multi-instance behaviour.
///
/// Threading: the maps are touched only on `queue`; completions run on it too,
/// asynchronously, as a network store's would.
public final class InProcessKeyCache: SharedKeyCache, @unchecked Sendable {
    // @unchecked Sendable: `documents` and `claims` are confined to `queue`.

    private let queue = DispatchQueue(label: "portcullis.keys.inprocess-cache")
    private var documents: [String: CachedKeyDocument] = [:]
    /// Monotonic nanoseconds until which each provider's fetch claim holds.
    private var claims: [String: UInt64] = [:]

    public init() {}

    public func load(provider: String, completion: @escaping @Sendable (CachedKeyDocument?) -> Void) {
        queue.async { completion(self.documents[provider]) }
    }

    public func store(provider: String, document: CachedKeyDocument) {
        queue.async { self.documents[provider] = document }
    }

    public func forget(provider: String) {
        queue.sync {
            documents[provider] = nil
            claims[provider] = nil
        }
    }

    public func claimFetch(provider: String, interval: Double, completion: @escaping @Sendable (Bool) -> Void) {
        queue.async {
            let now = MonotonicClock.nowNanoseconds()
            if let until = self.claims[provider], until > now {
                completion(false)
                return
            }
            self.claims[provider] = now &+ UInt64(max(0, interval) * 1e9)
            completion(true)
        }
    }
}
