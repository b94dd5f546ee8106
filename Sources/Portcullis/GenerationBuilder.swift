import PortcullisSessions
import Foundation
import Logging
import PortcullisAuth
import PortcullisEdgeAuth
import PortcullisIO
import PortcullisKeys
import PortcullisProxy
import PortcullisRateLimit
import PortcullisRedis
import PortcullisTLS

/// The one path from a checked configuration to its running parts, at start and at every
/// reload (`build`): TLS contexts, the access log, the session service and its endpoints,
/// the assertion keys, the verifier with its key manager, the authenticator. Nothing it
/// builds is visible to a request until the server takes it; `undo` tears down what a
/// generation opened should the swap not happen. The store (revocations, sessions) is not
/// built here: it is opened once at start and carried by every generation.
///
/// Owned by the runtime; used in its initializer and then on its reload queue only.
final class GenerationBuilder: @unchecked Sendable {
    // @unchecked Sendable: `secretsClient` and `ticketKeysStarted` change in the runtime's
    // initializer and then on its reload queue only.
    let logger: Logger
    let metrics: GatewayMetrics
    /// Fetched key documents, kept across generations (a reload fetches only new sources).
    let keyCaches = KeyCacheHolder()
    /// One Redis client for the secrets instances share (ticket keys, generated assertion key).
    private var secretsClient: RedisClient?
    private var ticketKeysStarted = false
    /// `rate_limits:` state, kept across generations: a reload does not hand every client a
    /// fresh budget (a rule keeps its keys while its name stays). Made with the first file
    /// that has rules.
    private(set) var rateLimitBackend: RateLimitingAuthenticator.Backend?

    /// The gateway's event loops (a per-loop Redis connection for rate limits).
    let loops: [EventLoop]

    init(logger: Logger, metrics: GatewayMetrics, loops: [EventLoop]) {
        self.logger = logger
        self.metrics = metrics
        self.loops = loops
    }

    struct Generation {
        /// The configuration with the session endpoints attached and the `session` provider's keys.
        var configuration: GatewayConfiguration
        /// Per `listen` entry (nil: plain).
        var tlsEndpoints: [TLSServerEndpoint?]
        var accessLogFD: Int32?
        var sessions: SessionService?
        var assertionKeys: AssertionKeys?
        var built: BuiltAuthenticator
        /// Tears down what this generation opened, should the swap not happen.
        var undo: [() -> Void] = []
    }

    /// Why a generation could not be built: the reason a refused reload or a failed start names.
    struct GenerationFailure: Error, CustomStringConvertible { let description: String }

    /// Builds `next`'s parts. `previous`: the generation serving (nil at start): what did not
    /// change is carried over from it (the session store and a generated session key, the
    /// assertion keys, the key cache of unchanged key sources); `accessLog`: the access log
    /// open now (nil at start), kept when `next` names the same.
    func build(_ next: GatewayConfiguration, previous: GatewayRuntime.Parts?, previousSessions: SessionService?,
               accessLog: (target: GatewayConfiguration.AccessLogTarget, fd: Int32?)?,
                         revocations: StoreRevocations,
                         onKeyEvent: (@Sendable (KeyManagerEvent) -> Void)? = nil) throws(GenerationFailure) -> Generation {
        var undo: [() -> Void] = []
        func fail(_ reason: String) -> GenerationFailure {
            for step in undo.reversed() { step() }
            return GenerationFailure(description: reason)
        }
        var next = next
        // Ticket keys run before the first TLS context of the new file loads them.
        do { try startTicketKeysIfNeeded(next) } catch { throw fail("\(next.file): store: \(error)") }
        var endpoints: [TLSServerEndpoint?] = []
        for (index, listen) in next.listen.enumerated() {
            guard let settings = listen.tls else { endpoints.append(nil); continue }
            do { endpoints.append(try TLSServerEndpoint(settings: settings)) } catch {
                throw fail("\(next.file): listen[\(index)].tls: \(error)")
            }
        }
        // The access log open now (`accessLog`; nil at start) is kept unless the file names another.
        var accessLogFD = accessLog?.fd
        if accessLog == nil || next.accessLog != accessLog?.target {
            do { accessLogFD = try GatewayRuntime.openAccessLog(next) } catch { throw fail("\(error)") }
            if accessLog != nil, case .file = next.accessLog, let fd = accessLogFD { undo.append { close(fd) } }
        }
        let assertionKeys: AssertionKeys?
        do {
            if next.identity.assertion != nil, next.store.usesRedis { _ = try sharedSecretsClient(next) }
            assertionKeys = try makeAssertionKeys(next, previous: previous?.assertionKeys)
        } catch {
            throw fail("\(error)")
        }
        let sessions: SessionService?
        do {
            // The session store carries over, as the revocation store does.
            sessions = try GatewayRuntime.prepareSessions(&next, store: previousSessions?.store, previous: previousSessions,
                                                revocations: revocations, assertionKeys: assertionKeys, logger: logger)
        } catch {
            throw fail("\(next.file): sessions: \(error)")
        }
        if let opened = sessions?.store as? RedisSessionStore, opened !== previousSessions?.store {
            undo.append { opened.client.shutdown() }  // opened for this generation
        }
        let built: BuiltAuthenticator
        do {
            if let previous, let cache = keyCaches.inUse {
                // A provider whose key source changed must not install what the cache holds for its name.
                let oldSources = Dictionary(previous.configuration.providers.map { ($0.configuration.name, sameSettingsText($0.keys)) },
                                            uniquingKeysWith: { a, _ in a })
                for provider in next.providers where oldSources[provider.configuration.name] != sameSettingsText(provider.keys) {
                    cache.forget(provider: provider.configuration.name)
                }
            }
            built = try makeAuthenticator(next, revocations: revocations, assertionKeys: assertionKeys, onEvent: onKeyEvent)
        } catch {
            throw fail("\(error)")
        }
        return Generation(configuration: next, tlsEndpoints: endpoints, accessLogFD: accessLogFD, sessions: sessions,
                          assertionKeys: assertionKeys, built: built, undo: undo)
    }

    func sharedSecretsClient(_ configuration: GatewayConfiguration) throws -> RedisClient {
        if let secretsClient { return secretsClient }
        let client = RedisClient(configuration: try StoreRevocations.redisConfiguration(configuration.store),
                                 loop: EventLoop(index: -3))
        client.start()
        secretsClient = client
        return client
    }

    /// TLS session ticket keys rotate once any listener terminates TLS (shared through
    /// Redis when the store is Redis).
    func startTicketKeysIfNeeded(_ configuration: GatewayConfiguration) throws {
        guard !ticketKeysStarted, configuration.listen.contains(where: { $0.tls != nil }) else { return }
        ticketKeysStarted = true
        if configuration.store.usesRedis {
            SharedTicketKeys.install(client: try sharedSecretsClient(configuration), rotation: TicketKeys.shared.rotationInterval)
        } else {
            TicketKeys.shared.startRotation()
        }
    }

    /// `identity.assertion`'s keys: the previous ones when the settings did not change (their
    /// files read again), so a generated key survives reloads.
    func makeAssertionKeys(_ configuration: GatewayConfiguration, previous: AssertionKeys?) throws -> AssertionKeys? {
        guard let settings = configuration.identity.assertion else { return nil }
        if let previous, sameSettingsText(previous.settings) == sameSettingsText(settings) {
            do {
                if try previous.reload() {
                    logger.info("identity assertion keys reloaded", metadata: ["kids": "\(previous.keyIDs.joined(separator: ","))"])
                }
            } catch {
                throw Gateway.StartupError(description: "\(configuration.file): identity.assertion.signing_keys: \(error)")
            }
            return previous
        }
        let keys: AssertionKeys
        do { keys = try AssertionKeys(settings: settings) } catch {
            throw Gateway.StartupError(description: "\(configuration.file): identity.assertion: \(error)")
        }
        if settings.algorithm != .hs256, settings.signingKeys.isEmpty, configuration.store.usesRedis {
            SharedAssertionKey.install(keys: keys, client: try sharedSecretsClient(configuration), logger: logger)
        }
        return keys
    }

    struct BuiltAuthenticator {
        var authenticator: any RequestAuthenticator
        var verifier: CredentialVerifier?
        var keys: SigningKeys?
    }

    func makeAuthenticator(_ configuration: GatewayConfiguration, revocations: StoreRevocations,
                                   assertionKeys: AssertionKeys?,
                                   onEvent: (@Sendable (KeyManagerEvent) -> Void)? = nil) throws -> BuiltAuthenticator {
        guard !configuration.providers.isEmpty else {
            return BuiltAuthenticator(authenticator: try limited(NoProvidersAuthenticator(realm: configuration.proxy.realm), configuration))
        }
        let verifier = try Gateway.makeVerifier(configuration)
        let keys: SigningKeys?
        do {
            keys = try SigningKeys.make(configuration, verifier: verifier, logger: logger, shared: keyCaches, onEvent: onEvent)
        } catch {
            throw Gateway.StartupError(description: "\(configuration.file): providers: \(error)")
        }
        let counters = metrics.auth.sharing(providers: configuration.providers.map(\.configuration.name))
        let authenticator = EdgeAuthenticator(verifier: verifier, configuration: configuration.edgeAuth, revocations: revocations,
                                              keys: keys, counters: counters, logger: logger, assertionKeys: assertionKeys)
        return BuiltAuthenticator(authenticator: try limited(authenticator, configuration), verifier: verifier, keys: keys)
    }

    /// `authenticator` with the file's `rate_limits:` applied to what it lets through (itself
    /// when there are none).
    private func limited(_ authenticator: any RequestAuthenticator,
                         _ configuration: GatewayConfiguration) throws -> any RequestAuthenticator {
        let settings = configuration.rateLimits
        guard !settings.rules.isEmpty else { return authenticator }
        let backend: RateLimitingAuthenticator.Backend
        if let existing = rateLimitBackend {
            backend = existing
        } else if configuration.store.usesRedis {
            let redis = try StoreRevocations.redisConfiguration(configuration.store)
            // Shared by every instance; a connection per event loop of its own, so a limit's
            // round trip is written and answered on the request's loop (no queue hop) and never
            // waits behind a revocation resync.
            let clients = loops.map { RedisClient(configuration: redis, loop: $0) }
            clients.forEach { $0.start() }
            let store = RedisRateLimitStore(clients: clients, logger: logger, maxKeys: settings.maxKeys)
            backend = .shared(store)
            metrics.attach(rateLimits: { store.counts() })
        } else {
            let store = EmbeddedRateLimitStore(maxKeys: settings.maxKeys)
            backend = .embedded(store)
            metrics.attach(rateLimits: { store.counts() })
        }
        rateLimitBackend = backend
        let routes = configuration.proxy.routes
        let edgeAuth = configuration.edgeAuth
        let errorBodies = routes.indices.map { edgeAuth.errorBody(route: $0) }
        return RateLimitingAuthenticator(wrapping: authenticator, settings: settings, routePaths: routes.map(\.pathPrefix),
                                         errorBodies: errorBodies, backend: backend, trustedProxies: configuration.proxy.trustedProxies)
    }

}
