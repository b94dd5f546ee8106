import PortcullisSessions
import PortcullisEdgeAuth
import Dispatch
import Foundation
import Logging
import PortcullisAuth
import PortcullisCore
import PortcullisStore
import PortcullisIO
import PortcullisKeys
import PortcullisProxy
import PortcullisRedis
import PortcullisTLS

/// A running gateway and its reloads.
///
/// A reload (SIGHUP, `POST /reload` on the admin listener, `portcullis reload`) reads the
/// file again and runs the same checks as `check-config`; then it builds everything the new
/// file describes beside what serves (TLS contexts, upstream targets, listeners to add, the
/// verifier and its key manager, the authenticator, the store when its settings changed) and
/// only when all of it succeeded swaps it in, one loop at a time (`ProxyServer.reconfigure`).
/// A refused file changes nothing: the verdict names `FILE:LINE: KEY: REASON` and the old
/// configuration serves on. The number of loops is the one setting that cannot change in
/// place: a file that changes it is refused with that reason.
///
/// What carries over: an upstream whose settings did not change keeps its pools and their
/// keep-alive connections; a listener whose address stays keeps its socket (no connection is
/// refused) and its connections, which take the new configuration at their next request or
/// stream; the store is kept unless `store:` changed (an embedded store keeps its journal);
/// a provider whose key source did not change installs the keys it already had from the key
/// cache, so a reload fetches only the keys of new or changed providers, and the swap waits
/// (at most `keys.fetch_timeout`) for them so the new generation never starts without keys.
/// The verified-token cache starts empty in each generation (tokens are verified once more).
///
/// Reloads run one at a time on `queue`, never on a loop.
public final class GatewayRuntime: @unchecked Sendable {
    // @unchecked Sendable: `current` and the counts are behind `lock`; everything else is
    // immutable or used on `queue` only.

    /// What one generation runs with, besides the proxy's own state.
    struct Parts {
        var configuration: GatewayConfiguration
        var generation: UInt64 = 1
        var store: any RevocationStore
        var revocations: StoreRevocations
        var keys: SigningKeys?
        var verifier: CredentialVerifier?
        var assertionKeys: AssertionKeys?
        /// Per `listen` entry (nil: plain).
        var tlsEndpoints: [TLSServerEndpoint?]
        var accessLogFD: Int32?
    }

    let logger: Logger
    let group: EventLoopGroup
    let server: ProxyServer
    /// The admin handler exists also without an admin listener, so a reload can add one.
    let admin: AdminHandler
    let metrics: GatewayMetrics
    let startup: StartupReadiness
    /// Builds every generation, the first one included.
    let builder: GenerationBuilder
    /// Where a reload reads the configuration from (the file, or the demo's embedded text).
    let source: @Sendable () throws -> GatewayConfiguration
    let queue = DispatchQueue(label: "portcullis.reload")
    private let lock = Lock()
    private var current: Parts
    private var reloadsApplied = 0
    private var reloadsRefused = 0
    /// The certificate files as the serving generation loaded them (`certificate_check`);
    /// on the reload queue only, after `init`.
    private var certificates: CertificateFiles
    /// The session endpoints' service (nil without `sessions:`); its store outlives reloads.
    /// Written on the reload queue, read by the admin API: behind `lock`.
    private var sessions: SessionService?
    var currentSessions: SessionService? { lock.withLock { sessions } }
    /// `identity.assertion`'s JWKS on the admin listener (it follows reloads).
    let adminJWKS = ReloadableJWKS()

    var parts: Parts { lock.withLock { current } }
    public var configuration: GatewayConfiguration { parts.configuration }
    public var generation: UInt64 { parts.generation }
    /// The TLS listeners' endpoints now serving (tests).
    public var tlsEndpoints: [TLSServerEndpoint] { parts.tlsEndpoints.compactMap { $0 } }

    /// `workers: 0`: one loop per CPU the process may really use (`CPUBudget`: affinity and
    /// the cgroup quota, not only the CPUs online).
    static func loopCount(_ configuration: GatewayConfiguration) -> Int {
        configuration.workers == 0 ? CPUBudget.read().count : configuration.workers
    }

    /// Builds and starts everything `configuration` describes (see `Gateway.start`).
    init(_ configuration: GatewayConfiguration, localApps: [Gateway.LocalApp], logger: Logger,
         source: @escaping @Sendable () throws -> GatewayConfiguration) throws {
        self.logger = logger
        self.source = source
        let group = EventLoopGroup(count: Self.loopCount(configuration))
        self.group = group
        metrics = GatewayMetrics(loops: group.loops, providers: configuration.providers.map(\.configuration.name))
        startup = StartupReadiness(prefetch: configuration.keyRefresh.prefetch)
        let store: any RevocationStore
        do {
            store = try StoreRevocations.makeStore(configuration.store, loops: group.loops, logger: logger)
        } catch {
            throw Gateway.StartupError(description: "\(configuration.file): store: \(error)")
        }
        let revocations = StoreRevocations(store: store, loopCount: group.loops.count)
        store.start()
        admin = AdminHandler(token: configuration.admin?.token, actions: AdminActions(),
                             metricsPublic: configuration.admin?.metricsPublic ?? false)
        let builder = GenerationBuilder(logger: logger, metrics: metrics, loops: group.loops)
        self.builder = builder
        let startup = self.startup
        // The first generation, built as every reload builds one.
        let generation: GenerationBuilder.Generation
        do {
            generation = try builder.build(configuration, previous: nil, previousSessions: nil, accessLog: nil,
                                           revocations: revocations) { event in
                if case .keysInstalled(let provider, _, _, _) = event { startup.keysInstalled(provider: provider) }
            }
        } catch {
            throw Gateway.StartupError(description: "\(error)")
        }
        let serving = generation.configuration
        certificates = serving.certificateFiles
        current = Parts(configuration: serving, store: store, revocations: revocations, keys: generation.built.keys,
                        verifier: generation.built.verifier, assertionKeys: generation.assertionKeys,
                        tlsEndpoints: generation.tlsEndpoints, accessLogFD: generation.accessLogFD)
        server = try Self.makeServer(serving, group: group, accessLogFD: generation.accessLogFD, logger: logger, metrics: metrics)
        metrics.attach(proxy: server)
        let built = generation.built
        let sessions = generation.sessions
        self.sessions = sessions  // (init: no other thread yet)
        metrics.attach(verifier: built.verifier, keys: built.keys?.manager, storeHealth: { store.health })
        metrics.attach(certificates: { [weak self] in
            guard let self else { return [] }
            let parts = self.parts
            return zip(parts.configuration.listen, parts.tlsEndpoints).flatMap { listen, endpoint in
                (endpoint?.context.certificates ?? []).map { ("\(listen.address)", $0.certificateFile, $0.notAfter) }
            }
        })
        let sessionCounters = sessions?.counters
        metrics.attach(sessionEvents: sessionCounters.map { counters in { @Sendable in counters.snapshot } })
        if let keys = built.keys {
            startup.expectKeys(for: keys.managed)
            keys.manager.start { startup.firstAttemptsFinished() }
        }
        adminJWKS.keys = generation.assertionKeys
        admin.setActions(adminActions())
        server.setAuthenticator(built.authenticator)
        server.published = GatewayJWKS(assertion: generation.assertionKeys, sessions: sessions)
        for app in localApps {
            do { try server.addListener(address: app.address, mode: .local(app.handler), managed: false) } catch {
                throw Gateway.StartupError(description: "cannot listen on \(app.address) (demo app): \(error)")
            }
        }
        for (index, listen) in serving.listen.enumerated() {
            do {
                try server.addListener(address: listen.address, mode: .gateway, tls: generation.tlsEndpoints[index],
                                       redirectsToHTTPS: listen.redirectHTTPS,
                                       http2: listen.offersHTTP2 ? listen.http2 : nil, h2c: listen.h2c)
            } catch {
                throw Gateway.StartupError(description: "cannot listen on \(listen.address) (listen): \(error)")
            }
        }
        if let settings = serving.admin {
            do { try server.addListener(address: settings.address, mode: .local(admin)) } catch {
                throw Gateway.StartupError(description: "cannot listen on \(settings.address) (admin): \(error)")
            }
        }
        metrics.configurationServed(generation: 1, sha256: configuration.sha256, applied: 0, refused: 0)
    }

    /// `sessions:`: the service (the store kept from `store`, the generated signing key from
    /// `previous` when the key files did not change), its endpoints attached to their routes
    /// and its public keys given to the `session` provider.
    static func prepareSessions(_ configuration: inout GatewayConfiguration, store: (any SessionStore)?, previous: SessionService?,
                                revocations: StoreRevocations, assertionKeys: AssertionKeys? = nil,
                                logger: Logger) throws -> SessionService? {
        guard let settings = configuration.sessions else {
            revocations.sessionEnder = nil
            return nil
        }
        let sessionStore: any SessionStore
        if let store {
            sessionStore = store
        } else if configuration.store.usesRedis {
            // Shared by every instance; its own connection (a rotation never waits behind a resync).
            let client = RedisClient(configuration: try StoreRevocations.redisConfiguration(configuration.store),
                                     loop: EventLoop(index: -5))
            client.start()
            sessionStore = RedisSessionStore(client: client, confirmReplication: client.configuration.canFailOver)
        } else {
            sessionStore = try EmbeddedSessionStore(directory: configuration.store.stateDirectory, warn: { logger.warning("\($0)") },
                                                    journalState: { failure in
                if let failure {
                    logger.error("sessions cannot be persisted: sign-ins and logouts are refused (503) until they can",
                                 metadata: ["reason": "\(failure)"])
                } else {
                    logger.notice("sessions are persisted again")
                }
            })
        }
        if store == nil && !configuration.store.usesRedis && configuration.store.stateDirectory == nil {
            logger.notice("sessions are kept in memory only and end with the process (set store.state_dir to keep them)")
        }
        let lookup = sessionLookup(configuration, assertionKeys: assertionKeys)
        let service = try SessionService(settings: settings, store: sessionStore, revocations: revocations,
                                         errorBody: (settings.errorBody ?? configuration.identity.errorBody).carryingCode, logger: logger, previous: previous,
                                         counters: previous?.counters ?? SessionCounters(), lookup: lookup)
        for (index, kind) in configuration.sessionRoutes {
            configuration.proxy.routes[index].handler = SessionEndpoint(kind, service: service)
        }
        // `revoke_on_success` with a session access token ends its session in the store too.
        revocations.sessionEnder = { [weak service] id in service?.store.end(id: id, user: nil) { _ in } }
        if let i = configuration.providers.firstIndex(where: { $0.configuration.name == SessionSettings.providerName }) {
            configuration.providers[i].keys = .inline(try service.keySet())
        }
        return service
    }

    /// The session lookup hook's client (`sessions.user.lookup`), as the exchange uses it and
    /// `check-config --probe` tries it: the upstream's CA, client certificate, request headers
    /// and, with `identity.assertion`, the hook's assertion.
    static func sessionLookup(_ configuration: GatewayConfiguration, assertionKeys: AssertionKeys?) -> SessionLookup? {
        guard let hook = configuration.sessions?.lookup,
              let upstream = configuration.proxy.upstreams.first(where: { $0.name == hook.upstream }) else { return nil }
        let audience = upstream.url.origin
        var assertion: (@Sendable (String, String) -> (header: String, token: String)?)?
        if let keys = assertionKeys {
            assertion = { provider, subject in
                keys.lookupAssertion(audience: audience, provider: provider, subject: subject, now: WallClock.nowSeconds())
            }
        }
        return SessionLookup(url: upstream.url.origin + hook.path, caFile: upstream.caFile, clientCertificate: upstream.clientCertificate,
                             headers: upstream.requestHeaders.map { ($0.name, $0.value) },
                             timeout: hook.timeout, loop: EventLoop(index: -6), assertion: assertion)
    }

    static func openAccessLog(_ configuration: GatewayConfiguration) throws -> Int32? {
        switch configuration.accessLog {
        case .off: return nil
        case .stdout: return 1
        case .stderr: return 2
        case .file(let path):
            let fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0o644)
            guard fd >= 0 else {
                throw Gateway.StartupError(description: "\(configuration.file): access_log: cannot open \(path): \(String(cString: strerror(errno)))")
            }
            return fd
        }
    }

    private static func makeServer(_ configuration: GatewayConfiguration, group: EventLoopGroup, accessLogFD: Int32?,
                                   logger: Logger, metrics: GatewayMetrics) throws -> ProxyServer {
        do {
            // The authenticator is set once it exists (`setAuthenticator`), before any listener starts.
            return try ProxyServer(group: group, configuration: configuration.proxy,
                                   authenticator: NoProvidersAuthenticator(realm: configuration.proxy.realm),
                                   accessLogFD: accessLogFD, logger: logger, metricsFactory: metrics.metricsFactory)
        } catch {
            throw Gateway.StartupError(description: "\(configuration.file): upstreams: \(error)")
        }
    }

    private func adminActions() -> AdminActions {
        var actions = AdminActions()
        let metrics = self.metrics
        actions.metrics = { completion in metrics.render(completion: completion) }
        // The runtime lives as long as the process; weak references keep the admin handler
        // from holding it (and answer "unavailable" should it ever be gone).
        let gone = AdminError(status: 503, message: "the gateway is stopping")
        actions.revoke = { [weak self] request, completion in
            guard let self else { return completion(.failure(gone)) }
            parts.revocations.revoke(request, completion: completion)
        }
        actions.undo = { [weak self] request, completion in
            guard let self else { return completion(.failure(gone)) }
            parts.revocations.undo(request, completion: completion)
        }
        actions.listRevocations = { [weak self] subject, completion in
            guard let self else { return completion(.failure(gone)) }
            parts.revocations.list(subject: subject, completion: completion)
        }
        actions.keys = { [weak self] in self?.parts.keys?.statusJSON() ?? "{\"providers\":[]}\n" }
        let notConfigured = AdminError(status: 404, message: "sessions are not configured")
        do {
            actions.listSessions = { [weak self] user, completion in
                guard let service = self?.currentSessions else { return completion(.failure(notConfigured)) }
                service.store.list(user: user, now: Int64(WallClock.nowSeconds())) { records in
                    completion(.success(SessionEndpoint.listJSON(records, current: nil) + "\n"))
                }
            }
            actions.endSession = { [weak self] id, completion in
                guard let service = self?.currentSessions else { return completion(.failure(notConfigured)) }
                service.store.end(id: id, user: nil) { outcome in
                    let record: SessionRecord
                    switch outcome {
                    case .ended(let ended): record = ended
                    case .notFound: return completion(.success(false))
                    case .failed: return completion(.failure(AdminError(status: 503, message: "the session store is unavailable")))
                    }
                    service.endEverywhere(record, now: Int64(WallClock.nowSeconds())) { ok in
                        completion(ok ? .success(true) : .failure(AdminError(status: 503, message: "the revocation store is unavailable")))
                    }
                }
            }
        }
        let startup = self.startup
        actions.notReadyReason = { [weak self] in
            guard let parts = self?.parts else { return "stopping" }
            if case .unavailable = parts.store.health, parts.configuration.store.denyWhenUnavailable {
                return "revocation store unavailable"
            }
            return startup.notReadyReason
        }
        actions.published = adminJWKS
        let queue = self.queue
        actions.reload = { [weak self] completion in
            queue.async { [weak self] in
                guard let self else { return }
                completion(self.reloadNow(trigger: "POST /reload"))
            }
        }
        actions.served = { [weak self] in
            guard let parts = self?.parts else { return (0, "") }
            return (parts.generation, parts.configuration.sha256)
        }
        return actions
    }

    /// `certificate_check`: every interval the certificate files are compared with what the
    /// serving generation loaded; when one changed, the serving configuration is applied again
    /// as it is (the file is not read: an edit waiting for its reload stays waiting), so the
    /// certificates are read anew through the reload's all-or-nothing path (a half-written
    /// pair is refused, logged, and the old one serves on until the next change).
    func scheduleCertificateCheck() {
        guard let interval = parts.configuration.certificateCheckInterval else { return }
        queue.asyncAfter(deadline: .now() + interval) { [weak self] in
            guard let self else { return }
            let serving = self.parts.configuration
            let now = serving.certificateFiles
            let changed = self.certificates.changed(in: now)
            self.certificates = now
            if !changed.isEmpty {
                self.logger.notice("certificate files changed; reloading them", metadata: ["files": "\(changed.joined(separator: ", "))"])
                _ = self.reloadNow(trigger: "certificate files changed", configuration: serving)
            }
            self.scheduleCertificateCheck()
        }
    }

    /// Once a retiring session key's last token has expired, the `session` provider stops
    /// verifying with it (the JWKS drops it by itself). On the reload queue; a reload
    /// schedules again for its own service.
    private func scheduleSessionKeyRetirement() {
        let now = Int64(WallClock.nowSeconds())
        guard let service = currentSessions, let at = service.nextRetirement(after: now) else { return }
        queue.asyncAfter(deadline: .now() + .seconds(Int(at - now) + 1)) { [weak self] in
            guard let self, self.currentSessions === service else { return }
            if let keys = try? service.keySet() {
                self.parts.verifier?.updateKeys(provider: SessionSettings.providerName, keys: keys)
            }
            self.scheduleSessionKeyRetirement()
        }
    }

    /// Reopens the log files at their paths (SIGUSR1; every applied reload does too): the
    /// access log file of the configuration serving, and standard output and error when
    /// they are files. On the reload queue, so it never races a reload's own log changes.
    public func reopenLogs(trigger: String) {
        queue.async { [self] in reopenLogsNow(trigger: trigger) }
    }

    private func reopenLogsNow(trigger: String) {
        var reopened: [String] = [], failures: [String] = []
        let parts = self.parts
        if case .file(let path) = parts.configuration.accessLog, let fd = parts.accessLogFD {
            if let failure = LogFiles.reopen(path, onto: fd) { failures.append(failure) } else { reopened.append(path) }
        }
        let streams = LogFiles.reopenStandardStreams()
        reopened += streams.reopened
        failures += streams.failures
        if failures.isEmpty {
            logger.info("log files reopened", metadata: ["trigger": "\(trigger)", "files": "\(reopened.joined(separator: ","))"])
        } else {
            logger.error("log files could not all be reopened; the others write on to the old ones",
                         metadata: ["trigger": "\(trigger)", "reasons": "\(failures.joined(separator: "; "))"])
        }
    }

    /// Reloads on the reload queue and hands the verdict to `completion` there.
    public func reload(trigger: String, completion: (@Sendable (ReloadVerdict) -> Void)? = nil) {
        queue.async { [self] in
            let verdict = reloadNow(trigger: trigger)
            completion?(verdict)
        }
    }

    /// One reload, on `queue`.
    /// `configuration`: apply this one (the serving one, for certificate renewals) instead of
    /// reading the file.
    func reloadNow(trigger: String, configuration: GatewayConfiguration? = nil) -> ReloadVerdict {
        dispatchPrecondition(condition: .onQueue(queue))
        let old = parts
        func refuse(_ reason: String) -> ReloadVerdict {
            let (applied, refused) = lock.withLock { () -> (Int, Int) in
                reloadsRefused += 1
                return (reloadsApplied, reloadsRefused)
            }
            metrics.configurationServed(generation: old.generation, sha256: old.configuration.sha256, applied: applied, refused: refused)
            logger.error("configuration reload refused; the previous configuration keeps serving", metadata: [
                "trigger": "\(trigger)", "reason": "\(reason)", "generation": "\(old.generation)"])
            return ReloadVerdict(refusal: reason, generation: old.generation, sha256: old.configuration.sha256)
        }
        var next: GatewayConfiguration
        if let configuration { next = configuration } else {
            do { next = try source() } catch { return refuse("\(error)") }
        }
        let loops = Self.loopCount(next)
        guard loops == group.loops.count else {
            return refuse("\(next.file): workers: the number of loops cannot change while the gateway runs "
                          + "(\(group.loops.count) running, \(loops) in the file); restart to apply it")
        }

        // The store is the gateway's state (revocations, sessions): it is opened once, at start,
        // and never replaced while it serves. A reload may change its policy (applied in place
        // once the reload is); anything that names another store is refused before anything
        // is built.
        if let change = next.store.identityChange(from: old.configuration.store) {
            return refuse("\(next.file): store: \(change) cannot change while the gateway runs (the revocations and "
                          + "sessions it holds stay where they are); restart to apply it")
        }

        // Everything new is built first (as at start: `GenerationBuilder.build`); `undo` tears it down
        // again if a later step refuses.
        let store = old.store
        let revocations = old.revocations
        let policyChanged = next.store.policy != old.configuration.store.policy
        let generation: GenerationBuilder.Generation
        do {
            generation = try builder.build(next, previous: old, previousSessions: sessions,
                                           accessLog: (old.configuration.accessLog, old.accessLogFD), revocations: revocations)
        } catch {
            return refuse(error.description)
        }
        var undo = generation.undo
        func refuseAndUndo(_ reason: String) -> ReloadVerdict {
            for step in undo.reversed() { step() }
            return refuse(reason)
        }
        next = generation.configuration
        let endpoints = generation.tlsEndpoints
        let accessLogFD = generation.accessLogFD
        let nextSessions = generation.sessions
        let assertionKeys = generation.assertionKeys
        let built = generation.built
        if let keys = built.keys {
            // Unchanged providers install from the cache at once; new ones are fetched. The
            // new generation starts with keys (or after one attempt, as at start).
            let done = DispatchSemaphore(value: 0)
            keys.manager.start { done.signal() }
            _ = done.wait(timeout: .now() + next.keyRefresh.fetchTimeout + 1)
            undo.append { keys.manager.shutdown() }
        }
        // Applied all the same (readiness is a start-up matter), but said in the verdict.
        let withoutKeys = built.keys?.manager.status().filter { $0.kids.isEmpty }.map(\.provider) ?? []

        var listeners: [ListenerSpec] = []
        for (index, listen) in next.listen.enumerated() {
            listeners.append(ListenerSpec(address: listen.address, mode: .gateway, tls: endpoints[index],
                                          redirectsToHTTPS: listen.redirectHTTPS,
                                          http2: listen.offersHTTP2 ? listen.http2 : nil, h2c: listen.h2c))
        }
        if let settings = next.admin { listeners.append(ListenerSpec(address: settings.address, mode: .local(admin))) }
        let report: ProxyServer.ReconfigureReport
        do {
            report = try server.reconfigure(ProxyGeneration(
                configuration: next.proxy, authenticator: built.authenticator,
                published: GatewayJWKS(assertion: assertionKeys, sessions: nextSessions), accessLogFD: accessLogFD,
                listeners: listeners))
        } catch {
            return refuseAndUndo("\(next.file): \(error)")
        }

        // Applied. What the old generation alone used is let go.
        let oldSessions = lock.withLock { () -> SessionService? in
            defer { sessions = nextSessions }
            return sessions
        }
        if let closed = oldSessions?.store as? RedisSessionStore, closed !== nextSessions?.store { closed.client.shutdown() }
        if policyChanged { store.update(policy: next.store.policy) }
        let nextCounters = nextSessions?.counters
        metrics.attach(sessionEvents: nextCounters.map { counters in { @Sendable in counters.snapshot } })
        admin.update(token: next.admin?.token, metricsPublic: next.admin?.metricsPublic ?? false)
        adminJWKS.keys = assertionKeys
        JSONLogHandler.setLevel(next.logLevel)
        let serving = store
        metrics.replace(verifier: built.verifier, keys: built.keys?.manager, storeHealth: { serving.health })
        old.keys?.manager.shutdown()
        // An access log file the new configuration no longer names stays open: requests of the
        // old generation may still log to it, and a closed descriptor's number can be reused by
        // a socket, which must never receive log lines. One descriptor per such change.
        // Upstreams kept as they were re-read their client certificates, as SIGHUP did before.
        let kept = server.targets.filter { target in report.upstreamsKept.contains(target.configuration.name) }
        Gateway.reloadClientCertificates(kept, logger: logger)
        let (applied, refused) = lock.withLock { () -> (Int, Int) in
            current = Parts(configuration: next, generation: report.generation, store: store, revocations: revocations,
                            keys: built.keys, verifier: built.verifier, assertionKeys: assertionKeys,
                            tlsEndpoints: endpoints, accessLogFD: accessLogFD)
            reloadsApplied += 1
            return (reloadsApplied, reloadsRefused)
        }
        metrics.configurationServed(generation: report.generation, sha256: next.sha256, applied: applied, refused: refused)
        var changes: [String] = []
        if !report.upstreamsAdded.isEmpty { changes.append("upstreams added or changed: \(report.upstreamsAdded.joined(separator: ", "))") }
        if !report.upstreamsRemoved.isEmpty { changes.append("upstreams removed or replaced: \(report.upstreamsRemoved.joined(separator: ", "))") }
        if !report.listenersAdded.isEmpty { changes.append("listeners added: \(report.listenersAdded.joined(separator: ", "))") }
        if !report.listenersRemoved.isEmpty { changes.append("listeners removed: \(report.listenersRemoved.joined(separator: ", "))") }
        if policyChanged { changes.append("revocation policy applied in place") }
        if let service = nextSessions, !service.retiringKeys.isEmpty {
            changes.append("session signing keys rotated (the previous ones verify until their last token expires)")
        }
        if !withoutKeys.isEmpty {
            changes.append("no keys yet for \(withoutKeys.joined(separator: ", ")): their tokens are answered 503 until a fetch succeeds")
        }
        logger.info("configuration reloaded", metadata: [
            "trigger": "\(trigger)", "generation": "\(report.generation)", "config_sha256": "\(next.sha256)",
            "routes": "\(next.proxy.routes.count)", "upstreams": "\(next.proxy.upstreams.count)",
            "changes": "\(changes.isEmpty ? "settings only" : changes.joined(separator: "; "))"])
        scheduleSessionKeyRetirement()
        certificates = next.certificateFiles
        // The check loop stops when `certificate_check: off`; a reload that turns it on starts it.
        if old.configuration.certificateCheckInterval == nil, next.certificateCheckInterval != nil { scheduleCertificateCheck() }
        // A log file moved away since (logrotate without SIGUSR1) is written at its path again.
        if next.accessLog == old.configuration.accessLog { reopenLogsNow(trigger: trigger) }
        return ReloadVerdict(refusal: nil, generation: report.generation, sha256: next.sha256, changes: changes)
    }
}

/// The identity assertion's JWKS on the admin listener, following reloads (404 when no
/// assertion is configured).
final class ReloadableJWKS: PublishedDocument, @unchecked Sendable {
    // @unchecked Sendable: `keys` behind `lock`.
    private let lock = Lock()
    private var current: AssertionKeys?
    var keys: AssertionKeys? {
        get { lock.withLock { current } }
        set { lock.withLock { current = newValue } }
    }
    var path: String { AssertionJWKS.wellKnownPath }

    func response() -> LocalResponse {
        guard let keys else { return .error(404, "no identity assertion is configured") }
        return AssertionJWKS(keys: keys).response()
    }
}
