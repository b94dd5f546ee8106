import PortcullisEdgeAuth
import Dispatch
import Foundation
import Logging
import PortcullisAuth
import PortcullisCore
import PortcullisStore
import PortcullisIO
import PortcullisProxy
import PortcullisRedis
import PortcullisTLS

/// Starts everything a configuration describes and runs until SIGTERM/SIGINT.
public enum Gateway {
    /// A local app served in-process next to the gateway (the demo upstreams).
    public struct LocalApp {
        public var address: SocketAddress
        public var handler: any LocalHandler
        public init(address: SocketAddress, handler: any LocalHandler) {
            self.address = address
            self.handler = handler
        }
    }

    public struct StartupError: Error, CustomStringConvertible {
        public var description: String
    }

    /// Binds all listeners and starts serving; returns the running server.
    /// `onSignal` is called once a shutdown completed (normally: exit).
    /// What a running gateway exposes to its signal handlers.
    public struct Running {
        public var server: ProxyServer
        public var admin: AdminHandler?
        /// The TLS listeners' certificate holders, reloaded on SIGHUP.
        public var tlsEndpoints: [TLSServerEndpoint]
        /// `identity.assertion`'s keys, re-read on SIGHUP.
        public var assertionKeys: AssertionKeys?
    }

    public static func start(_ configuration: GatewayConfiguration, localApps: [LocalApp] = [],
                             logger: Logger) throws -> Running {
        System.ignoreWriteSignals()
        let loopCount = configuration.workers == 0 ? max(1, ProcessInfo.processInfo.activeProcessorCount) : configuration.workers
        let group = EventLoopGroup(count: loopCount)
        let accessLogFD: Int32?
        switch configuration.accessLog {
        case .off: accessLogFD = nil
        case .stdout: accessLogFD = 1
        case .stderr: accessLogFD = 2
        case .file(let path):
            let fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0o644)
            guard fd >= 0 else {
                throw StartupError(description: "\(configuration.file): access_log: cannot open \(path): \(String(cString: strerror(errno)))")
            }
            accessLogFD = fd
        }
        let store: any RevocationStore
        do {
            store = try StoreRevocations.makeStore(configuration.store, loops: group.loops, logger: logger)
        } catch {
            throw StartupError(description: "\(configuration.file): store: \(error)")
        }
        let revocations = StoreRevocations(store: store, loopCount: group.loops.count)
        store.start()
        // Metrics are collected whenever there is an admin listener to serve them.
        let metrics = configuration.admin == nil ? nil
            : GatewayMetrics(loops: group.loops, providers: configuration.providers.map(\.configuration.name))
        metrics?.attach(storeHealth: { store.health })
        var actions = AdminActions()
        if let metrics { actions.metrics = { completion in metrics.render(completion: completion) } }
        actions.revoke = { request, completion in revocations.revoke(request, completion: completion) }
        actions.undo = { request, completion in revocations.undo(request, completion: completion) }
        actions.listRevocations = { subject, completion in revocations.list(subject: subject, completion: completion) }
        let startup = StartupReadiness(prefetch: configuration.keyRefresh.prefetch)
        actions.notReadyReason = {
            if case .unavailable = store.health, configuration.store.denyWhenUnavailable {
                return "revocation store unavailable"
            }
            return startup.notReadyReason
        }
        // One Redis client (on its own loop) for the secrets instances share at start and on
        // timers: TLS ticket keys and the generated assertion key. Made when first needed.
        var secretsClient: RedisClient?
        func sharedSecretsClient() throws -> RedisClient {
            if let secretsClient { return secretsClient }
            let client = RedisClient(configuration: try StoreRevocations.redisConfiguration(configuration.store),
                                     loop: EventLoop(index: -3))
            client.start()
            secretsClient = client
            return client
        }
        var assertionKeys: AssertionKeys?
        if let settings = configuration.identity.assertion {
            do { assertionKeys = try AssertionKeys(settings: settings) } catch {
                throw StartupError(description: "\(configuration.file): identity.assertion: \(error)")
            }
            if settings.algorithm != .hs256, settings.signingKeys.isEmpty, configuration.store.usesRedis {
                SharedAssertionKey.install(keys: assertionKeys!, client: try sharedSecretsClient(), logger: logger)
            }
            actions.published = AssertionJWKS(keys: assertionKeys!)
        }
        let authenticator: any RequestAuthenticator
        if configuration.providers.isEmpty {
            authenticator = NoProvidersAuthenticator(realm: configuration.proxy.realm)
        } else {
            let verifier = try makeVerifier(configuration)
            let keys: SigningKeys?
            do {
                keys = try SigningKeys.make(configuration, verifier: verifier, logger: logger) { event in
                    if case .keysInstalled(let provider, _, _, _) = event { startup.keysInstalled(provider: provider) }
                }
            } catch {
                throw StartupError(description: "\(configuration.file): providers: \(error)")
            }
            if let keys {
                startup.expectKeys(for: keys.managed)
                keys.manager.start { startup.firstAttemptsFinished() }
                actions.keys = { keys.statusJSON() }
            }
            metrics?.attach(verifier: verifier, keys: keys?.manager)
            authenticator = EdgeAuthenticator(verifier: verifier, configuration: configuration.edgeAuth, revocations: revocations,
                                              keys: keys, counters: metrics?.auth, logger: logger, assertionKeys: assertionKeys)
        }
        let server: ProxyServer
        do {
            server = try ProxyServer(group: group, configuration: configuration.proxy, authenticator: authenticator,
                                     accessLogFD: accessLogFD, logger: logger, metricsFactory: metrics?.metricsFactory)
        } catch {
            throw StartupError(description: "\(configuration.file): upstreams: \(error)")
        }
        metrics?.attach(proxy: server)
        server.published = actions.published
        func bind(_ address: SocketAddress, _ mode: ListenerMode, _ what: String, tls: TLSServerEndpoint? = nil,
                  redirect: Bool = false, http2: HTTP2Settings? = nil, h2c: Bool = false) throws {
            do {
                try server.addListener(address: address, mode: mode, tls: tls, redirectsToHTTPS: redirect,
                                       http2: http2, h2c: h2c)
            } catch {
                throw StartupError(description: "cannot listen on \(address) (\(what)): \(error)")
            }
        }
        for app in localApps { try bind(app.address, .local(app.handler), "demo app") }
        if configuration.listen.contains(where: { $0.tls != nil }) {
            if configuration.store.usesRedis {
                // Ticket keys shared through Redis before the first context loads them.
                SharedTicketKeys.install(client: try sharedSecretsClient(), rotation: TicketKeys.shared.rotationInterval)
            } else {
                TicketKeys.shared.startRotation()
            }
        }
        var tlsEndpoints: [TLSServerEndpoint] = []
        for (index, listen) in configuration.listen.enumerated() {
            var endpoint: TLSServerEndpoint?
            if let settings = listen.tls {
                do { endpoint = try TLSServerEndpoint(settings: settings) } catch {
                    throw StartupError(description: "\(configuration.file): listen[\(index)].tls: \(error)")
                }
                tlsEndpoints.append(endpoint!)
            }
            try bind(listen.address, .gateway, "listen", tls: endpoint, redirect: listen.redirectHTTPS,
                     http2: listen.offersHTTP2 ? listen.http2 : nil, h2c: listen.h2c)
        }
        var admin: AdminHandler?
        if let adminConfiguration = configuration.admin {
            let handler = AdminHandler(token: adminConfiguration.token, actions: actions,
                                       metricsPublic: adminConfiguration.metricsPublic)
            admin = handler
            try bind(adminConfiguration.address, .local(handler), "admin")
        }
        server.start()
        logger.info("portcullis started", metadata: [
            "listen": "\(configuration.listen.map { $0.address.description }.joined(separator: ","))",
            "admin": "\(configuration.admin?.address.description ?? "off")",
            "loops": "\(loopCount)",
            "routes": "\(configuration.proxy.routes.count)",
            "upstreams": "\(configuration.proxy.upstreams.count)",
        ])
        return Running(server: server, admin: admin, tlsEndpoints: tlsEndpoints, assertionKeys: assertionKeys)
    }

    /// SIGHUP: reload every TLS listener's certificates from their files. A listener
    /// whose files fail keeps serving its old certificates; the log names the file.
    static func reloadCertificates(_ endpoints: [TLSServerEndpoint], logger: Logger) {
        for endpoint in endpoints {
            let files = endpoint.settings.certificates.map(\.certificate).joined(separator: ",")
            do {
                try endpoint.reload()
                logger.info("certificates reloaded", metadata: ["certificates": "\(files)"])
            } catch {
                logger.error("certificate reload refused; the previous certificates stay in use", metadata: [
                    "file": "\(error.file)", "reason": "\(error.reason)"])
            }
        }
    }

    /// SIGHUP: re-read `identity.assertion.signing_keys`; a bad file keeps the old keys.
    static func reloadAssertionKeys(_ keys: AssertionKeys, logger: Logger) {
        do {
            if try keys.reload() {
                logger.info("identity assertion keys reloaded", metadata: ["kids": "\(keys.keyIDs.joined(separator: ","))"])
            }
        } catch {
            logger.error("identity assertion key reload refused; the previous keys stay in use", metadata: [
                "file": "\(error.file)", "reason": "\(error.reason)"])
        }
    }

    /// SIGHUP: reload every upstream's client certificate. An upstream whose files fail
    /// keeps its old certificate; the log names the file.
    static func reloadClientCertificates(_ targets: [UpstreamTarget], logger: Logger) {
        for target in targets {
            do {
                if let file = try target.reloadClientCertificate() {
                    logger.info("client certificate reloaded", metadata: ["upstream": "\(target.configuration.name)", "certificate": "\(file)"])
                }
            } catch {
                logger.error("client certificate reload refused; the previous certificate stays in use", metadata: [
                    "upstream": "\(target.configuration.name)", "file": "\(error.file)", "reason": "\(error.reason)"])
            }
        }
    }

    /// The verifier with every inline key and secret loaded; fetched key sets
    /// start empty and are installed by the key refresher.
    static func makeVerifier(_ configuration: GatewayConfiguration) throws -> CredentialVerifier {
        do {
            return try CredentialVerifier(providers: configuration.providers.map(\.configuration), keys: configuration.providers.inlineKeys,
                                          cacheCapacity: configuration.tokenCacheEntries)
        } catch {
            throw StartupError(description: "\(configuration.file): providers: \(error)")
        }
    }

    /// Runs until SIGTERM or SIGINT, then drains (up to `shutdown_grace`) and exits.
    public static func runForever(_ configuration: GatewayConfiguration, localApps: [LocalApp] = [],
                                  logger: Logger) throws -> Never {
        // Signal sources exist before the listeners do: a SIGHUP, SIGTERM or SIGINT that
        // arrives while the gateway starts (once `signal(_, SIG_IGN)` is set, the kernel
        // discards ignored signals until a source is active) is kept and acted on as soon
        // as the gateway runs, never lost.
        signal(SIGTERM, SIG_IGN)
        signal(SIGINT, SIG_IGN)
        signal(SIGHUP, SIG_IGN)
        let state = SignalState()
        var sources: [DispatchSourceSignal] = []
        let reload = DispatchSource.makeSignalSource(signal: SIGHUP, queue: .global())
        reload.setEventHandler { state.reload() }
        reload.resume()
        sources.append(reload)
        for sig in [SIGTERM, SIGINT] {
            let source = DispatchSource.makeSignalSource(signal: sig, queue: .main)
            source.setEventHandler { state.stop(sig) }
            source.resume()
            sources.append(source)
        }

        let running = try start(configuration, localApps: localApps, logger: logger)
        let server = running.server
        let admin = running.admin
        let endpoints = running.tlsEndpoints
        let targets = server.targets
        let assertionKeys = running.assertionKeys
        let shutdown = ShutdownSequence()
        /// After the drain delay (or at once): stop accepting, GOAWAY, close idle connections,
        /// give in-flight requests `grace`, exit.
        @Sendable func stopServing() {
            logger.info("draining", metadata: ["grace_seconds": "\(configuration.shutdown.grace)"])
            server.shutdown(gracePeriod: configuration.shutdown.grace) {
                logger.info("stopped")
                exit(0)
            }
        }
        state.install(reload: {
            logger.info("SIGHUP: reloading certificates", metadata: ["listeners": "\(endpoints.count)"])
            reloadCertificates(endpoints, logger: logger)
            reloadClientCertificates(targets, logger: logger)
            if let assertionKeys { reloadAssertionKeys(assertionKeys, logger: logger) }
        }, stop: { sig in
            let name = sig == SIGTERM ? "SIGTERM" : "SIGINT"
            switch shutdown.signalled() {
            case .first:
                // `/readyz` says 503 at once; traffic is still served for the drain delay.
                admin?.draining = true
                let delay = configuration.shutdown.drainDelay
                logger.info("shutting down", metadata: ["signal": "\(name)", "drain_delay_seconds": "\(delay)",
                                                        "grace_seconds": "\(configuration.shutdown.grace)"])
                if delay > 0 {
                    DispatchQueue.main.asyncAfter(deadline: .now() + delay) {
                        if shutdown.beginStopping() { stopServing() }
                    }
                } else if shutdown.beginStopping() {
                    stopServing()
                }
            case .duringDelay:
                logger.info("a second signal ends the drain delay", metadata: ["signal": "\(name)"])
                if shutdown.beginStopping() { stopServing() }
            case .stopping:
                break
            }
        })
        withExtendedLifetime(sources) { dispatchMain() }
    }
}

/// Where SIGTERM/SIGINT handling stands: serving, in the drain delay, stopping.
final class ShutdownSequence: @unchecked Sendable {
    // @unchecked Sendable: only touched from the main queue (signal handlers, the delay timer).
    enum Signal { case first, duringDelay, stopping }
    private var hasSignal = false
    private var stopping = false

    func signalled() -> Signal {
        dispatchPrecondition(condition: .onQueue(.main))
        if stopping { return .stopping }
        if hasSignal { return .duringDelay }
        hasSignal = true
        return .first
    }

    /// True once: the drain delay is over (or cut short) and the server stops.
    func beginStopping() -> Bool {
        dispatchPrecondition(condition: .onQueue(.main))
        if stopping { return false }
        stopping = true
        return true
    }
}

/// Signals received before the gateway finished starting wait here and are acted on
/// once the handlers are installed; afterwards they are handled at once.
final class SignalState: @unchecked Sendable {
    // @unchecked Sendable: every member only under `lock`.
    private let lock = Lock()
    private var reloadHandler: (@Sendable () -> Void)?
    private var stopHandler: (@Sendable (Int32) -> Void)?
    private var pendingReload = false
    private var pendingStop: Int32?

    func reload() {
        let handler = lock.withLock { () -> (@Sendable () -> Void)? in
            if reloadHandler == nil { pendingReload = true }
            return reloadHandler
        }
        handler?()
    }

    func stop(_ signal: Int32) {
        let handler = lock.withLock { () -> (@Sendable (Int32) -> Void)? in
            if stopHandler == nil, pendingStop == nil { pendingStop = signal }
            return stopHandler
        }
        handler?(signal)
    }

    func install(reload: @escaping @Sendable () -> Void, stop: @escaping @Sendable (Int32) -> Void) {
        let (runReload, runStop) = lock.withLock { () -> (Bool, Int32?) in
            reloadHandler = reload
            stopHandler = stop
            defer { pendingReload = false; pendingStop = nil }
            return (pendingReload, pendingStop)
        }
        if runReload { DispatchQueue.global().async { reload() } }
        if let runStop { DispatchQueue.main.async { stop(runStop) } }
    }
}

/// What `/readyz` waits for at start (see `KeyPrefetch`): with `required`, every provider
/// whose keys come from a URL has had keys installed once; with `best_effort`, every such
/// provider's first attempt finished. Once ready for these reasons it stays so (later key
/// failures serve stale keys and are `GET /keys`' business, not readiness').
final class StartupReadiness: @unchecked Sendable {
    // @unchecked Sendable: every member only under `lock`.
    private let lock = Lock()
    private let prefetch: KeyPrefetch
    private var waitingForKeys: Set<String> = []
    private var firstAttemptsDone = true

    init(prefetch: KeyPrefetch) { self.prefetch = prefetch }

    /// Before the key manager starts: these providers' keys are awaited.
    func expectKeys(for providers: Set<String>) {
        lock.withLock {
            waitingForKeys = providers
            firstAttemptsDone = providers.isEmpty
        }
    }

    func keysInstalled(provider: String) {
        lock.withLock { _ = waitingForKeys.remove(provider) }
    }

    func firstAttemptsFinished() {
        lock.withLock { firstAttemptsDone = true }
    }

    /// nil when ready as far as start-up goes.
    var notReadyReason: String? {
        lock.withLock {
            switch prefetch {
            case .required where !waitingForKeys.isEmpty:
                return "keys not fetched yet: \(waitingForKeys.sorted().joined(separator: ", ")) (keys.prefetch: required)"
            case .bestEffort where !firstAttemptsDone:
                return "first key fetches in progress (keys.prefetch: best_effort)"
            default:
                return nil
            }
        }
    }
}

extension Gateway {
    /// Serves local apps only (no gateway listener, no admin): `portcullis demo-apps`, the demo
    /// apps and key host as their own process (the Compose file runs them in a container).
    /// Runs until SIGTERM or SIGINT, then exits 0.
    public static func serveLocalApps(_ apps: [LocalApp], logger: Logger) throws -> Never {
        signal(SIGTERM, SIG_IGN)
        signal(SIGINT, SIG_IGN)
        System.ignoreWriteSignals()
        let group = EventLoopGroup(count: 1)
        let server = try ProxyServer(group: group, configuration: ProxyConfiguration(routes: [], upstreams: []),
                                     authenticator: NoProvidersAuthenticator(realm: "demo"), accessLogFD: nil, logger: logger)
        for app in apps {
            do { try server.addListener(address: app.address, mode: .local(app.handler)) } catch {
                throw StartupError(description: "cannot listen on \(app.address): \(error)")
            }
        }
        server.start()
        logger.info("demo apps started", metadata: ["listen": "\(apps.map(\.address.description).joined(separator: ","))"])
        let sources = [SIGTERM, SIGINT].map { sig -> DispatchSourceSignal in
            let source = DispatchSource.makeSignalSource(signal: sig, queue: .main)
            source.setEventHandler {
                server.shutdown(gracePeriod: 2) { exit(0) }
            }
            source.resume()
            return source
        }
        withExtendedLifetime(sources) { dispatchMain() }
    }
}
