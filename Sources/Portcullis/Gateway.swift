import PortcullisEdgeAuth
import Dispatch
import Foundation
import PortcullisVersion
import Logging
import PortcullisAuth
import PortcullisCore
import PortcullisStore
import PortcullisIO
import PortcullisKeys
import PortcullisProxy
import PortcullisRedis
import PortcullisTLS
import PortcullisOutbound

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

    /// Binds all listeners and starts serving; returns the running gateway. `source` is
    /// what a reload reads (default: `configuration.file` again).
    public static func start(_ configuration: GatewayConfiguration, localApps: [LocalApp] = [],
                             logger: Logger,
                             source: (@Sendable () throws -> GatewayConfiguration)? = nil) throws -> GatewayRuntime {
        System.ignoreWriteSignals()
        let file = configuration.file
        let runtime = try GatewayRuntime(configuration, localApps: localApps, logger: logger,
                                         source: source ?? { try ConfigurationLoader.load(file: file) })
        runtime.server.start()
        runtime.scheduleCertificateCheck()
        let egress = EgressProxy.Settings.process
        if egress.http != nil || egress.https != nil {
            // Said once: where key fetches and the lookup hook go (never the proxy's credentials).
            logger.info("outbound requests go through the egress proxy", metadata: [
                "https_proxy": "\(egress.https?.description ?? "-")", "http_proxy": "\(egress.http?.description ?? "-")",
                "no_proxy": "\(egress.noProxy.joined(separator: ","))"])
        }
        logger.info("portcullis started", metadata: [
            "version": "\(PortcullisVersion.version)", "commit": "\(PortcullisVersion.commit)",
            "listen": "\(configuration.listen.map { $0.address.description }.joined(separator: ","))",
            "admin": "\(configuration.admin?.address.description ?? "off")",
            "loops": "\(runtime.group.loops.count)",
            "routes": "\(configuration.proxy.routes.count)",
            "upstreams": "\(configuration.proxy.upstreams.count)",
            "config_sha256": "\(configuration.sha256)",
        ])
        return runtime
    }

    /// A reload: every kept upstream's client certificate is read again. An upstream whose files fail
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

    /// Runs until SIGTERM or SIGINT, then drains (up to `shutdown.grace`) and exits. SIGHUP
    /// reloads the configuration (`source`; default: the file again), see `GatewayRuntime`.
    public static func runForever(_ configuration: GatewayConfiguration, localApps: [LocalApp] = [],
                                  logger: Logger,
                                  source: (@Sendable () throws -> GatewayConfiguration)? = nil) throws -> Never {
        // Signal sources exist before the listeners do: a SIGHUP, SIGTERM or SIGINT that
        // arrives while the gateway starts (once `signal(_, SIG_IGN)` is set, the kernel
        // discards ignored signals until a source is active) is kept and acted on as soon
        // as the gateway runs, never lost.
        signal(SIGTERM, SIG_IGN)
        signal(SIGINT, SIG_IGN)
        signal(SIGHUP, SIG_IGN)
        // SIGUSR1 reopens the log files (nginx's convention; logrotate's nginx recipe sends it).
        // Ignored until the runtime exists: at start every file was just opened.
        signal(SIGUSR1, SIG_IGN)
        _ = LogFiles.standardStreamPaths  // read now, before any rotation renames them
        let state = SignalState()
        var sources: [DispatchSourceSignal] = []
        let running = LockedValue<GatewayRuntime?>(nil)
        let reopen = DispatchSource.makeSignalSource(signal: SIGUSR1, queue: .global())
        reopen.setEventHandler { running.withLock { $0 }?.reopenLogs(trigger: "SIGUSR1") }
        reopen.resume()
        sources.append(reopen)
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

        let runtime = try start(configuration, localApps: localApps, logger: logger, source: source)
        running.withLock { $0 = runtime }
        let server = runtime.server
        let admin = runtime.admin
        let shutdown = ShutdownSequence()
        /// After the drain delay (or at once): stop accepting, GOAWAY, close idle connections,
        /// give in-flight requests `grace`, exit.
        @Sendable func stopServing() {
            // The settings of the configuration serving now (a reload may have changed them).
            let grace = runtime.configuration.shutdown.grace
            logger.info("draining", metadata: ["grace_seconds": "\(grace)"])
            server.shutdown(gracePeriod: grace) {
                logger.info("stopped")
                exit(0)
            }
        }
        state.install(reload: {
            logger.info("SIGHUP: reloading the configuration", metadata: ["file": "\(configuration.file)"])
            runtime.reload(trigger: "SIGHUP")
        }, stop: { sig in
            let name = sig == SIGTERM ? "SIGTERM" : "SIGINT"
            switch shutdown.signalled() {
            case .first:
                // `/readyz` says 503 at once; traffic is still served for the drain delay.
                admin.draining = true
                let settings = runtime.configuration.shutdown
                let delay = settings.drainDelay
                logger.info("shutting down", metadata: ["signal": "\(name)", "drain_delay_seconds": "\(delay)",
                                                        "grace_seconds": "\(settings.grace)"])
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
        withExtendedLifetime((sources, runtime)) { dispatchMain() }
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
    /// Blocks SIGTERM and SIGINT on the calling thread (and so on every thread it starts): call
    /// first thing in a command that ends with `serveLocalApps`.
    public static func blockStopSignals() {
        var set = stopSignals
        pthread_sigmask(SIG_BLOCK, &set, nil)
    }

    private static var stopSignals: sigset_t {
        var set = sigset_t()
        sigemptyset(&set)
        sigaddset(&set, SIGTERM)
        sigaddset(&set, SIGINT)
        return set
    }

    public static func serveLocalApps(_ apps: [LocalApp], logger: Logger) throws -> Never {
        // SIGTERM and SIGINT are taken with `sigwait` on this thread, not through libdispatch's
        // signal sources: a source's handler, run on a main thread parked in `dispatchMain`'s
        // `sigsuspend`, trips AddressSanitizer's `sigfillset` interceptor (a false positive
        // that ended `demo-apps` with status 1 under ASan). Blocked first, so every loop thread
        // started below inherits the mask and the signals wait for `sigwait`.
        blockStopSignals()
        var stopSignals = Self.stopSignals
        System.ignoreWriteSignals()
        let group = EventLoopGroup(count: 1)
        let server = try ProxyServer(group: group, configuration: ProxyConfiguration(routes: [], upstreams: []),
                                     authenticator: NoProvidersAuthenticator(realm: "demo"), accessLogFD: nil, logger: logger)
        for app in apps {
            do { try server.addListener(address: app.address, mode: .local(app.handler), managed: false) } catch {
                throw StartupError(description: "cannot listen on \(app.address): \(error)")
            }
        }
        server.start()
        logger.info("demo apps started", metadata: ["listen": "\(apps.map(\.address.description).joined(separator: ","))"])
        var stopping = false
        while true {
            var received: Int32 = 0
            guard sigwait(&stopSignals, &received) == 0 else { continue }
            if stopping { exit(0) }  // a second signal: at once
            stopping = true
            server.shutdown(gracePeriod: 2) { exit(0) }
        }
    }
}
