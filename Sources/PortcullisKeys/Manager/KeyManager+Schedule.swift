import Dispatch
import Logging
import PortcullisAuth
import PortcullisCore

// Timers, health and backoff. Everything here runs on `queue`.
extension KeyManager {
    /// Plans the next refresh at `refreshFraction` of the TTL plus jitter.
    func scheduleRefresh(_ state: ProviderKeyState) {
        guard let document = state.document else { return }
        let ttl = max(0, document.expiresAt - document.fetchedAt)
        let jitter = ttl * configuration.refreshJitterFraction
        let at = document.fetchedAt + ttl * configuration.refreshFraction + (jitter > 0 ? Double.random(in: 0...jitter) : 0)
        state.nextFetchAt = min(at, document.expiresAt)
        rearmTimer(state)
    }

    /// After an operation that did not plan what comes next (a wait on
    /// another instance that saw nothing new), plans the regular refresh, or a
    /// retry when there are no keys.
    func ensureNextFetchPlanned(_ state: ProviderKeyState) {
        guard state.nextFetchAt == nil, state.remote != nil, !stopped else { return }
        if state.document != nil {
            scheduleRefresh(state)
        } else {
            state.nextFetchAt = WallClock.nowSeconds() + retryDelay(failures: max(1, state.consecutiveFailures))
            rearmTimer(state)
        }
    }

    /// 1, 2, 4, ... × `retryInitialDelay`, capped, plus up to 20 % jitter.
    func retryDelay(failures: Int) -> Double {
        let base = configuration.retryInitialDelay * Double(1 << min(max(failures - 1, 0), 20))
        let capped = min(base, configuration.retryMaximumDelay)
        return capped * Double.random(in: 1...1.2)
    }

    /// One timer per provider, set for the earliest of: the next fetch, the
    /// moment the keys go stale (to report it), the moment they are dropped.
    func rearmTimer(_ state: ProviderKeyState) {
        guard !stopped else { return }
        let now = WallClock.nowSeconds()
        var wake = state.nextFetchAt ?? .infinity
        if let document = state.document {
            if document.expiresAt > now { wake = min(wake, document.expiresAt) }
            let drop = document.expiresAt + configuration.staleFor
            if drop > now { wake = min(wake, drop) }
        }
        state.timer?.cancel()
        state.timer = nil
        guard wake.isFinite else { return }
        let timer = DispatchSource.makeTimerSource(queue: queue)
        timer.schedule(deadline: .now() + max(0, wake - now), leeway: .milliseconds(10))
        timer.setEventHandler { [weak self, weak state] in
            guard let self, let state else { return }
            self.timerFired(state)
        }
        timer.resume()
        state.timer = timer
    }

    private func timerFired(_ state: ProviderKeyState) {
        guard !stopped else { return }
        state.timer?.cancel()
        state.timer = nil
        updateHealth(state)
        if let next = state.nextFetchAt, next <= WallClock.nowSeconds() + 0.005 {
            state.nextFetchAt = nil
            // With a fetch already in flight, its completion plans the next one.
            if state.waiters == nil { refreshDue(state) }
        }
        rearmTimer(state)
    }

    /// Recomputes fresh / stale / unavailable; drops the keys past `staleFor`.
    func updateHealth(_ state: ProviderKeyState) {
        let now = WallClock.nowSeconds()
        let old = state.health
        var new: KeyHealth
        if state.inlineKeys != nil {
            new = .fresh
        } else if let document = state.document {
            if now < document.expiresAt {
                new = .fresh
            } else if now < document.expiresAt + configuration.staleFor {
                new = .stale
            } else {
                verifier.updateKeys(provider: state.name, keys: .empty)
                state.document = nil
                state.kids = []
                state.origin = nil
                count(state, \.keyDrops)
                new = .unavailable
                logger.error("signing keys dropped: the key host has failed for longer than stale_for", metadata: [
                    "provider": "\(state.name)", "error": "\(state.lastError.map { "\($0)" } ?? "none")",
                ])
                emit(.keysDropped(provider: state.name))
            }
        } else {
            new = old == .unavailable ? .unavailable : .pending
        }
        guard new != old else { return }
        state.health = new
        switch new {
        case .stale:
            count(state, \.staleTransitions)
            let expiredAt = state.document!.expiresAt
            logger.warning("serving stale signing keys", metadata: [
                "provider": "\(state.name)", "expired_at": "\(expiredAt)",
                "until": "\(expiredAt + configuration.staleFor)",
            ])
            emit(.servingStale(provider: state.name, expiredAt: expiredAt, until: expiredAt + configuration.staleFor))
        case .fresh where old == .stale || old == .unavailable:
            logger.info("signing keys recovered", metadata: ["provider": "\(state.name)"])
            emit(.recovered(provider: state.name))
        default:
            break
        }
    }

    func emit(_ event: KeyManagerEvent) {
        onEvent?(event)
    }
}
