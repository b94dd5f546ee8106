import PortcullisEdgeAuth
import Foundation
import Logging
import PortcullisAuth
import PortcullisIO
import PortcullisKeys
import PortcullisProxy
import PortcullisRedis
import PortcullisCore

/// Fetched key sets for the authenticator: unknown-`kid` refetches through
/// `KeyManager`, which parks nothing itself; the authenticator parks the
/// request (`AuthOutcome.deferred`) until the completion runs.
final class SigningKeys: KeyRefetching {
    let manager: KeyManager
    let managed: Set<String>

    init(manager: KeyManager, managed: Set<String>) {
        self.manager = manager
        self.managed = managed
    }

    func refetchForUnknownKey(provider: String, loop: EventLoop, completion: @escaping @Sendable () -> Void) -> Bool {
        guard managed.contains(provider) else { return false }
        manager.refetchForUnknownKey(provider: provider, on: loop) { _ in completion() }
        return true
    }

    /// `GET /keys`.
    func statusJSON() -> String {
        let items = manager.status().map { s -> String in
            var fields = ["\"provider\":\(JSONText.quoted(s.provider))", "\"source\":\(JSONText.quoted(s.source))",
                          "\"kids\":[\(s.kids.map(JSONText.quoted).joined(separator: ","))]",
                          "\"health\":\(JSONText.quoted("\(s.health)"))",
                          "\"consecutive_failures\":\(s.consecutiveFailures)"]
            if let at = s.fetchedAt { fields.append("\"fetched_at\":\(Int64(at))") }
            if let at = s.expiresAt { fields.append("\"expires_at\":\(Int64(at))") }
            if let error = s.lastError { fields.append("\"last_error\":\(JSONText.quoted(error))") }
            return "{" + fields.joined(separator: ",") + "}"
        }
        return "{\"providers\":[\(items.joined(separator: ","))]}\n"
    }

    /// The key manager for every provider whose keys come from a URL, sharing
    /// fetched documents through Redis when the store is Redis.
    /// `onEvent` hears every state change (on the manager's queue; it must not call back).
    /// `shared`: the fetch loop and key cache a reload carries over (nil: new ones), so
    /// a provider whose key source did not change installs its cached document at once.
    static func make(_ configuration: GatewayConfiguration, verifier: CredentialVerifier, logger: Logger,
                     shared: KeyCacheHolder? = nil,
                     onEvent: (@Sendable (KeyManagerEvent) -> Void)? = nil) throws -> SigningKeys? {
        var providers: [ManagedKeyProvider] = []
        for p in configuration.providers {
            guard case .url(let url) = p.keys else { continue }
            let source = try KeySource.forProvider(p.configuration.name, kind: p.configuration.kind, jwksURL: url)
            if let source { providers.append(ManagedKeyProvider(name: p.configuration.name, source: source)) }
        }
        guard !providers.isEmpty else { return nil }
        let r = configuration.keyRefresh
        var settings = KeyManagerConfiguration(minimumTTL: r.minimumTTL, maximumTTL: r.maximumTTL, staleFor: r.serveStaleFor,
                                               minimumRefetchInterval: r.minimumRefetchInterval)
        settings.fetch.totalTimeout = r.fetchTimeout
        settings.fetch.connectTimeout = min(settings.fetch.connectTimeout, r.fetchTimeout)
        let holder = shared ?? KeyCacheHolder()
        let fetchLoop = holder.fetchLoop
        let cache = try holder.cache(for: configuration)
        // The manager logs each state change itself (once).
        let manager = try KeyManager(verifier: verifier, providers: providers, cache: cache, fetchLoop: fetchLoop,
                                     configuration: settings, logger: logger, onEvent: onEvent)
        return SigningKeys(manager: manager, managed: Set(providers.map(\.name)))
    }
}

/// The key fetch loop and the shared key cache, kept across reloads: the cache is replaced
/// only when the store's Redis settings change (or Redis is added or removed).
final class KeyCacheHolder: @unchecked Sendable {
    // @unchecked Sendable: used by one reload at a time (the start, then the reload queue).
    let fetchLoop = EventLoop(index: -2)
    private var current: (any SharedKeyCache)?
    private var redisKey: String?

    func cache(for configuration: GatewayConfiguration) throws -> any SharedKeyCache {
        let key: String? = configuration.store.usesRedis ? sameSettingsText(configuration.store) : nil
        if let current, key == redisKey { return current }
        let cache: any SharedKeyCache
        if configuration.store.usesRedis {
            cache = RedisKeyCache(client: RedisClient(configuration: try StoreRevocations.redisConfiguration(configuration.store),
                                                      loop: fetchLoop), staleFor: configuration.keyRefresh.serveStaleFor)
        } else {
            cache = InProcessKeyCache()
        }
        current = cache
        redisKey = key
        return cache
    }

    /// The cache in use now (nil before the first `cache(for:)`).
    var inUse: (any SharedKeyCache)? { current }
}

/// A value's full text (every stored property, secrets included: never logged), to tell
/// whether a reload changed a section.
func sameSettingsText<T>(_ value: T) -> String {
    var text = ""
    dump(value, to: &text)
    return text
}

/// Fetched key documents shared by every instance through Redis:
/// `portcullis:keys:<provider>` holds `format\nfetchedAt\nexpiresAt\n<document>`
/// (kept `staleFor` past expiry); `portcullis:keys:<provider>:claim` is the
/// `SET NX PX` claim that lets one instance fetch per refetch interval.
final class RedisKeyCache: SharedKeyCache {
    let client: RedisClient
    let staleFor: Double

    init(client: RedisClient, staleFor: Double) {
        self.client = client
        self.staleFor = staleFor
        client.start()
    }

    func load(provider: String, completion: @escaping @Sendable (CachedKeyDocument?) -> Void) {
        client.send(["GET", "portcullis:keys:\(provider)"]) { result in
            guard case .success(.bulk(let bytes)) = result else { completion(nil); return }
            var lines: [[UInt8]] = []
            var start = 0
            for (i, b) in bytes.enumerated() where b == 0x0A && lines.count < 3 {
                lines.append(Array(bytes[start..<i]))
                start = i + 1
            }
            guard lines.count == 3, let format = KeyDocumentFormat(rawValue: String(decoding: lines[0], as: UTF8.self)),
                  let fetchedAt = Double(String(decoding: lines[1], as: UTF8.self)),
                  let expiresAt = Double(String(decoding: lines[2], as: UTF8.self)) else { completion(nil); return }
            completion(CachedKeyDocument(body: Array(bytes[start...]), format: format, fetchedAt: fetchedAt, expiresAt: expiresAt))
        }
    }

    func store(provider: String, document: CachedKeyDocument) {
        var value = Array("\(document.format.rawValue)\n\(document.fetchedAt)\n\(document.expiresAt)\n".utf8)
        value.append(contentsOf: document.body)
        let keep = max(1, Int64(document.expiresAt + staleFor - Date().timeIntervalSince1970))
        client.send(bytes: [Array("SET".utf8), Array("portcullis:keys:\(provider)".utf8), value,
                            Array("EX".utf8), Array(String(keep).utf8)]) { _ in }
    }

    func forget(provider: String) {
        // One key per command: on a cluster the two live in different slots.
        client.pipeline([["DEL", "portcullis:keys:\(provider)"], ["DEL", "portcullis:keys:\(provider):claim"]]) { _ in }
    }

    func claimFetch(provider: String, interval: Double, completion: @escaping @Sendable (Bool) -> Void) {
        client.send(["SET", "portcullis:keys:\(provider):claim", "1", "NX", "PX", String(max(1, Int(interval * 1000)))]) { result in
            switch result {
            case .success(.simpleString): completion(true)
            case .success: completion(false)
            // Redis down: fetch locally rather than never.
            case .failure: completion(true)
            }
        }
    }
}
