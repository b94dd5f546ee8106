import PortcullisOutbound
/// Timing and limits for `KeyManager`. Every value has a default; the YAML
/// keys are given for the configuration loader (durations in seconds).
public struct KeyManagerConfiguration: Sendable, Equatable {
    /// `keys.min_ttl`: shortest time a fetched document is trusted as fresh,
    /// whatever `Cache-Control` says. Default 300 s (5 min).
    public var minimumTTL: Double
    /// `keys.max_ttl`: longest time a fetched document is trusted as fresh. Default 86 400 s (24 h).
    public var maximumTTL: Double
    /// `keys.default_ttl`: TTL when the response has neither `Cache-Control: max-age` nor `Expires`. Default 3600 s.
    public var defaultTTL: Double
    /// Fraction of the TTL after which a refresh starts (ahead of expiry). Default 0.8.
    public var refreshFraction: Double
    /// Up to this fraction of the TTL is added at random to the refresh time,
    /// so instances do not refresh together. Default 0.1.
    public var refreshJitterFraction: Double
    /// `keys.stale_for`: how long past expiry the last good keys keep being
    /// served while the key host fails; after that they are dropped and tokens
    /// fail with `keysUnavailable`. Default 86 400 s (24 h).
    public var staleFor: Double
    /// `keys.min_refetch_interval`: an unknown `kid` triggers at most one
    /// refetch per provider per interval, across all instances sharing the
    /// cache. Default 30 s.
    public var minimumRefetchInterval: Double
    /// First retry delay after a failed fetch; doubled per consecutive failure. Default 1 s.
    public var retryInitialDelay: Double
    /// Cap on the retry delay. Default 60 s.
    public var retryMaximumDelay: Double
    /// When another instance holds the fetch claim, how long to watch the
    /// shared cache for its result before answering "unchanged". Default 2 s.
    public var followerWait: Double
    /// Poll period while watching the shared cache. Default 0.1 s.
    public var followerPollInterval: Double
    /// Connect / total timeouts and the body cap of each fetch
    /// (`keys.connect_timeout`, `keys.timeout`, `keys.max_document_size`).
    public var fetch: HTTPFetchOptions

    public init(minimumTTL: Double = 300, maximumTTL: Double = 86_400, defaultTTL: Double = 3600,
                refreshFraction: Double = 0.8, refreshJitterFraction: Double = 0.1,
                staleFor: Double = 86_400, minimumRefetchInterval: Double = 30,
                retryInitialDelay: Double = 1, retryMaximumDelay: Double = 60,
                followerWait: Double = 2, followerPollInterval: Double = 0.1,
                fetch: HTTPFetchOptions = HTTPFetchOptions()) {
        self.minimumTTL = minimumTTL
        self.maximumTTL = maximumTTL
        self.defaultTTL = defaultTTL
        self.refreshFraction = refreshFraction
        self.refreshJitterFraction = refreshJitterFraction
        self.staleFor = staleFor
        self.minimumRefetchInterval = minimumRefetchInterval
        self.retryInitialDelay = retryInitialDelay
        self.retryMaximumDelay = retryMaximumDelay
        self.followerWait = followerWait
        self.followerPollInterval = followerPollInterval
        self.fetch = fetch
    }
}
