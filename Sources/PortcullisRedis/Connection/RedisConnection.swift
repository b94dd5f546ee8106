import Dispatch
import PortcullisCore
import PortcullisIO
import PortcullisTLS

/// One TCP connection to one Redis server, pinned to one event loop: connect,
/// pipelined commands matched to replies in FIFO order, per-command deadlines, and
/// (for pub/sub) push messages. It never reconnects; `ConnectionSupervisor` does.
///
/// Threading: every method runs on `loop.queue`, and so do all callbacks.
/// Ownership: the connection owns its `StreamSocket` and `RESPReader` (which owns
/// the C reader). `close` breaks the socket/timer → handler → self cycles.
///
/// Timeouts: one `DispatchSourceTimer` per connection, armed for the earliest
/// pending deadline. With uniform timeouts a new command never moves that deadline
/// earlier, so the hot path does not touch the timer.
final class RedisConnection: @unchecked Sendable {
    // @unchecked Sendable: confined to `loop.queue` (see type comment).
    enum State { case idle, connecting, open, closed }

    let loop: EventLoop
    let address: SocketAddress
    let reconnectOnTimeout: Bool
    private(set) var state = State.idle

    /// Called once when the connection closes for any reason.
    var onClose: ((RedisError) -> Void)?
    /// When set, array replies that are pub/sub pushes (`message`, `subscribe`, …)
    /// go here instead of to the FIFO. Only for subscriber connections: a normal
    /// command can legitimately answer `["message", …]`.
    var onPush: ((RedisReply) -> Void)?

    private var socket: StreamSocket?
    private let reader = RESPReader()
    private var output = ByteBuffer()
    private var inFlight = ReplyQueue()
    private var timer: DispatchSourceTimer?
    private var armedDeadline: UInt64 = 0
    private var connectDeadline: UInt64 = 0
    private var onConnected: (() -> Void)?

    /// TLS for this connection (`rediss://`), through the one TLS layer.
    private let tls: RedisTLSClient?

    init(address: SocketAddress, loop: EventLoop, reconnectOnTimeout: Bool, tls: RedisTLSClient? = nil) {
        self.address = address
        self.loop = loop
        self.reconnectOnTimeout = reconnectOnTimeout
        self.tls = tls
    }

    /// Secures a new socket; false (and closed, asynchronously) when TLS cannot start.
    private func secure(_ socket: StreamSocket) -> Bool {
        guard let tls else { return true }
        do {
            try TLSSession.secureClient(socket, context: tls.context, serverName: tls.serverName ?? address.host)
            return true
        } catch {
            loop.execute { [self] in close(.disconnected(reason: "TLS to \(address): \(error)")) }
            return false
        }
    }

    /// What went wrong, with the TLS reason when the handshake failed.
    private func failureReason(_ what: String) -> String {
        if let failure = (socket?.security as? TLSSession)?.lastFailure { return "\(what): TLS: \(failure)" }
        return what
    }

    // MARK: Connect

    /// Starts a non-blocking connect; `then` runs once the socket is connected.
    /// On failure or after `timeout` seconds, `onClose` is called (asynchronously).
    func connect(timeout: Double, then: @escaping () -> Void) {
        precondition(state == .idle)
        state = .connecting
        onConnected = then
        connectDeadline = MonotonicClock.nowNanoseconds() + Self.nanoseconds(timeout)
        armTimer(for: connectDeadline)
        switch Connector.start(to: address, on: loop) {
        case .connected(let s):
            socket = s
            guard secure(s) else { return }
            loop.execute { [self] in if state == .connecting { didConnect() } }
        case .inProgress(let s):
            socket = s
            guard secure(s) else { return }
            s.waitUntilWritable { [self] in
                guard state == .connecting else { return }
                if let error = Connector.finishConnect(s) {
                    close(.disconnected(reason: "connect to \(address): \(error)"))
                } else {
                    s.stopWaitingForWritable()
                    didConnect()
                }
            }
        case .failed(let error):
            loop.execute { [self] in close(.disconnected(reason: "connect to \(address): \(error)")) }
        }
    }

    private func didConnect() {
        state = .open
        connectDeadline = 0
        socket!.startReading { [self] in readable() }
        let then = onConnected
        onConnected = nil
        then?()
        if state == .open && !output.isEmpty { flush() }
    }

    // MARK: Commands

    /// Queues a command; it is written at the end of the loop's current pass,
    /// together with every other command queued in that pass (`scheduleFlush`).
    /// `handler` nil means no reply is expected (SUBSCRIBE on a push connection:
    /// its confirmations are pushes). The handler never runs inside this call.
    func send(_ arguments: CommandArguments, timeout: Double, handler: ReplyHandler?) {
        enqueue(arguments, timeout: timeout, handler: handler)
        scheduleFlush()
    }

    /// Writes the queued output at the end of the loop's current pass instead of
    /// now (corking): commands sent from several completions in one pass leave in
    /// one `send`, not one each. Rides on the socket's write handler, which the
    /// loop runs after the pass's other handlers (or in a block queued on the loop
    /// outside a pass); `flush` ends the wait once the output is drained.
    ///
    /// Measured (Benchmarks/StoreBenchmarks/Profile/redis-profile.sh, 16 GETs sent
    /// one by one from a completion on the loop): 16 `sendto` per 16 GETs before, 1 after.
    ///
    /// Outside a pass (a block from `execute`: an admin revocation, a session store call
    /// from a request loop) there is no pass end to wait for: the output is written at
    /// once, not one more queued block later (a revocation reached Redis 0.1–0.3 ms
    /// sooner on the 2-core VM, `Benchmarks/load/propagation.py`).
    func scheduleFlush() {
        guard state == .open, let socket, !output.isEmpty else { return }
        if !loop.inPass {
            // What the kernel takes now; the rest (or a failure: handlers never run inside
            // `send`) through the write handler, as in a pass.
            while !output.isEmpty, case .bytes(let n) = socket.write(output.readable) { output.consume(n) }
            if output.isEmpty {
                socket.stopWaitingForWritable()
                output.releaseIfEmpty(keepingUpTo: Self.keptOutputBytes)
                return
            }
        }
        socket.waitUntilWritable(writable)
    }

    /// The write handler, made once (not a closure allocation per command). Weak:
    /// the socket holding it belongs to this connection (and may outlive it in the
    /// loop's list of sockets to run).
    private lazy var writable: () -> Void = { [weak self] in self?.flush() }

    /// Queues a command without writing; call `flush()` after a batch (pipelining).
    func enqueue(_ arguments: CommandArguments, timeout: Double, handler: ReplyHandler?) {
        guard state == .open || state == .connecting else {
            handler?(.failure(.disconnected(reason: "connection to \(address) is closed")))
            return
        }
        arguments.encode(into: &output)
        guard let handler else { return }
        let now = MonotonicClock.nowNanoseconds()
        let deadline = now &+ Self.nanoseconds(timeout)
        inFlight.append(.init(handler: handler, deadline: deadline, sentAt: now))
        armTimer(for: deadline)
    }

    /// Writes the queued output now (what the kernel takes; the rest when writable).
    /// The buffer is kept for the next commands (up to `keptOutputBytes`), where
    /// `StreamSocket.flush` would free it and the next command allocate it again.
    func flush() {
        guard state == .open, let socket else { return }
        while !output.isEmpty {
            switch socket.write(output.readable) {
            case .bytes(let n):
                output.consume(n)
            case .wouldBlock, .endOfFile:
                socket.waitUntilWritable(writable)
                return
            case .failed:
                close(.disconnected(reason: failureReason("write to \(address) failed")))
                return
            }
        }
        socket.stopWaitingForWritable()
        output.releaseIfEmpty(keepingUpTo: Self.keptOutputBytes)
    }

    static let keptOutputBytes = 16 * 1024

    // MARK: Replies

    private func readable() {
        guard state == .open, let socket else { return }
        let scratch = loop.readScratch
        while state == .open {
            switch socket.read(into: scratch) {
            case .bytes(let n):
                do { try reader.feed(UnsafeRawBufferPointer(rebasing: scratch[..<n])) } catch {
                    close(error)
                    return
                }
                deliverReplies()
                if n < scratch.count { return }
            case .wouldBlock:
                return
            case .endOfFile:
                close(.disconnected(reason: failureReason("\(address) closed the connection")))
                return
            case .failed(let errno):
                close(.disconnected(reason: failureReason("read from \(address): \(IOError("read", errno: errno))")))
                return
            }
        }
    }

    private func deliverReplies() {
        while state == .open {
            let reply: RedisReply?
            do { reply = try reader.next() } catch {
                close(error)
                return
            }
            guard let reply else { return }
            if let onPush, Self.isPush(reply) {
                onPush(reply)
                continue
            }
            guard let entry = inFlight.popFirst() else {
                close(.protocolViolation("reply from \(address) with no command waiting"))
                return
            }
            RedisCommandTimings.shared.record(nanoseconds: MonotonicClock.nowNanoseconds() &- entry.sentAt)
            guard let handler = entry.handler else { continue }  // timed out earlier
            if case .error(let text) = reply { handler(.failure(.server(text))) } else { handler(.success(reply)) }
        }
    }

    private static func isPush(_ reply: RedisReply) -> Bool {
        guard case .array(let items) = reply, let first = items.first, case .bulk(let kind) = first else { return false }
        switch String(decoding: kind, as: UTF8.self) {
        case "message", "pmessage", "smessage", "subscribe", "unsubscribe", "psubscribe", "punsubscribe",
             "ssubscribe", "sunsubscribe", "pong": return true
        default: return false
        }
    }

    // MARK: Deadlines

    private func armTimer(for deadline: UInt64) {
        if armedDeadline != 0 && armedDeadline <= deadline { return }
        armedDeadline = deadline
        if timer == nil {
            let t = DispatchSource.makeTimerSource(queue: loop.queue)
            t.setEventHandler { [self] in timerFired() }
            t.schedule(deadline: .distantFuture)
            t.resume()
            timer = t
        }
        let now = MonotonicClock.nowNanoseconds()
        let delta = deadline > now ? deadline - now : 0
        timer!.schedule(deadline: .now() + .nanoseconds(Int(delta)), leeway: .milliseconds(1))
    }

    private func timerFired() {
        armedDeadline = 0
        let now = MonotonicClock.nowNanoseconds()
        if state == .connecting {
            if connectDeadline <= now {
                close(.disconnected(reason: "connect to \(address) timed out"))
                return
            }
            armTimer(for: connectDeadline)
        }
        let (expired, next) = inFlight.takeExpired(now: now)
        if next != 0 { armTimer(for: next) }
        for handler in expired { handler(.failure(.timeout)) }
        if !expired.isEmpty && reconnectOnTimeout && state != .closed {
            close(.disconnected(reason: "a command to \(address) timed out"))
        }
    }

    // MARK: Close

    /// Closes the socket and fails every command still in flight with `error`.
    func close(_ error: RedisError) {
        guard state != .closed else { return }
        state = .closed
        socket?.close()
        socket = nil
        timer?.setEventHandler(handler: nil)
        timer?.cancel()
        timer = nil
        output.clear()
        output.releaseIfEmpty()
        onConnected = nil
        let handlers = inFlight.removeAll()
        for handler in handlers { handler(.failure(error)) }
        let onClose = self.onClose
        self.onClose = nil
        onPush = nil
        onClose?(error)
    }

    static func nanoseconds(_ seconds: Double) -> UInt64 {
        seconds <= 0 ? 0 : UInt64(seconds * 1e9)
    }
}
