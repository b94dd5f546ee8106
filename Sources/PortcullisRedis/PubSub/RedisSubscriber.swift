import Dispatch
import PortcullisCore
import PortcullisIO

/// Pub/sub on a dedicated connection (a subscribed connection can run no other
/// command). Messages go to `onMessage`; after every (re)connect the subscriber
/// subscribes again to every channel and pattern, and calls `onSubscribed` once
/// the server has confirmed them all. Messages published while it was
/// disconnected are lost (pub/sub is fire-and-forget): a caller that must not
/// miss anything resynchronizes in `onSubscribed`.
///
/// Sharded channels (`SSUBSCRIBE`, Redis 7): on a cluster, the connection goes to the
/// master serving the channels' slot (`ClusterSlotOwner`; they must share one), where an
/// `SPUBLISH` is delivered without crossing the cluster bus, which a classic `PUBLISH`
/// crosses to reach every node. When the slot moves the server pushes a `sunsubscribe`
/// (and a failover drops the connection): the subscriber reconnects and asks for the owner
/// again. Classic channels and patterns are subscribed on the same connection. On one
/// server (standalone, Sentinel) sharded channels are subscribed there as well.
///
/// Threading: public methods may be called from any thread; state lives on
/// `loop.queue`, where all callbacks run.
public final class RedisSubscriber: @unchecked Sendable {
    // @unchecked Sendable: mutable state is confined to `loop.queue` (see type comment).
    public let loop: EventLoop
    private let supervisor: ConnectionSupervisor
    private let commandTimeout: Double
    private var channels: Set<String> = []
    private var patterns: Set<String> = []
    private var shardChannels: Set<String> = []
    private var awaitingConfirmations = 0
    private var onMessage: (@Sendable (RedisPubSubMessage) -> Void)?
    private var onSubscribed: (@Sendable () -> Void)?
    private var onStateChange: (@Sendable (RedisConnectionState) -> Void)?
    private var isShutdown = false
    /// With Sentinel: `+switch-master` moves the subscription to the new master at once (as
    /// the data client does), instead of waiting for the old master's connection to drop and
    /// for rediscovery's backoff: the owner's `onSubscribed` then catches up.
    private var switchWatcher: RedisSubscriber?

    // Keepalive: a subscribed connection only ever receives, so a silent partition (the
    // server frozen, a middlebox dropping the flow) would go unnoticed until the next
    // command. A PING every `keepaliveInterval` must be answered (a `pong` push, or any
    // message) within `keepaliveTimeout`, else the connection is dropped and reconnected.
    public static let keepaliveInterval = 2.0
    public static let keepaliveTimeout = 3.0
    private weak var connection: RedisConnection?
    private var pingSentAt: UInt64 = 0  // 0: no PING unanswered
    private var keepaliveTimer: DispatchSourceTimer?

    /// - Parameters:
    ///   - channels / patterns: subscribed on every connection (`SUBSCRIBE`, `PSUBSCRIBE`).
    ///   - shardChannels: sharded channels (`SSUBSCRIBE`), all in one hash slot; on a cluster
    ///     the connection goes to that slot's master.
    ///   - onSubscribed: after each (re)connection, once all subscriptions are confirmed.
    public convenience init(configuration: RedisConfiguration, loop: EventLoop,
                            channels: [String], patterns: [String] = [], shardChannels: [String] = [],
                            onMessage: @escaping @Sendable (RedisPubSubMessage) -> Void,
                            onSubscribed: (@Sendable () -> Void)? = nil,
                            onStateChange: (@Sendable (RedisConnectionState) -> Void)? = nil) {
        let (configured, options) = configuration.supervisorSetup()
        var resolver = configured
        if case .cluster(let seeds) = configuration.topology, let first = shardChannels.first, !(resolver is FailingResolver) {
            precondition(shardChannels.allSatisfy { HashSlot.of($0) == HashSlot.of(first) },
                         "sharded channels of one subscriber must share a hash slot")
            resolver = ClusterSlotOwner(slot: HashSlot.of(first), seeds: seeds, handshake: options.handshake,
                                        timeout: configuration.connectTimeout, tls: options.tls)
        }
        self.init(loop: loop, resolver: resolver, options: options,
                  commandTimeout: configuration.commandTimeout,
                  channels: channels, patterns: patterns, shardChannels: shardChannels,
                  onMessage: onMessage, onSubscribed: onSubscribed, onStateChange: onStateChange)
        if case .sentinel(let name, let sentinels) = configuration.topology {
            switchWatcher = RedisSubscriber.sentinelWatcher(
                sentinels: sentinels, password: configuration.sentinelPassword, configuration: configuration, loop: loop
            ) { [weak self] event in
                guard let self, event.masterName == name, !self.isShutdown else { return }
                if self.supervisor.connection?.address != event.newAddress {
                    self.supervisor.reconnectNow(reason: "sentinel: +switch-master to \(event.newAddress)")
                }
            }
        }
    }

    init(loop: EventLoop, resolver: AddressResolver, options: ConnectionSupervisor.Options, commandTimeout: Double,
         channels: [String], patterns: [String], shardChannels: [String] = [],
         onMessage: @escaping @Sendable (RedisPubSubMessage) -> Void,
         onSubscribed: (@Sendable () -> Void)?, onStateChange: (@Sendable (RedisConnectionState) -> Void)?) {
        self.loop = loop
        self.commandTimeout = commandTimeout
        self.channels = Set(channels)
        self.patterns = Set(patterns)
        self.shardChannels = Set(shardChannels)
        self.onMessage = onMessage
        self.onSubscribed = onSubscribed
        self.onStateChange = onStateChange
        supervisor = ConnectionSupervisor(loop: loop, resolver: resolver, options: options)
        supervisor.onPush = { [weak self] reply in self?.push(reply) }
        supervisor.onReady = { [weak self] conn in self?.resubscribe(conn) }
        supervisor.onStateChange = { [weak self] state in self?.onStateChange?(state) }
    }

    /// A subscriber to `+switch-master` on any one of `sentinels` (rotating on reconnect).
    static func sentinelWatcher(sentinels: [SocketAddress], password: String?, configuration: RedisConfiguration,
                                loop: EventLoop, onSwitch: @escaping @Sendable (SwitchMasterEvent) -> Void) -> RedisSubscriber {
        RedisSubscriber(
            loop: loop, resolver: RotatingAddresses(sentinels),
            options: .init(handshake: password.map { [["AUTH", $0]] } ?? [], verifyMaster: false,
                           connectTimeout: configuration.connectTimeout, reconnectOnTimeout: false,
                           backoff: configuration.backoff),
            commandTimeout: configuration.commandTimeout,
            channels: ["+switch-master"], patterns: [],
            onMessage: { message in
                if let event = SwitchMasterEvent(payload: message.text) { onSwitch(event) }
            },
            onSubscribed: nil, onStateChange: nil)
    }

    public func start() { loop.execute { [self] in startOnLoop() } }
    public func shutdown() { loop.execute { [self] in shutdownOnLoop() } }

    func startOnLoop() {
        guard !isShutdown else { return }
        supervisor.start()
        switchWatcher?.startOnLoop()
    }

    func shutdownOnLoop() {
        guard !isShutdown else { return }
        isShutdown = true
        switchWatcher?.shutdownOnLoop()
        switchWatcher = nil
        keepaliveTimer?.cancel()
        keepaliveTimer = nil
        supervisor.shutdown()
        onMessage = nil
        onSubscribed = nil
        onStateChange = nil
    }

    private func resubscribe(_ conn: RedisConnection) {
        connection = conn
        pingSentAt = 0
        startKeepalive()
        awaitingConfirmations = channels.count + patterns.count + shardChannels.count
        if !channels.isEmpty { conn.enqueue(.strings(["SUBSCRIBE"] + channels.sorted()), timeout: commandTimeout, handler: nil) }
        if !patterns.isEmpty { conn.enqueue(.strings(["PSUBSCRIBE"] + patterns.sorted()), timeout: commandTimeout, handler: nil) }
        if !shardChannels.isEmpty {
            conn.enqueue(.strings(["SSUBSCRIBE"] + shardChannels.sorted()), timeout: commandTimeout, handler: nil)
        }
        conn.flush()
        if awaitingConfirmations == 0 { onSubscribed?() }
    }

    private func startKeepalive() {
        guard keepaliveTimer == nil else { return }
        let timer = DispatchSource.makeTimerSource(queue: loop.queue)
        let interval = Int(Self.keepaliveInterval * 1000)
        timer.schedule(deadline: .now() + .milliseconds(interval), repeating: .milliseconds(interval), leeway: .milliseconds(100))
        timer.setEventHandler { [weak self] in self?.keepalive() }
        timer.resume()
        keepaliveTimer = timer
    }

    private func keepalive() {
        guard !isShutdown, let conn = connection, conn.state == .open else { return }
        let now = MonotonicClock.nowNanoseconds()
        if pingSentAt != 0 {
            if now &- pingSentAt > UInt64(Self.keepaliveTimeout * 1e9) {
                pingSentAt = 0
                // A failure, not a planned reconnect: owners must learn that the
                // subscription was blind (the store degrades and resyncs afterwards).
                conn.close(.disconnected(reason: "no answer to PING on the subscribed connection for \(Self.keepaliveTimeout) s"))
            }
            return
        }
        pingSentAt = now
        conn.enqueue(.strings(["PING"]), timeout: Self.keepaliveTimeout + Self.keepaliveInterval, handler: nil)
        conn.flush()
    }

    private func push(_ reply: RedisReply) {
        pingSentAt = 0  // anything from the server shows the path is alive
        guard case .array(let items) = reply, let kind = items.first?.string else { return }
        switch kind {
        case "message" where items.count == 3, "smessage" where items.count == 3:
            guard case .bulk(let payload) = items[2] else { return }
            onMessage?(RedisPubSubMessage(channel: items[1].string ?? "", pattern: nil, payload: payload))
        case "pmessage" where items.count == 4:
            guard case .bulk(let payload) = items[3] else { return }
            onMessage?(RedisPubSubMessage(channel: items[2].string ?? "", pattern: items[1].string, payload: payload))
        case "subscribe", "psubscribe", "ssubscribe":
            if awaitingConfirmations > 0 {
                awaitingConfirmations -= 1
                if awaitingConfirmations == 0 { onSubscribed?() }
            }
        case "sunsubscribe":
            // Never asked for: the channel's slot moved to another shard. A failure, as a
            // dropped connection is (the owner catches up once subscribed again there).
            connection?.close(.disconnected(reason: "the server ended the sharded subscription to '\(items.count > 1 ? items[1].string ?? "" : "")' (its slot moved)"))
        default:
            break
        }
    }
}
