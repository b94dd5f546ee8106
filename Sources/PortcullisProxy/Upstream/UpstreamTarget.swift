import Dispatch
import Logging
import PortcullisCore
import PortcullisIO
import PortcullisTLS

/// What every loop's pool for one upstream shares: its addresses, its TLS client
/// context and whether it is reachable.
///
/// - **Addresses.** An IP literal is fixed. A host name is resolved off the loops
///   (getaddrinfo on the resolver queue): at start, every `resolve_interval`, and
///   soon after a connect failure (at most once a second). Pools read the current
///   list when they open a connection (a lock per new connection, never per
///   request); each connection attempt starts at a rotating position and tries
///   every address in turn before the request fails.
/// - **TLS.** One `TLSClientContext` per upstream: verification against the system
///   store or `ca_file`, SNI and host-name checks, and the session ticket of the
///   last connection offered to the next (resumption).
/// - **Reachability** is logged once per change (connect, resolution or TLS
///   failure, then reachable again), whichever loop saw it.
///
/// Threading: any thread; mutable state under `lock`.
public final class UpstreamTarget: @unchecked Sendable {
    // @unchecked Sendable: mutable members only under `lock`.
    public let configuration: UpstreamConfiguration
    /// The TLS context new connections use; replaced whole when SIGHUP reloads the
    /// client certificate (connections already open keep theirs).
    public var tls: TLSClientContext? { lock.withLock { tlsContext } }
    private var tlsContext: TLSClientContext?
    private let lock = Lock()
    private var addresses: [SocketAddress]
    private var resolutionError: ResolutionError?
    private var rotation = 0
    private var failureReason: String?
    private var lastResolveStart = 0.0
    private var resolving = false
    private var timer: DispatchSourceTimer?
    private let logger: Logger?

    public init(configuration: UpstreamConfiguration, logger: Logger?) throws(TLSFileError) {
        self.configuration = configuration
        self.logger = logger
        tlsContext = configuration.url.secure ? try Self.makeTLSContext(configuration) : nil
        addresses = configuration.url.literal.map { [$0] } ?? []
    }

    deinit { timer?.cancel() }

    private static func makeTLSContext(_ configuration: UpstreamConfiguration) throws(TLSFileError) -> TLSClientContext {
        var certificate: TLSCertificate?
        if let pair = configuration.clientCertificate {
            certificate = try TLSCertificate.client(certificateFile: pair.certificate, keyFile: pair.key)
        }
        return try TLSClientContext(caFile: configuration.caFile, certificate: certificate)
    }

    /// SIGHUP: loads the client certificate (and trusted roots) again. New connections
    /// use the new ones; on failure the old context stays and the error names the file.
    /// Nothing to do (nil) for an upstream without a client certificate.
    public func reloadClientCertificate() throws(TLSFileError) -> String? {
        guard configuration.url.secure, let pair = configuration.clientCertificate else { return nil }
        let context = try Self.makeTLSContext(configuration)
        lock.withLock { tlsContext = context }
        return pair.certificate
    }

    /// Resolves a host name now (blocking: call before the loops serve) and then on
    /// a timer. Failure is not fatal: requests get 502 until a resolution succeeds.
    public func startResolving() {
        guard configuration.url.literal == nil else { return }
        apply(HostResolver.lookup(configuration.url.host, port: configuration.url.port))
        let timer = DispatchSource.makeTimerSource(queue: .global())
        let interval = configuration.resolveInterval
        timer.schedule(deadline: .now() + interval, repeating: interval, leeway: .milliseconds(200))
        timer.setEventHandler { [weak self] in self?.resolveSoon(force: true) }
        timer.resume()
        lock.withLock { self.timer = timer }
    }

    /// A reload removed this upstream: no more resolving.
    public func stopResolving() {
        let timer = lock.withLock { () -> DispatchSourceTimer? in
            defer { self.timer = nil }
            return self.timer
        }
        timer?.cancel()
    }

    /// The addresses to try for one new connection, rotated so connections spread
    /// over every address; empty with the reason when none is known.
    func addressesForConnection() -> ([SocketAddress], ResolutionError?) {
        lock.withLock {
            guard !addresses.isEmpty else { return ([], resolutionError) }
            rotation &+= 1
            let start = rotation % addresses.count
            return (Array(addresses[start...] + addresses[..<start]), nil)
        }
    }

    /// Asks for a new resolution soon (after a connect failure); at most once a second.
    func resolveSoon(force: Bool = false) {
        guard configuration.url.literal == nil else { return }
        let now = MonotonicClock.nowNanoseconds()
        let start = lock.withLock { () -> Bool in
            if resolving || (!force && Double(now) / 1e9 - lastResolveStart < 1) { return false }
            resolving = true
            lastResolveStart = Double(now) / 1e9
            return true
        }
        guard start else { return }
        HostResolver.resolve(configuration.url.host, port: configuration.url.port) { [weak self] result in
            self?.apply(result)
        }
    }

    private func apply(_ result: Result<[SocketAddress], ResolutionError>) {
        lock.withLock {
            resolving = false
            switch result {
            case .success(let found):
                addresses = found
                resolutionError = nil
            case .failure(let error):
                // Keep the last good addresses: a DNS hiccup must not take the upstream down.
                resolutionError = error
            }
        }
        if case .failure(let error) = result { reportFailure(error.description) }
    }

    /// A connect, resolution or TLS failure: logged when the upstream was reachable.
    func reportFailure(_ reason: String) {
        let changed = lock.withLock { () -> Bool in
            defer { failureReason = reason }
            return failureReason == nil
        }
        if changed {
            logger?.warning("upstream unreachable", metadata: [
                "upstream": "\(configuration.name)", "url": "\(configuration.url)", "error": "\(reason)"])
        }
    }

    /// When the last line about unexpected bytes was logged (monotonic ns, under `lock`).
    private var lastUnexpectedLog: UInt64 = 0

    /// A connection was closed for bytes past its response's framing: logged at most once a
    /// second (a misbehaving upstream cannot flood the log); every one is counted by the pool.
    func reportUnexpectedBytes(_ count: Int, reason: String, now: UInt64) {
        let log = lock.withLock { () -> Bool in
            guard lastUnexpectedLog == 0 || now &- lastUnexpectedLog >= 1_000_000_000 else { return false }
            lastUnexpectedLog = now
            return true
        }
        if log {
            logger?.warning("upstream sent bytes no request asked for; connection closed, not reused", metadata: [
                "upstream": "\(configuration.name)", "what": "\(reason)", "bytes": "\(count)"])
        }
    }

    /// A connection worked: logged when the upstream was unreachable.
    func reportSuccess() {
        let changed = lock.withLock { () -> Bool in
            defer { failureReason = nil }
            return failureReason != nil
        }
        if changed { logger?.info("upstream reachable again", metadata: ["upstream": "\(configuration.name)"]) }
    }

    /// The last failure, nil while reachable (metrics, tests).
    public var lastFailure: String? { lock.withLock { failureReason } }

    // MARK: Connection budget (totals across every loop's pool)

    /// Connections open or opening for this upstream, all loops together.
    private var slotsInUse = 0
    /// Of those, idle in some loop's pool: each is a slot a waiter gets as soon as its loop
    /// trims it (`trimIdle`), so a waiter it will serve takes no `max_pending` place.
    private var idleConnections = 0
    /// One entry per request waiting for a connection: its loop, oldest first.
    private var waiting: [Int] = []
    /// Hands a freed slot to a loop's pool (set by `ProxyServer`): called with the
    /// loop index, from any queue; the pool then opens a connection for its oldest waiter.
    var grantSlot: (@Sendable (Int) -> Void)?
    /// Asks every loop but one to close an idle connection while requests wait elsewhere.
    var trimIdle: (@Sendable (_ except: Int) -> Void)?

    /// A slot for a new connection, if the total allows one.
    func claimSlot() -> Bool {
        lock.withLock {
            guard slotsInUse < configuration.maxConnections else { return false }
            slotsInUse += 1
            return true
        }
    }

    /// A place in the (global) queue for a request on `loop`, if `max_pending` allows. The
    /// queue is as long as `max_pending` plus the idle connections on other loops: each of
    /// those is closed for the oldest waiter at once (`trimIdle`), so the request it serves
    /// never keeps another from its place (which 503s would otherwise depend on the loop a
    /// client landed on, whenever the last connection idled on another loop).
    func claimWaiter(loop: Int) -> Bool {
        let queued = lock.withLock { () -> Bool in
            guard waiting.count < configuration.maxPending + idleConnections else { return false }
            waiting.append(loop)
            return true
        }
        if queued { trimIdle?(loop) }  // idle connections on other loops hold the slots
        return queued
    }

    /// A pool's idle list grew or shrank by `delta` (exact, under the lock: `claimWaiter`
    /// counts on it; an uncontended lock, two per reused connection).
    func idleChanged(by delta: Int) {
        lock.withLock { idleConnections += delta }
    }

    /// A pool is about to reuse one of its idle connections: allowed (and counted) unless
    /// requests wait, which are older and get the slot instead.
    func takeIdle() -> Bool {
        lock.withLock {
            guard waiting.isEmpty else { return false }
            idleConnections -= 1
            return true
        }
    }

    /// A waiter on `loop` left the queue (served, timed out, gone).
    func leaveQueue(loop: Int) {
        lock.withLock { if let i = waiting.firstIndex(of: loop) { waiting.remove(at: i) } }
    }

    var hasWaiters: Bool { lock.withLock { !waiting.isEmpty } }

    /// Where the oldest waiting request is, for a loop about to reuse a connection.
    enum OldestWaiter { case none, here, elsewhere }

    /// The oldest waiter anywhere decides who gets a freed connection (FIFO across
    /// loops): when it is on `loop`, its entry is taken here (the loop serves it).
    func takeOldestWaiter(ifOn loop: Int) -> OldestWaiter {
        lock.withLock {
            guard let first = waiting.first else { return .none }
            guard first == loop else { return .elsewhere }
            waiting.removeFirst()
            return .here
        }
    }

    /// A connection's slot is free: it passes straight to the loop of the oldest waiter
    /// (which is told through `grantSlot`), or back to the budget.
    func releaseSlot() {
        let next = lock.withLock { () -> Int? in
            if waiting.isEmpty {
                slotsInUse -= 1
                return nil
            }
            return waiting.removeFirst()  // the slot stays in use, now for that loop
        }
        if let next { grantSlot?(next) }
    }

    /// Slots in use now (tests, metrics).
    public var connectionsInUse: Int { lock.withLock { slotsInUse } }
}
