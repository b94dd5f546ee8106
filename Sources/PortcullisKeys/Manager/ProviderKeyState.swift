import Dispatch
import PortcullisAuth

/// What `KeyManager` knows about one provider.
final class ProviderKeyState: @unchecked Sendable {
    // @unchecked Sendable: confined to `KeyManager.queue`; it is only carried
    // through other queues' closures back to that queue.
    let name: String
    let source: KeySource
    /// Parsed once at init for inline sources.
    let inlineKeys: KeySet?

    /// The document whose keys the verifier holds now (URL sources); nil when none.
    var document: CachedKeyDocument?
    var kids: [String] = []
    var origin: KeyOrigin?
    var health = KeyHealth.pending
    var lastError: KeyRefreshError?
    var consecutiveFailures = 0
    /// This provider's share of `KeyManager.counters()`.
    var counters = KeyManagerCounters()

    /// Non-nil while a fetch (or a wait on another instance's fetch) is in
    /// flight: everyone asking meanwhile is added here and answered together.
    var waiters: [@Sendable (RefetchOutcome) -> Void]?
    /// Monotonic nanoseconds of the last unknown-kid refetch this instance started; 0 = never.
    var lastUnknownKeyRefetch: UInt64 = 0
    /// Wall-clock time of the next refresh or retry, if one is planned.
    var nextFetchAt: Double?
    var timer: DispatchSourceTimer?

    init(name: String, source: KeySource, inlineKeys: KeySet?) {
        self.name = name
        self.source = source
        self.inlineKeys = inlineKeys
    }

    /// URL and format for fetched sources.
    var remote: (url: String, format: KeyDocumentFormat)? {
        if case .url(let url, let format) = source { return (url, format) }
        return nil
    }

    var status: KeyProviderStatus {
        KeyProviderStatus(provider: name, source: source.displayName, kids: kids,
                          fetchedAt: document?.fetchedAt, expiresAt: document?.expiresAt,
                          health: health, origin: origin, lastError: lastError?.description,
                          consecutiveFailures: consecutiveFailures, counters: counters)
    }
}
