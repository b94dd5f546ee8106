import CNGHTTP2
import Logging
import PortcullisCore
import PortcullisHTTP
import PortcullisIO
#if canImport(Glibc)
import Glibc
#endif

/// One client connection speaking HTTP/2 (RFC 9113), over TLS after ALPN `h2` or as h2c
/// with prior knowledge, on nghttp2's `mem_recv` / `mem_send` API: nghttp2 frames, keeps
/// HPACK state and flow-control windows and checks the RFC 9113 §8.2 message rules; this
/// class moves bytes between it and the stream (plain or TLS), and turns each request
/// stream into an `HTTP2Stream`, whose `Exchange` routes, authenticates and forwards it
/// exactly as an HTTP/1.1 request.
///
/// Reading: each read goes to `nghttp2_session_mem_recv` straight from the loop's read
/// scratch. Writing: after every pass (a read, an upstream read pass, a late answer) the
/// frames nghttp2 has ready are gathered and written with one system call; while the
/// socket takes no more, nothing more is pulled from nghttp2 and reading pauses, so
/// responses stay in their streams and the upstreams are paused through `isBackedUp`.
///
/// Request bodies: automatic WINDOW_UPDATEs are off; a stream's bytes are acknowledged
/// (`nghttp2_session_consume`) only as its upstream takes them, so a client can send at
/// most `initial_window_size` ahead of the upstream per stream.
///
/// Threading: everything here runs on `context.loop.queue`.
final class HTTP2ServerConnection: DeadlineTarget, PassEndTarget, @unchecked Sendable {
    // @unchecked Sendable: confined to the loop queue (see type comment).

    let context: ListenerContext
    let socket: StreamSocket
    let peer: SocketAddress
    let settings: HTTP2Settings
    let transport: RequestProtocol
    /// nghttp2's session; owned here, deleted in `close()` (never inside one of its calls).
    private(set) var session: OpaquePointer?
    /// The session's `user_data`: this connection's handle in `callbackHandles` (never a
    /// pointer), ended right after the session is deleted.
    private var sessionContext: UnsafeMutableRawPointer?
    /// What `callbackHandles` holds for this connection (see `CallbackAnchor`), while the
    /// session lives.
    private var anchor: CallbackAnchor<HTTP2ServerConnection>?
    /// `close()` was asked for inside an nghttp2 call; it happens when that call returns.
    private var closeRequested = false
    private var streams: [Int32: HTTP2Stream] = [:]
    /// Finished streams kept for reuse (their buffers and exchange), a few per connection.
    private var spareStreams: [HTTP2Stream] = []
    /// Spares kept while streams are open: as many as may be open at once, at most 64.
    private let maxSpares: Int
    /// When the spares beyond a few are let go: `spareTrimDelay` after the last stream
    /// closed, if none opened since (0: no trim pending). Trimming at once made a client
    /// whose burst of streams all finished in one read (h2load -m32 does) allocate its
    /// streams again for the next burst.
    private var trimSparesAt: UInt64 = 0
    private static let spareTrimDelay: UInt64 = 2_000_000_000
    private var outbound = ByteBuffer()
    private(set) var isClosed = false
    /// GOAWAY was queued: no new streams; the connection closes when the last one ends.
    private var goingAway = false
    /// Fatal for the connection: only what nghttp2 still has queued (the GOAWAY) is sent.
    private var terminating = false
    private var reportedAbuse = false
    private var flood: HTTP2FloodGuard
    private var inReceive = false
    /// Inside `nghttp2_session_mem_send` (its callbacks must not send).
    private var inSend = false
    private var lastActivity: UInt64
    /// When output started waiting for the socket (0: nothing waits).
    private var sendBlockedSince: UInt64 = 0
    /// The connection's own deadline (idle, send stall, closing); see `deadline`.
    private var ownDeadline: UInt64 = 0
    /// The first SETTINGS frame left with its stream limit under the real id.
    private var streamLimitAdvertised = false
    /// Reused `nghttp2_nv` storage for response heads (see `HTTP2HeaderBlock`).
    var nvScratch: [nghttp2_nv] = []
    var rangeScratch: [(name: Range<Int>, value: Range<Int>)] = []

    init(context: ListenerContext, socket: StreamSocket, peer: SocketAddress, settings: HTTP2Settings, transport: RequestProtocol) {
        self.context = context
        self.socket = socket
        self.peer = peer
        self.settings = settings
        self.transport = transport
        self.maxSpares = min(settings.maxConcurrentStreams, 64)
        self.flood = HTTP2FloodGuard(now: context.loop.lastNow)
        self.lastActivity = context.loop.lastNow
    }

    var loop: EventLoop { context.loop }

    // MARK: Starting

    /// Takes over the socket (after ALPN `h2`, or an h2c preface) with the bytes already
    /// read from it, which start with the client preface.
    func start(initialBytes: UnsafeRawBufferPointer) {
        guard makeSession() else {
            context.openConnections -= 1
            socket.close()
            return
        }
        context.http2Connections[ObjectIdentifier(self)] = self
        loop.watchDeadline(self)
        updateDeadline()
        if context.draining { drain() }
        if !initialBytes.isEmpty { receive(initialBytes) }
        flush()
        if isClosed { return }
        // The socket holds the handler, and through it the connection, until it is closed.
        socket.startReading { [self] in readable() }
    }

    private func makeSession() -> Bool {
        var callbacks: OpaquePointer?
        guard nghttp2_session_callbacks_new(&callbacks) == 0, let callbacks else { return false }
        defer { nghttp2_session_callbacks_del(callbacks) }
        HTTP2Callbacks.install(callbacks)
        var option: OpaquePointer?
        guard nghttp2_option_new(&option) == 0, let option else { return false }
        defer { nghttp2_option_del(option) }
        nghttp2_option_set_no_auto_window_update(option, 1)
        // nghttp2 keeps closed streams for RFC 7540's priority tree, as many as its local
        // SETTINGS_MAX_CONCURRENT_STREAMS; it does not know ours (see `AdvertisedStreamLimit`),
        // so without this a long-lived connection would keep every stream it ever had.
        nghttp2_option_set_no_closed_streams(option, 1)
        // Our own budgets (HTTP2FloodGuard) act first; nghttp2's stay as a backstop.
        nghttp2_option_set_max_outbound_ack(option, 1000)
        nghttp2_option_set_max_settings(option, 32)
        nghttp2_option_set_max_continuations(option, 8)
        var created: OpaquePointer?
        let anchor = CallbackAnchor(self)
        let user = Self.callbackHandles.register(anchor, shardHint: loop.index)
        guard nghttp2_session_server_new2(&created, callbacks, user, option) == 0, let created else {
            Self.callbackHandles.remove(user)
            return false
        }
        self.anchor = anchor
        session = created
        sessionContext = user
        // SETTINGS_MAX_CONCURRENT_STREAMS goes out under a private id that `flush` rewrites
        // on the wire (see `AdvertisedStreamLimit`): nghttp2 never learns the limit, so it
        // never turns a stream past it into a connection error; `beginStream` refuses it.
        var entries = [
            nghttp2_settings_entry(settings_id: Int32(AdvertisedStreamLimit.placeholderID),
                                   value: UInt32(settings.maxConcurrentStreams)),
            nghttp2_settings_entry(settings_id: Int32(NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE.rawValue),
                                   value: UInt32(settings.initialWindowSize)),
            nghttp2_settings_entry(settings_id: Int32(NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE.rawValue),
                                   value: UInt32(settings.maxHeaderListSize)),
            nghttp2_settings_entry(settings_id: Int32(NGHTTP2_SETTINGS_ENABLE_PUSH.rawValue), value: 0),
        ]
        guard nghttp2_submit_settings(created, UInt8(NGHTTP2_FLAG_NONE.rawValue), &entries, entries.count) == 0 else {
            deleteSession()
            return false
        }
        // The connection window covers every stream's window, so one stream whose upstream
        // is slow cannot hold back the others.
        let connectionWindow = min(Int(Int32.max), max(65535, settings.maxConcurrentStreams * settings.initialWindowSize))
        _ = nghttp2_session_set_local_window_size(created, UInt8(NGHTTP2_FLAG_NONE.rawValue), 0, Int32(connectionWindow))
        return true
    }

    // MARK: Reading

    private func readable() {
        reading: while !isClosed && !socket.isReadingPaused && !terminating {
            switch socket.read(into: loop.readScratch) {
            case .bytes(let n):
                _ = loop.now()
                receive(UnsafeRawBufferPointer(rebasing: loop.readScratch[0..<n]))
                if isClosed { return }
                if n < loop.readScratch.count / 2 { break reading }  // very likely drained
            case .wouldBlock:
                break reading
            case .endOfFile, .failed:
                close()
                return
            }
        }
        outputQueued()
    }

    private func receive(_ bytes: UnsafeRawBufferPointer) {
        guard let session, !terminating else { return }
        lastActivity = loop.lastNow
        inReceive = true
        let used = nghttp2_session_mem_recv(session, bytes.baseAddress?.assumingMemoryBound(to: UInt8.self), bytes.count)
        inReceive = false
        if closeRequested { close(); return }
        if used < 0 { fatal(Int32(truncatingIfNeeded: used)) }
    }

    /// nghttp2 refused to go on (a fatal error): the connection ends with GOAWAY when it can.
    private func fatal(_ code: Int32) {
        switch code {
        case NGHTTP2_ERR_FLOODED.rawValue:
            abused(.outboundFlood)
        case NGHTTP2_ERR_TOO_MANY_CONTINUATIONS.rawValue:
            abused(.continuationFlood)
        case NGHTTP2_ERR_BAD_CLIENT_MAGIC.rawValue:
            // Not HTTP/2 at all (an HTTP/1 request on an h2-only path): nothing to say in h2.
            close()
        default:
            terminate(NGHTTP2_INTERNAL_ERROR.rawValue)
        }
    }

    // MARK: Writing

    /// Something was queued with nghttp2: it leaves at the end of the poller's pass, with
    /// whatever else the pass produces for this client (every stream's upstream response
    /// that arrived in it: one write instead of one per response); outside a pass, now.
    func outputQueued() {
        if inReceive || inSend || flushAtPassEnd { return }
        if loop.inPass {
            flushAtPassEnd = true
            loop.atPassEnd(self)
        } else {
            flush()
        }
    }

    /// Registered with the loop for the end of the current pass.
    private var flushAtPassEnd = false

    func passEnded() {
        flushAtPassEnd = false
        flush()
    }

    /// Pulls every frame nghttp2 has ready and writes them with one system call per 64 KiB.
    func flush() {
        guard !isClosed, !inSend, !inReceive, let session else { return }
        if !outbound.isEmpty { return }  // the socket is full: `writable()` continues
        var gathered = ByteBuffer()
        swap(&gathered, &loop.gatherScratch)
        defer { gathered.clear(); swap(&gathered, &loop.gatherScratch) }
        while true {
            var data: UnsafePointer<UInt8>?
            inSend = true
            let n = nghttp2_session_mem_send(session, &data)
            inSend = false
            if closeRequested { close(); return }
            if n < 0 {
                close()
                return
            }
            if n > 0, let data {
                if !streamLimitAdvertised {
                    streamLimitAdvertised = AdvertisedStreamLimit.rewrite(UnsafeRawBufferPointer(start: data, count: n),
                                                                          into: &gathered)
                } else {
                    gathered.append(UnsafeRawBufferPointer(start: data, count: n))
                }
            }
            if n == 0 || gathered.readableBytes >= 64 * 1024 {
                if !gathered.isEmpty {
                    switch socket.send(gathered.readable, pending: &outbound) {
                    case .written: break
                    case .failed: close(); return
                    case .queued:
                        sendBlockedSince = loop.lastNow
                        socket.pauseReading()  // nothing new is taken in while nothing goes out
                        socket.waitUntilWritable { [self] in writable() }  // dropped by the socket when it closes
                        updateDeadline()
                        return
                    }
                    gathered.clear()
                }
                if n == 0 { break }
            }
        }
        if nghttp2_session_want_read(session) == 0 && nghttp2_session_want_write(session) == 0 {
            close()
            return
        }
        if terminating { close(); return }
        updateDeadline()
    }

    private func writable() {
        switch socket.flush(&outbound) {
        case .pending: return
        case .failed: close(); return
        case .drained: break
        }
        sendBlockedSince = 0
        if terminating { close(); return }
        socket.resumeReading()
        flush()
    }

    // MARK: Streams (called from HTTP2Callbacks)

    enum StreamAdmission { case opened, refused, abusive }

    /// A request stream starts. Past the advertised SETTINGS_MAX_CONCURRENT_STREAMS, or
    /// after our GOAWAY, it is refused alone (RST_STREAM REFUSED_STREAM, counted against a
    /// budget: a client that keeps opening streams past the limit ends with
    /// ENHANCE_YOUR_CALM); the connection and its other streams go on.
    func beginStream(_ id: Int32) -> StreamAdmission {
        if goingAway || streams.count >= settings.maxConcurrentStreams {
            if !goingAway {
                guard allow(.excessStreams) else { return .abusive }
                context.serving.metrics?.countHTTP2RefusedStream(loopIndex: loop.index)
            }
            resetStream(id, NGHTTP2_REFUSED_STREAM.rawValue)
            return .refused
        }
        trimSparesAt = 0
        let stream = spareStreams.popLast() ?? HTTP2Stream(connection: self)
        stream.open(id: id)
        streams[id] = stream
        cachedId = id
        cachedStream = stream
        return .opened
    }

    /// The stream callbacks name: one entry cached, since a frame's callbacks (begin, each
    /// field, end of headers, data) name the same stream in a row.
    @inline(__always)
    func stream(_ id: Int32) -> HTTP2Stream? {
        if id == cachedId { return cachedStream }
        guard let stream = streams[id] else { return nil }
        cachedId = id
        cachedStream = stream
        return stream
    }
    private var cachedId: Int32 = -1
    private var cachedStream: HTTP2Stream?

    func streamClosed(_ id: Int32) {
        if id == cachedId {
            cachedId = -1
            cachedStream = nil
        }
        guard let stream = streams.removeValue(forKey: id) else { return }
        // Spares make a stream allocation-free once the connection has seen as many at
        // once; an idle connection keeps a few (a sequential client needs one).
        if spareStreams.count < maxSpares {
            stream.closed()
            spareStreams.append(stream)
        } else {
            stream.discard()
        }
        if streams.isEmpty {
            if spareStreams.count > 4 { trimSparesAt = loop.lastNow &+ Self.spareTrimDelay }
            lastActivity = loop.lastNow
            updateDeadline()
        }
    }

    /// Queues RST_STREAM for `id` with `code`.
    func resetStream(_ id: Int32, _ code: UInt32) {
        guard let session else { return }
        _ = nghttp2_submit_rst_stream(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), id, code)
    }

    /// A budgeted event happened; false when its budget is overspent (the connection ends).
    @inline(__always)
    func allow(_ abuse: HTTP2Abuse) -> Bool {
        if flood.allow(abuse, now: loop.lastNow) { return true }
        abused(abuse)
        return false
    }

    /// The client attacks: GOAWAY ENHANCE_YOUR_CALM, logged once, counted, then closed.
    func abused(_ abuse: HTTP2Abuse) {
        report(abuse, goaway: "ENHANCE_YOUR_CALM")
        terminate(NGHTTP2_ENHANCE_YOUR_CALM.rawValue)
    }

    /// Logs (once per connection) and counts what the client did; `goaway` names the code
    /// the connection ends with.
    func report(_ abuse: HTTP2Abuse, goaway: String) {
        if !reportedAbuse {
            reportedAbuse = true
            context.serving.metrics?.countHTTP2Abuse(abuse, loopIndex: loop.index)
            context.serving.logger?.warning("HTTP/2 client misbehaved; connection ended", metadata: [
                "client": "\(peer.host)", "reason": "\(abuse.name)", "goaway": "\(goaway)", "protocol": "\(transport.name)"])
        }
    }

    /// Queues GOAWAY with `code` and the last stream processed; every stream is dropped.
    func terminate(_ code: UInt32) {
        guard let session, !terminating else { return }
        terminating = true
        goingAway = true
        nghttp2_session_terminate_session(session, code)
        socket.pauseReading()
        outputQueued()
    }

    /// Shutdown: GOAWAY (NO_ERROR) with the last stream id; streams in flight finish,
    /// then the connection closes. Called on the loop when the server starts draining.
    func drain() {
        guard let session, !goingAway, !isClosed else { return }
        goingAway = true
        nghttp2_submit_goaway(session, UInt8(NGHTTP2_FLAG_NONE.rawValue),
                              nghttp2_session_get_last_proc_stream_id(session), NGHTTP2_NO_ERROR.rawValue, nil, 0)
        outputQueued()
    }

    // MARK: Timeouts and closing

    private func updateDeadline() {
        if sendBlockedSince != 0 {
            ownDeadline = sendBlockedSince &+ UInt64(settings.sendTimeout * 1e9)
        } else if streams.isEmpty {
            ownDeadline = lastActivity &+ UInt64((goingAway ? 1 : settings.idleTimeout) * 1e9)
        } else {
            ownDeadline = 0
        }
    }

    /// The earliest of the connection's own deadline and its streams' (a stream waiting for
    /// a pooled connection, an authentication, its body, or its client's window). The loop's
    /// ticker reads this, so streams need no registration of their own.
    var deadline: UInt64 {
        var earliest = ownDeadline
        if trimSparesAt != 0 && (earliest == 0 || trimSparesAt < earliest) { earliest = trimSparesAt }
        for stream in streams.values {
            let d = stream.deadline
            if d != 0 && (earliest == 0 || d < earliest) { earliest = d }
        }
        return earliest
    }

    func deadlineExpired(now: UInt64) {
        if trimSparesAt != 0 && trimSparesAt <= now {
            trimSparesAt = 0
            // Still idle since the last stream closed: keep a few spares (a sequential
            // client needs one), free the rest.
            if streams.isEmpty && spareStreams.count > 4 {
                for stream in spareStreams[4...] { stream.discard() }
                spareStreams.removeLast(spareStreams.count - 4)
            }
        }
        if ownDeadline != 0 && ownDeadline <= now {
            ownDeadline = 0
            if sendBlockedSince != 0 {
                // The client has taken nothing for `send_timeout`.
                abusedOrClose(.stalledWindow)
                return
            }
            if streams.isEmpty {
                if goingAway || terminating { close(); return }
                // Idle: GOAWAY with the last stream id, then close once it left.
                drain()
                ownDeadline = now &+ 1_000_000_000
                return
            }
        }
        var expired: [HTTP2Stream] = []
        for stream in streams.values {
            let d = stream.deadline
            if d != 0 && d <= now { expired.append(stream) }
        }
        for stream in expired where !isClosed { stream.deadlineExpired(now: now) }
        outputQueued()
    }

    private func abusedOrClose(_ abuse: HTTP2Abuse) {
        if terminating { close(); return }
        abused(abuse)
        ownDeadline = loop.lastNow &+ 1_000_000_000
    }

    /// The one close path. Inside an nghttp2 call (a callback that ends the connection) it
    /// only takes note: the session is deleted when that call returned, never under it.
    func close() {
        guard !isClosed else { return }
        if inReceive || inSend {
            closeRequested = true
            return
        }
        isClosed = true
        closeRequested = false
        cachedId = -1
        cachedStream = nil
        // Every stream, open or spare, is discarded: its exchange ends and lets go of it.
        let open = Array(streams.values)
        streams.removeAll()
        for stream in open { stream.discard() }
        for stream in spareStreams { stream.discard() }
        spareStreams.removeAll()
        ownDeadline = 0
        loop.unwatchDeadline(self)
        context.http2Connections.removeValue(forKey: ObjectIdentifier(self))
        socket.close()  // drops the socket's handlers, which hold this connection
        context.openConnections -= 1
        deleteSession()
        outbound.clear()
        outbound.releaseIfEmpty()
    }

    /// Deletes the nghttp2 session and ends the handle its `user_data` is.
    private func deleteSession() {
        if let session {
            nghttp2_session_del(session)
            self.session = nil
        }
        if let sessionContext {
            self.sessionContext = nil
            Self.callbackHandles.remove(sessionContext)
        }
        anchor = nil
    }

    /// A connection let go of without its close path (nothing holds it: the listener context's
    /// table and the socket's handlers hold it until `close`) still frees its session.
    deinit { deleteSession() }

    /// The handles nghttp2's callbacks find their connection by (see `HTTP2Callbacks`).
    static let callbackHandles = CallbackHandles<CallbackAnchor<HTTP2ServerConnection>>()
}

/// SETTINGS_MAX_CONCURRENT_STREAMS as the client sees it, kept from nghttp2: nghttp2 treats
/// a stream past its local limit as a connection error (GOAWAY PROTOCOL_ERROR), where RFC
/// 9113 §5.1.2 asks for a stream error, and a client that raced its first streams past the
/// limit would lose every stream it had. So the limit is submitted under `placeholderID`
/// (an id nghttp2 does not know: checked, stored nowhere, sent as given) and the id is
/// rewritten to 0x3 in our copy of the outgoing bytes; the frame keeps its length, and the
/// client's ACK matches the SETTINGS nghttp2 sent. The connection enforces the limit itself
/// (`HTTP2ServerConnection.beginStream`).
enum AdvertisedStreamLimit {
    static let placeholderID: UInt16 = 0xF0C3
    static let maxConcurrentStreamsID: UInt16 = 0x3

    /// Appends `bytes` (whole frames from `nghttp2_session_mem_send`) to `out`, with the
    /// placeholder id in the first non-ACK SETTINGS frame rewritten; true once rewritten.
    static func rewrite(_ bytes: UnsafeRawBufferPointer, into out: inout ByteBuffer) -> Bool {
        var frame = 0
        while frame + 9 <= bytes.count {
            let length = Int(bytes[frame]) << 16 | Int(bytes[frame + 1]) << 8 | Int(bytes[frame + 2])
            let end = frame + 9 + length
            guard end <= bytes.count else { break }
            if bytes[frame + 3] == 0x4 && bytes[frame + 4] & 0x1 == 0 {
                var copy = [UInt8](bytes)
                var entry = frame + 9
                var found = false
                while entry + 6 <= end {
                    if UInt16(copy[entry]) << 8 | UInt16(copy[entry + 1]) == placeholderID {
                        copy[entry] = UInt8(maxConcurrentStreamsID >> 8)
                        copy[entry + 1] = UInt8(maxConcurrentStreamsID & 0xFF)
                        found = true
                    }
                    entry += 6
                }
                copy.withUnsafeBytes { out.append($0) }
                return found
            }
            frame = end
        }
        out.append(bytes)
        return false
    }
}

/// The HTTP/2 client connection preface (RFC 9113 §3.4), recognised on h2c listeners.
enum HTTP2Preface {
    static let bytes: StaticString = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

    enum Match { case preface, incomplete, other }

    static func check(_ received: UnsafeRawBufferPointer) -> Match {
        let count = bytes.utf8CodeUnitCount
        let expected = UnsafeRawBufferPointer(start: bytes.utf8Start, count: count)
        let n = min(count, received.count)
        for i in 0..<n where received[i] != expected[i] { return .other }
        return n == count ? .preface : .incomplete
    }
}
