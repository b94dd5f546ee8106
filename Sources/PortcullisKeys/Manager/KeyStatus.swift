/// How current a provider's keys are.
public enum KeyHealth: String, Sendable, Equatable {
    /// No keys yet (first fetch not done or failed).
    case pending
    /// Keys within their TTL (or inline keys, which never expire).
    case fresh
    /// Past expiry, refresh failing, still served (within `stale_for`).
    case stale
    /// Keys dropped after `stale_for`; tokens fail with `keysUnavailable`.
    case unavailable
}

/// Where the keys in use came from.
public enum KeyOrigin: String, Sendable, Equatable {
    case fetched, sharedCache, inline
}

/// One provider's keys, as `GET /keys` shows them.
public struct KeyProviderStatus: Sendable, Equatable {
    public var provider: String
    /// The key URL, or "inline".
    public var source: String
    public var kids: [String]
    public var fetchedAt: Double?
    public var expiresAt: Double?
    public var health: KeyHealth
    public var origin: KeyOrigin?
    public var lastError: String?
    public var consecutiveFailures: Int
    /// Fetches, failures and refetches for this provider since start (for metrics).
    public var counters = KeyManagerCounters()
}

/// Counters since start, for metrics.
public struct KeyManagerCounters: Sendable, Equatable {
    /// GETs started / failed (any reason, including a bad document).
    public var fetches = 0
    public var fetchFailures = 0
    /// Fetches that returned a usable document (installed, changed or not).
    public var fetchSuccesses = 0
    /// Documents taken from the shared cache instead of fetching.
    public var sharedCacheLoads = 0
    /// Installs that changed a provider's keys (each drops its verified-token cache entries).
    public var keyChanges = 0
    /// `refetchForUnknownKey` calls; of those, joined to a fetch in flight, and refused by the interval.
    public var unknownKeyRefetches = 0
    public var refetchesCoalesced = 0
    public var refetchesThrottled = 0
    /// Refetches where another instance held the claim and this one reloaded the cache.
    public var refetchesFollowed = 0
    /// Times a provider went stale / had its keys dropped.
    public var staleTransitions = 0
    public var keyDrops = 0

    /// Adds `other` field by field.
    mutating func add(_ other: KeyManagerCounters) {
        fetches += other.fetches
        fetchFailures += other.fetchFailures
        fetchSuccesses += other.fetchSuccesses
        sharedCacheLoads += other.sharedCacheLoads
        keyChanges += other.keyChanges
        unknownKeyRefetches += other.unknownKeyRefetches
        refetchesCoalesced += other.refetchesCoalesced
        refetchesThrottled += other.refetchesThrottled
        refetchesFollowed += other.refetchesFollowed
        staleTransitions += other.staleTransitions
        keyDrops += other.keyDrops
    }
}

/// State changes worth a log line, reported through `KeyManager.onEvent`.
public enum KeyManagerEvent: Sendable, Equatable {
    /// New keys are in use.
    case keysInstalled(provider: String, kids: [String], origin: KeyOrigin, expiresAt: Double?)
    /// A fetch failed; the next attempt is in `retryIn` seconds.
    case fetchFailed(provider: String, error: KeyRefreshError, consecutiveFailures: Int, retryIn: Double)
    /// Keys are past expiry and still served, until `until` (wall clock).
    case servingStale(provider: String, expiredAt: Double, until: Double)
    /// Keys were dropped after `stale_for`.
    case keysDropped(provider: String)
    /// A fetch succeeded after failures or staleness.
    case recovered(provider: String)
}

/// The answer to `KeyManager.refetchForUnknownKey`.
public enum RefetchOutcome: Sendable, Equatable {
    /// New keys are installed: verify the parked request again.
    case changed
    /// The keys were fetched or reloaded and are the same.
    case unchanged
    /// A refetch for this provider ran less than `min_refetch_interval` ago.
    case throttled
    case failed(KeyRefreshError)
}
