import PortcullisEdgeAuth
import CoreMetrics
import Dispatch
import PortcullisAuth
import PortcullisCore
import PortcullisIO
import PortcullisKeys
import PortcullisMetrics
import PortcullisProxy
import PortcullisRateLimit
import PortcullisRedis
import PortcullisStore
import Prometheus

/// Everything `GET /metrics` shows, in the Prometheus text format, through
/// swift-metrics handles backed by one swift-prometheus registry.
///
/// Hot counters (requests, auth decisions, revocation checks) are plain
/// per-loop integers that a scrape reads on each loop and adds to the
/// Prometheus counters as deltas; the verified-token cache counts under the
/// shard lock its lookup takes anyway; key counters live on the key
/// manager's queue. Only the upstream latency histogram is recorded on the
/// request path. The metric names and labels are listed in `help` below and
/// in the README.
public final class GatewayMetrics: Sendable {
    static let help: [String: String] = [
        "portcullis_requests_total": "Requests answered by the gateway listeners, by route (host + path prefix; \"unmatched\" when no route matched) and status code.",
        "portcullis_requests_by_protocol_total": "Requests answered by the gateway listeners, by the protocol they came on (http/1.0, http/1.1, h2, h2c).",
        "portcullis_upstream_unexpected_bytes_total": "Upstream connections closed because the upstream sent bytes no request asked for (past a response's framing, a body after HEAD, 204 or 304, a response while idle); never reused.",
        "portcullis_http2_refused_streams_total": "HTTP/2 streams refused with RST_STREAM REFUSED_STREAM because the client opened more than SETTINGS_MAX_CONCURRENT_STREAMS at once (the connection goes on).",
        "portcullis_exchange_out_of_phase_events_total": "Events a request's exchange ignored because its phase did not expect them (a late upstream read after the client left); anything but a few is a bug to report.",
        "portcullis_http2_abuse_total": "HTTP/2 connections ended with GOAWAY ENHANCE_YOUR_CALM, by what the client did (rapid_reset, continuation_flood, oversized_headers, settings_flood, ping_flood, priority_flood, window_update_flood, empty_data_flood, protocol_errors, outbound_flood, stalled_window).",
        "portcullis_upstream_response_seconds": "Time from handing a request to an upstream pool to receiving the response head, by upstream.",
        "portcullis_upstream_connections": "Upstream connections now, by upstream and state (open: every connection, in use or idle; idle: the idle ones among them).",
        "portcullis_upstream_connections_limit": "The most connections an upstream's pool opens (max_connections), by upstream: the limit, apart from the usage.",
        "portcullis_connections": "Client connections now, by listener address and protocol (handshake: TLS not done yet, http1, h2: HTTP/2 and h2c, websocket).",
        "portcullis_tls_handshake_failures_total": "Client TLS handshakes that did not complete, by listener address and reason (plaintext_http, protocol_version, no_shared_cipher, no_application_protocol, client_certificate, certificate_rejected: the client refused the gateway's certificate, timeout, closed, empty: closed without a byte, as a TCP health check, other).",
        "portcullis_upstream_waiting_requests": "Requests queued for an upstream connection now.",
        "portcullis_upstream_pool_exhausted_total": "Requests answered 503 because the upstream's connections and queue were full.",
        "portcullis_auth_decisions_total": "Credential decisions on protected routes, by provider (\"none\" when none was selected) and outcome (verified, no_credential, store_unavailable, or the refusal reason).",
        "portcullis_revocation_checks_total": "Revocation checks on verified credentials, by result.",
        "portcullis_verification_cache_lookups_total": "Verified-token cache lookups, by result (hit, miss).",
        "portcullis_verification_cache_evictions_total": "Verified-token cache entries evicted to make room.",
        "portcullis_verification_cache_entries": "Verified-token cache entries held now.",
        "portcullis_key_fetches_total": "Signing-key document fetches, by provider and result (ok, error).",
        "portcullis_key_shared_cache_loads_total": "Signing-key documents taken from the shared cache instead of fetching, by provider.",
        "portcullis_key_unknown_kid_refetches_total": "Refetches asked for by tokens naming an unknown kid, by provider and result (started, coalesced, throttled, followed: another instance fetched).",
        "portcullis_key_changes_total": "Key installs that changed a provider's keys (each drops its cached verifications).",
        "portcullis_keys_health": "1 for the provider's current key state (pending, fresh, stale, unavailable), 0 for the others.",
        "portcullis_keys_age_seconds": "Seconds since the provider's keys in use were fetched (or loaded from the shared cache); none for inline keys.",
        "portcullis_store_health": "1 for the revocation store's current state (ok, degraded, unavailable), 0 for the others.",
        "portcullis_trace_spans_total": "Request spans with tracing on, by result (exported to the collector; dropped: the loop's queue was full; failed: the collector did not take them).",
        "portcullis_config_generation": "The configuration generation serving: 1 at start, one more per applied reload.",
        "portcullis_sessions_total": "Session endpoint events (sessions:), by event: created, refreshed, refresh_within_grace, reuse_detected (the session was ended), refresh_expired, refresh_unknown, refresh_invalid, refresh_revoked, refresh_unavailable (the store could not be asked; nothing rotated), logged_out, logged_out_other_credential (a logout with a token the gateway did not issue: that token revoked), ended_by_user, store_failed.",
        "portcullis_rate_limit_decisions_total": "Requests counted by a rate_limits rule, by rule and result (allowed; limited: answered 429; unavailable: the shared store did not answer and on_unavailable applied).",
        "portcullis_config_reloads_total": "Configuration reloads (SIGHUP, POST /reload, portcullis reload), by result (applied, refused: the previous configuration kept serving).",
        "portcullis_config_info": "1, labelled with the SHA-256 of the configuration file serving now (config_sha256).",
        "portcullis_build_info": "1, labelled with what this binary is (version, commit, build_date) and the OpenSSL, nghttp2 and hiredis it runs with.",
        "portcullis_scrape_duration_seconds": "Time the previous scrape took to collect from every loop and component.",
    ]

    public let registry: PrometheusCollectorRegistry
    /// The factory the proxy's latency timers are made with.
    let factory: DocumentedPrometheusFactory
    public let auth: AuthCounters
    private let loops: [EventLoop]
    private let sources: LockedValue<Sources>
    /// Counter totals already added to Prometheus, by series.
    private let published = LockedValue<[SeriesKey: (counter: CoreMetrics.Counter, total: Int)]>([:])
    private let gauges = LockedValue<[SeriesKey: Meter]>([:])

    struct Sources {
        var proxy: ProxyServer?
        var verifier: CredentialVerifier?
        var keys: KeyManager?
        var storeHealth: (@Sendable () -> StoreHealth)?
        var generation: UInt64 = 1
        var reloadsApplied = 0
        var reloadsRefused = 0
        var sha256 = ""
        /// Session endpoint events by name (nil: `sessions:` is off).
        var sessionEvents: (@Sendable () -> [String: Int])?
        var rateLimits: (@Sendable () -> [String: EmbeddedRateLimitStore.Counts])?
        /// The certificates the TLS listeners serve now: listener, file, expiry.
        var certificates: (@Sendable () -> [(listener: String, file: String, notAfter: Double)])?
    }

    /// The served certificates to publish (the runtime's, following reloads).
    func attach(certificates: @escaping @Sendable () -> [(listener: String, file: String, notAfter: Double)]) {
        sources.withLock { $0.certificates = certificates }
    }

    /// The rate-limit decisions by rule to publish (the store outlives reloads).
    func attach(rateLimits: @escaping @Sendable () -> [String: EmbeddedRateLimitStore.Counts]) {
        sources.withLock { $0.rateLimits = rateLimits }
    }

    /// The session counters to publish (kept across reloads by the runtime).
    func attach(sessionEvents: (@Sendable () -> [String: Int])?) {
        sources.withLock { $0.sessionEvents = sessionEvents }
    }

    struct SeriesKey: Hashable {
        let name: String
        let labels: [String]
    }

    public init(loops: [EventLoop], providers: [String]) {
        registry = PrometheusCollectorRegistry()
        factory = DocumentedPrometheusFactory(
            registry: registry, help: Self.help,
            defaultDurationBuckets: [.microseconds(250), .microseconds(500), .milliseconds(1), .microseconds(2500),
                                     .milliseconds(5), .milliseconds(10), .milliseconds(25), .milliseconds(50),
                                     .milliseconds(100), .milliseconds(250), .milliseconds(500), .seconds(1),
                                     .microseconds(2_500_000), .seconds(5), .seconds(10)])
        auth = AuthCounters(loopCount: loops.count, providers: providers)
        self.loops = loops
        sources = LockedValue(Sources())
    }

    /// The swift-metrics factory for components that record directly (the proxy's timers).
    public var metricsFactory: any MetricsFactory { factory }

    /// What serves after a start or a reload, and how many reloads were applied or refused.
    func configurationServed(generation: UInt64, sha256: String, applied: Int, refused: Int) {
        sources.withLock { sources in
            sources.generation = generation
            sources.sha256 = sha256
            sources.reloadsApplied = applied
            sources.reloadsRefused = refused
        }
    }

    /// A reload's verifier and key manager (nil: none now), and its store.
    func replace(verifier: CredentialVerifier?, keys: KeyManager?, storeHealth: @escaping @Sendable () -> StoreHealth) {
        sources.withLock { sources in
            sources.verifier = verifier
            sources.keys = keys
            sources.storeHealth = storeHealth
        }
    }

    func attach(proxy: ProxyServer? = nil, verifier: CredentialVerifier? = nil, keys: KeyManager? = nil,
                storeHealth: (@Sendable () -> StoreHealth)? = nil) {
        sources.withLock { sources in
            if let proxy { sources.proxy = proxy }
            if let verifier { sources.verifier = verifier }
            if let keys { sources.keys = keys }
            if let storeHealth { sources.storeHealth = storeHealth }
        }
    }

    /// Collects from every loop and component, then calls `completion` with
    /// the exposition text (on a global queue). Loops are visited with
    /// `execute`, never waited on; the key manager is read off the loops.
    public func render(completion: @escaping @Sendable (String) -> Void) {
        let started = MonotonicClock.nowNanoseconds()
        let sources = self.sources.withLock { $0 }
        let proxy = sources.proxy
        let afterProxy: @Sendable (ProxySnapshot?) -> Void = { [self] proxySnapshot in
            auth.snapshot(loops: loops) { [self] authSnapshot in
                DispatchQueue.global().async { [self] in
                    publish(proxySnapshot, authSnapshot, sources)
                    gauge("portcullis_scrape_duration_seconds", [],
                          Double(MonotonicClock.nowNanoseconds() &- started) / 1e9)
                    completion(registry.emitToString()
                               + PrometheusText.durations(proxySnapshot?.durations ?? [], bounds: ProxyMetrics.durationBuckets)
                               + PrometheusText.redisCommands(RedisCommandTimings.shared.snapshot(), bounds: RedisCommandTimings.buckets)
                               + PrometheusText.certificates(sources.certificates?() ?? []) + PrometheusText.process())
                }
            }
        }
        if let proxy { proxy.snapshot { afterProxy($0) } } else { afterProxy(nil) }
    }

    private func publish(_ proxy: ProxySnapshot?, _ auth: AuthCounters.Snapshot, _ sources: Sources) {
        if let proxy {
            for row in proxy.requests {
                counter("portcullis_requests_total", [("route", row.route ?? "unmatched"), ("code", String(row.status))], row.count)
            }
            for row in proxy.protocols {
                counter("portcullis_requests_by_protocol_total", [("protocol", row.name)], row.count)
            }
            for row in proxy.http2Abuse {
                counter("portcullis_http2_abuse_total", [("kind", row.kind)], row.count)
            }
            counter("portcullis_exchange_out_of_phase_events_total", [], proxy.outOfPhaseEvents)
            if let tracer = sources.proxy?.tracer {
                let totals = tracer.totals
                counter("portcullis_trace_spans_total", [("result", "exported")], totals.exported)
                counter("portcullis_trace_spans_total", [("result", "dropped")], totals.dropped)
                counter("portcullis_trace_spans_total", [("result", "failed")], totals.failed)
            }
            counter("portcullis_http2_refused_streams_total", [], proxy.http2RefusedStreams)
            var seen = Set<SeriesKey>()
            for row in proxy.connections {
                let labels = [("listener", row.listener), ("protocol", row.protocol)]
                seen.insert(SeriesKey(name: "portcullis_connections", labels: labels.flatMap { [$0.0, $0.1] }))
                gauge("portcullis_connections", labels, Double(row.count))
            }
            // A listener a reload removed (its last connection gone): 0, not its last value.
            for (key, meter) in gauges.withLock({ $0 }) where key.name == "portcullis_connections" && !seen.contains(key) {
                meter.set(0.0)
            }
            for row in proxy.tlsHandshakeFailures {
                counter("portcullis_tls_handshake_failures_total", [("listener", row.listener), ("reason", row.reason)], row.count)
            }
            for pool in proxy.pools {
                gauge("portcullis_upstream_connections", [("upstream", pool.upstream), ("state", "open")], Double(pool.open))
                gauge("portcullis_upstream_connections", [("upstream", pool.upstream), ("state", "idle")], Double(pool.idle))
                gauge("portcullis_upstream_connections_limit", [("upstream", pool.upstream)], Double(pool.maxConnections))
                gauge("portcullis_upstream_waiting_requests", [("upstream", pool.upstream)], Double(pool.waiting))
                counter("portcullis_upstream_pool_exhausted_total", [("upstream", pool.upstream)], pool.exhausted)
                counter("portcullis_upstream_unexpected_bytes_total", [("upstream", pool.upstream)], pool.unexpectedBytes)
            }
        }
        for row in auth.decisions {
            counter("portcullis_auth_decisions_total", [("provider", row.provider), ("outcome", row.outcome)], row.count)
        }
        for row in auth.revocationChecks {
            counter("portcullis_revocation_checks_total", [("result", row.result)], row.count)
        }
        if let verifier = sources.verifier {
            let cache = verifier.cacheStatistics()
            counter("portcullis_verification_cache_lookups_total", [("result", "hit")], cache.hits)
            counter("portcullis_verification_cache_lookups_total", [("result", "miss")], cache.misses)
            counter("portcullis_verification_cache_evictions_total", [], cache.evictions)
            gauge("portcullis_verification_cache_entries", [], Double(cache.entries))
        }
        if let keys = sources.keys {
            for status in keys.status() {
                let p = status.provider, c = status.counters
                counter("portcullis_key_fetches_total", [("provider", p), ("result", "ok")], c.fetchSuccesses)
                counter("portcullis_key_fetches_total", [("provider", p), ("result", "error")], c.fetchFailures)
                counter("portcullis_key_shared_cache_loads_total", [("provider", p)], c.sharedCacheLoads)
                counter("portcullis_key_unknown_kid_refetches_total", [("provider", p), ("result", "started")],
                        c.unknownKeyRefetches - c.refetchesCoalesced - c.refetchesThrottled - c.refetchesFollowed)
                counter("portcullis_key_unknown_kid_refetches_total", [("provider", p), ("result", "coalesced")], c.refetchesCoalesced)
                counter("portcullis_key_unknown_kid_refetches_total", [("provider", p), ("result", "throttled")], c.refetchesThrottled)
                counter("portcullis_key_unknown_kid_refetches_total", [("provider", p), ("result", "followed")], c.refetchesFollowed)
                counter("portcullis_key_changes_total", [("provider", p)], c.keyChanges)
                for health in ["pending", "fresh", "stale", "unavailable"] {
                    gauge("portcullis_keys_health", [("provider", p), ("state", health)], status.health.rawValue == health ? 1 : 0)
                }
                // How old the keys in use are (fetched, or taken from the shared cache): alert
                // when a provider's keys stop being refreshed. Inline keys have none.
                if let fetchedAt = status.fetchedAt {
                    gauge("portcullis_keys_age_seconds", [("provider", p)], max(0, WallClock.nowSeconds() - fetchedAt))
                }
            }
        }
        if let rateLimits = sources.rateLimits?() {
            for (rule, counts) in rateLimits.sorted(by: { $0.key < $1.key }) {
                counter("portcullis_rate_limit_decisions_total", [("rule", rule), ("result", "allowed")], counts.allowed)
                counter("portcullis_rate_limit_decisions_total", [("rule", rule), ("result", "limited")], counts.limited)
                if counts.unavailable > 0 {
                    counter("portcullis_rate_limit_decisions_total", [("rule", rule), ("result", "unavailable")], counts.unavailable)
                }
            }
        }
        if let events = sources.sessionEvents?() {
            for (event, count) in events.sorted(by: { $0.key < $1.key }) {
                counter("portcullis_sessions_total", [("event", event)], count)
            }
        }
        gauge("portcullis_config_generation", [], Double(sources.generation))
        counter("portcullis_config_reloads_total", [("result", "applied")], sources.reloadsApplied)
        counter("portcullis_config_reloads_total", [("result", "refused")], sources.reloadsRefused)
        for (key, meter) in gauges.withLock({ $0 }) where key.name == "portcullis_config_info" && key.labels.last != sources.sha256 {
            meter.set(0.0)
        }
        if !sources.sha256.isEmpty { gauge("portcullis_config_info", [("config_sha256", sources.sha256)], 1) }
        gauge("portcullis_build_info", BuildInfo.fields, 1)
        if let storeHealth = sources.storeHealth {
            let state: String
            switch storeHealth() {
            case .ok: state = "ok"
            case .degraded: state = "degraded"
            case .unavailable: state = "unavailable"
            }
            for name in ["ok", "degraded", "unavailable"] {
                gauge("portcullis_store_health", [("state", name)], name == state ? 1 : 0)
            }
        }
    }

    /// Brings a Prometheus counter up to `total` (totals only grow; a smaller
    /// one, which cannot happen with these sources, is ignored).
    private func counter(_ name: String, _ labels: [(String, String)], _ total: Int) {
        let key = SeriesKey(name: name, labels: labels.flatMap { [$0.0, $0.1] })
        published.withLock { published in
            if let entry = published[key] {
                if total > entry.total {
                    entry.counter.increment(by: total - entry.total)
                    published[key] = (entry.counter, total)
                }
            } else {
                let counter = CoreMetrics.Counter(label: name, dimensions: labels, factory: factory)
                if total > 0 { counter.increment(by: total) }
                published[key] = (counter, total)
            }
        }
    }

    private func gauge(_ name: String, _ labels: [(String, String)], _ value: Double) {
        let key = SeriesKey(name: name, labels: labels.flatMap { [$0.0, $0.1] })
        let meter = gauges.withLock { gauges in
            if let meter = gauges[key] { return meter }
            let meter = Meter(label: name, dimensions: labels, factory: factory)
            gauges[key] = meter
            return meter
        }
        meter.set(value)
    }
}
