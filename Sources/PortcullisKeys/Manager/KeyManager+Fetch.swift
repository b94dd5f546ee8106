import Dispatch
import Logging
import PortcullisAuth
import PortcullisCore
import PortcullisOutbound

// Loading, fetching and installing documents. Everything here runs on `queue`.
extension KeyManager {
    func installInline(_ state: ProviderKeyState, _ keys: KeySet) {
        verifier.updateKeys(provider: state.name, keys: keys)
        state.kids = keys.keys.compactMap(\.keyID)
        state.origin = .inline
        state.health = .fresh
        emit(.keysInstalled(provider: state.name, kids: state.kids, origin: .inline, expiresAt: nil))
    }

    /// Start-up: the shared cache first; a fetch only when it has nothing fresh.
    func initialLoad(_ state: ProviderKeyState, done: @escaping @Sendable () -> Void) {
        cache.load(provider: state.name) { [self] cached in
            queue.async { [self] in
                let now = WallClock.nowSeconds()
                if let cached, cached.expiresAt + configuration.staleFor > now,
                   case .success = install(state, cached, origin: .sharedCache) {
                    count(state, \.sharedCacheLoads)
                    if cached.expiresAt > now {
                        scheduleRefresh(state)
                        done()
                        return
                    }
                    // Stale in the cache too: serve it while fetching.
                }
                fetch(state) { _ in done() }
            }
        }
    }

    /// Single-flight fetch: joins the one in flight, if any.
    func fetch(_ state: ProviderKeyState, completion: @escaping @Sendable (RefetchOutcome) -> Void) {
        if state.waiters != nil {
            state.waiters!.append(completion)
            return
        }
        state.waiters = [completion]
        startFetch(state)
    }

    /// Starts the GET; `state.waiters` must already be set (non-nil).
    func startFetch(_ state: ProviderKeyState) {
        guard let (url, format) = state.remote else { return }
        count(state, \.fetches)
        client.get(url, on: fetchLoop) { [self] result in
            queue.async { [self] in fetchCompleted(state, url: url, format: format, result) }
        }
    }

    private func fetchCompleted(_ state: ProviderKeyState, url: String, format: KeyDocumentFormat,
                                _ result: Result<HTTPFetchResponse, HTTPFetchError>) {
        guard !stopped else { resolve(state, .unchanged); return }
        let response: HTTPFetchResponse
        switch result {
        case .failure(let error):
            failed(state, .transport(error))
            return
        case .success(let r) where r.status != 200:
            failed(state, .httpStatus(r.status, url: url))
            return
        case .success(let r):
            response = r
        }
        let now = WallClock.nowSeconds()
        let ttl = CacheLifetime.ttl(cacheControl: response.cacheControl, age: response.age, expires: response.expires,
                                    now: now, configuration: configuration)
        // Typed by what it holds, not by where it came from: a mirror, an egress cache or a
        // local key host may serve Google's certificate map at any URL.
        let document = CachedKeyDocument(body: response.body, format: KeyDocumentFormat.detect(response.body),
                                         fetchedAt: now, expiresAt: now + ttl)
        switch install(state, document, origin: .fetched) {
        case .failure(let error):
            failed(state, error)
        case .success(let changed):
            cache.store(provider: state.name, document: document)
            count(state, \.fetchSuccesses)
            succeeded(state)
            resolve(state, changed ? .changed : .unchanged)
        }
    }

    /// Parses `document` and, when its bytes differ from the current ones,
    /// hands the keys to the verifier (which drops the provider's cached
    /// verifications). Returns whether the keys changed.
    func install(_ state: ProviderKeyState, _ document: CachedKeyDocument, origin: KeyOrigin) -> Result<Bool, KeyRefreshError> {
        let keys: KeySet
        do {
            keys = try document.format.load(document.body)
        } catch {
            return .failure(.invalidDocument(url: state.source.displayName, error))
        }
        let changed = state.document?.body != document.body
        state.document = document
        state.origin = origin
        if changed {
            verifier.updateKeys(provider: state.name, keys: keys)
            state.kids = keys.keys.compactMap(\.keyID)
            count(state, \.keyChanges)
            logger.info("signing keys installed", metadata: [
                "provider": "\(state.name)", "kids": "\(state.kids.joined(separator: ","))",
                "origin": "\(origin.rawValue)", "expires_at": "\(document.expiresAt)",
            ])
            emit(.keysInstalled(provider: state.name, kids: state.kids, origin: origin, expiresAt: document.expiresAt))
        }
        updateHealth(state)
        return .success(changed)
    }

    func succeeded(_ state: ProviderKeyState) {
        state.consecutiveFailures = 0
        state.lastError = nil
        scheduleRefresh(state)
    }

    func failed(_ state: ProviderKeyState, _ error: KeyRefreshError) {
        count(state, \.fetchFailures)
        state.consecutiveFailures += 1
        state.lastError = error
        let delay = retryDelay(failures: state.consecutiveFailures)
        state.nextFetchAt = WallClock.nowSeconds() + delay
        logger.warning("signing key fetch failed", metadata: [
            "provider": "\(state.name)", "error": "\(error)",
            "consecutive_failures": "\(state.consecutiveFailures)", "retry_in": "\(delay)",
        ])
        emit(.fetchFailed(provider: state.name, error: error, consecutiveFailures: state.consecutiveFailures, retryIn: delay))
        updateHealth(state)
        rearmTimer(state)
        resolve(state, .failed(error))
    }

    /// Answers everyone waiting on the provider's fetch.
    func resolve(_ state: ProviderKeyState, _ outcome: RefetchOutcome) {
        let waiters = state.waiters ?? []
        state.waiters = nil
        ensureNextFetchPlanned(state)
        for waiter in waiters { waiter(outcome) }
    }

    /// Another instance holds the fetch claim: watch the shared cache for a
    /// document newer than ours until `until` (monotonic ns).
    func followSharedCache(_ state: ProviderKeyState, until: UInt64) {
        cache.load(provider: state.name) { [self] cached in
            queue.async { [self] in
                guard !stopped else { resolve(state, .unchanged); return }
                if let cached,
                   cached.fetchedAt > (state.document?.fetchedAt ?? -.infinity),
                   case .success(let changed) = install(state, cached, origin: .sharedCache) {
                    count(state, \.sharedCacheLoads)
                    succeeded(state)
                    resolve(state, changed ? .changed : .unchanged)
                    return
                }
                guard MonotonicClock.nowNanoseconds() < until else {
                    resolve(state, .unchanged)
                    return
                }
                queue.asyncAfter(deadline: .now() + configuration.followerPollInterval) { [self] in
                    followSharedCache(state, until: until)
                }
            }
        }
    }

    /// A planned refresh or retry: take a newer document another instance
    /// stored if it is not itself due, else fetch.
    func refreshDue(_ state: ProviderKeyState) {
        guard state.waiters == nil, !stopped else { return }
        state.waiters = []
        cache.load(provider: state.name) { [self] cached in
            queue.async { [self] in
                let now = WallClock.nowSeconds()
                if let cached,
                   cached.fetchedAt > (state.document?.fetchedAt ?? -.infinity),
                   now < cached.fetchedAt + (cached.expiresAt - cached.fetchedAt) * configuration.refreshFraction,
                   case .success(let changed) = install(state, cached, origin: .sharedCache) {
                    count(state, \.sharedCacheLoads)
                    succeeded(state)
                    resolve(state, changed ? .changed : .unchanged)
                    return
                }
                startFetch(state)
            }
        }
    }
}
