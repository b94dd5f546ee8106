import Dispatch
import Logging
import PortcullisAuth
import PortcullisCore
import PortcullisIO
import PortcullisOutbound

/// Keeps the signing keys of every JWKS / PEM provider current in a
/// `CredentialVerifier`, sharing fetched documents with other instances
/// through a `SharedKeyCache`.
///
/// - At `start`, each URL provider's document is taken from the shared cache
///   when it is there and unexpired; otherwise it is fetched and stored.
/// - The TTL is `Cache-Control: max-age` minus `Age` (or `Expires`), clamped
///   to the configured floor and ceiling. A refresh starts at
///   `refreshFraction` of the TTL plus jitter, after checking whether another
///   instance already stored a newer document.
/// - A failed fetch is retried with capped exponential backoff; the last good
///   keys are served for `staleFor` past expiry and then dropped.
/// - `refetchForUnknownKey` is single-flight per provider, at most once per
///   `minimumRefetchInterval`, and across instances only the one that wins
///   `SharedKeyCache.claimFetch` fetches; the others reload the cache.
///
/// Threading: all state lives on the private serial `queue`, which never
/// waits on I/O. Fetches run on `fetchLoop` (an event loop, never blocked).
/// `status()` and `counters()` read synchronously and must not be called on
/// `queue` (they are not: no callback of this type runs user code there except
/// `onEvent`, which must not call back synchronously).
public final class KeyManager: @unchecked Sendable {
    // @unchecked Sendable: every mutable member is touched only on `queue`.

    public let configuration: KeyManagerConfiguration
    let queue = DispatchQueue(label: "portcullis.keys.manager")
    let verifier: CredentialVerifier
    let cache: any SharedKeyCache
    let fetchLoop: EventLoop
    let client: HTTPGetClient
    let logger: Logger
    let onEvent: (@Sendable (KeyManagerEvent) -> Void)?

    let order: [String]
    let states: [String: ProviderKeyState]
    var started = false
    var stopped = false

    /// - Parameters:
    ///   - verifier: receives every key set through `updateKeys`.
    ///   - providers: the providers whose keys are kept here (hs256 and cookie providers have none).
    ///   - cache: shared with other instances (Redis); defaults to a private in-process one.
    ///   - fetchLoop: the event loop that runs key fetches.
    ///   - onEvent: state changes (keys installed, fetch failed, stale, dropped, recovered), called on the manager's queue.
    /// - Throws: on a provider unknown to the verifier, a duplicate, or inline keys that do not load.
    public init(verifier: CredentialVerifier, providers: [ManagedKeyProvider],
                cache: any SharedKeyCache = InProcessKeyCache(), fetchLoop: EventLoop,
                configuration: KeyManagerConfiguration = KeyManagerConfiguration(),
                logger: Logger = Logger(label: "portcullis.keys"),
                onEvent: (@Sendable (KeyManagerEvent) -> Void)? = nil) throws(KeyManagerConfigurationError) {
        let known = Set(verifier.providerNames)
        var states = [String: ProviderKeyState]()
        var order = [String]()
        for provider in providers {
            guard known.contains(provider.name) else { throw .unknownProvider(provider.name) }
            guard states[provider.name] == nil else { throw .duplicateProvider(provider.name) }
            var inline: KeySet?
            do {
                switch provider.source {
                case .url: inline = nil
                case .document(let bytes, let format): inline = try format.load(bytes)
                case .pemPublicKey(let pem): inline = try KeySet(pemPublicKey: pem)
                }
            } catch {
                throw .invalidInlineKeys(provider: provider.name, error)
            }
            states[provider.name] = ProviderKeyState(name: provider.name, source: provider.source, inlineKeys: inline)
            order.append(provider.name)
        }
        self.verifier = verifier
        self.cache = cache
        self.fetchLoop = fetchLoop
        self.configuration = configuration
        self.client = HTTPGetClient(options: configuration.fetch)
        self.logger = logger
        self.onEvent = onEvent
        self.states = states
        self.order = order
    }

    /// Installs inline keys and loads or fetches every URL provider's keys.
    /// `completion` runs (on the manager's queue) once every provider has
    /// keys or has had its first attempt fail; failures keep retrying.
    public func start(completion: (@Sendable () -> Void)? = nil) {
        queue.async { [self] in
            guard !started, !stopped else { completion?(); return }
            started = true
            let countdown = Countdown(order.count { states[$0]!.inlineKeys == nil }) { completion?() }
            for name in order {
                let state = states[name]!
                if let keys = state.inlineKeys {
                    installInline(state, keys)
                } else {
                    initialLoad(state) { countdown.tick() }
                }
            }
            countdown.tick(by: 0)
        }
    }

    /// Asks for a provider's keys again because a token named a `kid` that
    /// is not in them. Concurrent callers share one fetch; at most one
    /// refetch per provider per `minimumRefetchInterval` (else `.throttled`);
    /// when another instance holds the shared fetch claim this one reloads
    /// the shared cache instead of fetching. `completion` runs on `loop.queue`.
    public func refetchForUnknownKey(provider name: String, on loop: EventLoop,
                                     completion: @escaping @Sendable (RefetchOutcome) -> Void) {
        queue.async { [self] in
            let deliver: @Sendable (RefetchOutcome) -> Void = { outcome in loop.execute { completion(outcome) } }
            guard let state = states[name] else { deliver(.failed(.unknownProvider(name))); return }
            count(state, \.unknownKeyRefetches)
            guard state.remote != nil, !stopped else { deliver(.unchanged); return }
            if state.waiters != nil {
                count(state, \.refetchesCoalesced)
                state.waiters!.append(deliver)
                return
            }
            let now = MonotonicClock.nowNanoseconds()
            let interval = UInt64(configuration.minimumRefetchInterval * 1e9)
            if state.lastUnknownKeyRefetch != 0 && now &- state.lastUnknownKeyRefetch < interval {
                count(state, \.refetchesThrottled)
                deliver(.throttled)
                return
            }
            state.lastUnknownKeyRefetch = now
            state.waiters = [deliver]
            cache.claimFetch(provider: name, interval: configuration.minimumRefetchInterval) { [self] claimed in
                queue.async { [self] in
                    if claimed {
                        startFetch(state)
                    } else {
                        count(state, \.refetchesFollowed)
                        followSharedCache(state, until: MonotonicClock.nowNanoseconds() &+ UInt64(configuration.followerWait * 1e9))
                    }
                }
            }
        }
    }

    /// Fetches a provider's keys now, ignoring the refetch interval and the
    /// shared claim (admin action, tests). `completion` runs on the manager's queue.
    public func refresh(provider name: String, completion: (@Sendable (RefetchOutcome) -> Void)? = nil) {
        queue.async { [self] in
            guard let state = states[name] else { completion?(.failed(.unknownProvider(name))); return }
            guard state.remote != nil, !stopped else { completion?(.unchanged); return }
            fetch(state) { completion?($0) }
        }
    }

    /// Per provider, in configuration order: kids, fetch and expiry times,
    /// health, last error and source (for `GET /keys`).
    public func status() -> [KeyProviderStatus] {
        dispatchPrecondition(condition: .notOnQueue(queue))
        return queue.sync { order.map { states[$0]!.status } }
    }

    /// Counters since start, summed over the providers, for metrics.
    public func counters() -> KeyManagerCounters {
        dispatchPrecondition(condition: .notOnQueue(queue))
        return queue.sync { states.values.reduce(into: KeyManagerCounters()) { $0.add($1.counters) } }
    }

    /// Counts an event in `state`'s counters (the totals are their sum).
    func count(_ state: ProviderKeyState, _ counter: WritableKeyPath<KeyManagerCounters, Int>) {
        state.counters[keyPath: counter] += 1
    }

    /// Cancels timers; fetches in flight finish but change nothing.
    public func shutdown() {
        dispatchPrecondition(condition: .notOnQueue(queue))
        queue.sync {
            stopped = true
            for state in states.values {
                state.timer?.cancel()
                state.timer = nil
            }
        }
    }
}

/// Calls `action` once `count` ticks have arrived. Used on `KeyManager.queue` only.
final class Countdown: @unchecked Sendable {
    // @unchecked Sendable: ticked only on `KeyManager.queue`.
    private var remaining: Int
    private var action: (() -> Void)?

    init(_ count: Int, action: @escaping () -> Void) {
        self.remaining = count
        self.action = action
    }

    func tick(by n: Int = 1) {
        remaining -= n
        if remaining <= 0, let action {
            self.action = nil
            action()
        }
    }
}
