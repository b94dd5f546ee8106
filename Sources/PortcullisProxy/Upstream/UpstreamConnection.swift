import PortcullisCore
import PortcullisHTTP
import PortcullisIO
import PortcullisTLS

/// One keep-alive HTTP/1.1 connection to an upstream app, owned by an
/// `UpstreamPool` on one loop. While an exchange is active it is attached to that
/// `Exchange` (a strong reference each way, broken when the exchange ends).
///
/// Responses are checked with the strict response parser; a chunked body is
/// decoded only to find its end and is forwarded as received to HTTP/1.1 clients
/// (clients that need it decoded, HTTP/1.0, get the payload and a connection close).
///
/// Threading: everything runs on `pool.loop.queue`.
final class UpstreamConnection: DeadlineTarget, @unchecked Sendable {
    // @unchecked Sendable: confined to the loop queue (see type comment).

    enum State { case connecting, idle, active, closed }
    enum ResponsePhase { case head, length, chunked, untilClose, tunnel, done }

    /// The pool holds its idle connections and this holds the pool (a cycle for idle
    /// connections only, broken when they close; pools close theirs when they go).
    let pool: UpstreamPool
    let socket: StreamSocket
    private(set) var state: State = .connecting
    var exchange: Exchange?
    /// True when taken from the idle list (it may have been closed by the upstream meanwhile).
    var reused = false
    var deadline: UInt64 = 0

    private var inbound = ByteBuffer()
    private var outbound = ByteBuffer()
    private var parser: ResponseHeadParser
    private var head = ResponseHead()
    private var phase: ResponsePhase = .done
    private var remaining = 0
    private var decoder: ChunkedDecoder
    private var method: HTTPMethod = .get
    private var requestSent = false
    private var receivedResponseBytes = false
    private var dechunk = false

    /// The addresses this connection's request may try, and the one this is.
    private let addresses: [SocketAddress]
    private let attempt: Int
    /// Reachability is reported once per connection, when it first delivers bytes.
    private var reportedReachable = false
    /// The connection holds one of the upstream's `max_connections` slots, returned when
    /// it closes; false once a failed connect passed the slot on to the next address.
    var holdsSlot = true
    /// "IP:port" of the address this connection is to, for the access log (made once per
    /// connection, reused by every request it carries).
    private(set) lazy var addressText: String = attempt < addresses.count ? addresses[attempt].description : "-"

    init(pool: UpstreamPool, socket: StreamSocket, addresses: [SocketAddress], attempt: Int) {
        self.pool = pool
        self.socket = socket
        self.addresses = addresses
        self.attempt = attempt
        self.parser = ResponseHeadParser(limits: pool.responseLimits)
        self.decoder = ChunkedDecoder(limits: pool.responseLimits)
    }

    var loop: EventLoop { pool.loop }
    var isConnected: Bool { state == .active || state == .idle }
    /// False while unsent request bytes pile up (the client's reading is paused).
    var canTakeMore: Bool { outbound.readableBytes < 64 * 1024 }

    // MARK: Connecting

    func connect(inProgress: Bool) {
        loop.watchDeadline(self)
        if inProgress {
            deadline = loop.lastNow &+ pool.connectTimeoutNanoseconds
            socket.waitUntilWritable { [self] in connectFinished() }  // dropped when the socket closes
        } else {
            connected()
        }
    }

    private func connectFinished() {
        socket.stopWaitingForWritable()
        if let error = Connector.finishConnect(socket) {
            connectFailed(error)
            return
        }
        connected()
    }

    /// Hands the request to the next address first (so the pool slot passes on), then closes.
    private func connectFailed(_ error: IOError) {
        let exchange = self.exchange
        self.exchange = nil
        holdsSlot = false  // the next attempt (or the failure) takes it over
        pool.connectAttemptFailed(exchange, addresses, attempt: attempt, error: error)
        close()
    }

    private func connected() {
        state = .active
        deadline = 0
        if socket.security == nil { reportReachable() }
        // The socket holds the handler, and through it the connection, until it is closed.
        socket.startReading { [self] in readable() }
        exchange?.upstreamConnected()
    }

    // MARK: Sending the request

    /// Starts an exchange: sends the request head.
    func beginExchange(method: HTTPMethod, head: UnsafeRawBufferPointer) {
        self.method = method
        state = .active
        phase = .head
        parser.reset()
        requestSent = false
        receivedResponseBytes = false
        dechunk = false
        deadline = loop.lastNow &+ pool.responseTimeoutNanoseconds
        send(head)
    }

    /// The whole request has been handed over; the response timeout runs from here.
    func requestFullySent() {
        requestSent = true
        deadline = loop.lastNow &+ pool.responseTimeoutNanoseconds
    }

    func send(_ bytes: UnsafeRawBufferPointer) {
        guard state != .closed, bytes.count > 0 else { return }
        // While the request is still flowing the response timeout counts from the last
        // progress, not from the head: a long upload is not a silent upstream.
        if !requestSent && phase != .tunnel { deadline = loop.lastNow &+ pool.responseTimeoutNanoseconds }
        let wasQueued = !outbound.isEmpty
        switch socket.send(bytes, pending: &outbound) {
        case .written: return
        case .failed: failed(); return
        case .queued: if wasQueued { return }
        }
        socket.waitUntilWritable { [self] in writable() }  // dropped when the socket closes
    }

    /// Re-frames one piece of a chunked request body.
    func sendChunk(_ data: UnsafeRawBufferPointer) {
        guard data.count > 0 else { return }
        var frame = ByteBuffer()
        swap(&frame, &loop.headScratch)
        frame.appendHex(data.count)
        frame.append("\r\n")
        frame.append(data)
        frame.append("\r\n")
        send(frame.readable)
        frame.clear()
        swap(&frame, &loop.headScratch)
    }

    func sendLastChunk() {
        let last: StaticString = "0\r\n\r\n"
        send(UnsafeRawBufferPointer(start: last.utf8Start, count: last.utf8CodeUnitCount))
    }

    private func writable() {
        switch socket.flush(&outbound) {
        case .pending: return
        case .failed: failed(); return
        case .drained: exchange?.upstreamDrained()
        }
    }

    // MARK: Receiving the response

    private func readable() {
        // Everything this pass sends to the client leaves in one write at its end.
        let corked = exchange
        corked?.corkOutput()
        defer { corked?.uncorkOutput() }
        while state != .closed && !socket.isReadingPaused {
            let fromScratch = inbound.isEmpty
            let result = fromScratch
                ? socket.read(into: loop.readScratch)
                : socket.read(into: inbound.writableSpace(minimum: 4096))
            switch result {
            case .bytes(let n):
                _ = loop.now()
                if state == .idle {
                    // An idle connection must not speak: drop it.
                    unexpectedBytes(n, "a response while idle")
                    return
                }
                receivedResponseBytes = true
                if !reportedReachable { reportReachable() }
                if phase != .tunnel { deadline = loop.lastNow &+ pool.responseTimeoutNanoseconds }
                if fromScratch {
                    let bytes = UnsafeRawBufferPointer(rebasing: loop.readScratch[0..<n])
                    let used = process(bytes)
                    if used < n && state != .closed { inbound.append(UnsafeRawBufferPointer(rebasing: bytes[used...])) }
                } else {
                    inbound.commitWrite(n)
                    let used = process(inbound.readable)
                    // A bad response closes the connection inside `process` and empties `inbound`.
                    if state == .closed { return }
                    inbound.consume(used)
                }
                if fromScratch && n < loop.readScratch.count / 2 { return }
            case .wouldBlock:
                return
            case .endOfFile:
                endOfFile()
                return
            case .failed:
                failed()
                return
            }
        }
    }

    /// Parses what the upstream sent for the current exchange. A response ends the pass:
    /// anything behind it in the same bytes is more than the response's framing declared
    /// (an undercounted length, a body after HEAD, 204 or 304, bytes after the chunked
    /// terminator, a second response nobody asked for), so the connection is closed rather
    /// than handed to the next request, whose response those bytes would otherwise become.
    private func process(_ bytes: UnsafeRawBufferPointer) -> Int {
        var offset = 0
        var completed = false
        parsing: while offset < bytes.count && state != .closed {
            guard let exchange else {
                unexpectedBytes(bytes.count - offset, "a response with no request waiting for it")
                return bytes.count
            }
            switch phase {
            case .head:
                let rest = UnsafeRawBufferPointer(rebasing: bytes[offset...])
                switch parser.parse(rest, requestMethod: method, into: &head) {
                case .incomplete:
                    if rest.count > pool.limits.maxHeaderBytes { protocolError("response head too large") }
                    return offset
                case .failure(let error):
                    protocolError(error.reason)
                    return bytes.count
                case .complete:
                    parser.reset()
                    let headBytes = UnsafeRawBufferPointer(rebasing: rest[0..<head.headLength])
                    offset += head.headLength
                    if head.status >= 100 && head.status < 200 && head.status != 101 {
                        // 100 (the gateway answered the client's Expect itself) and 103 (hints)
                        // are dropped; any other interim response was asked for by nobody.
                        if head.status == 100 || head.status == 103 { continue }
                        protocolError("an unexpected \(head.status) interim response")
                        return bytes.count
                    }
                    if startBody(exchange, headBytes) { completed = true; break parsing }
                }
            case .length:
                let n = min(remaining, bytes.count - offset)
                exchange.responseBody(UnsafeRawBufferPointer(rebasing: bytes[offset..<offset + n]))
                offset += n
                remaining -= n
                if remaining == 0 { completed = true; break parsing }
            case .chunked:
                let rest = UnsafeRawBufferPointer(rebasing: bytes[offset...])
                var consumed = 0
                let result: ChunkedDecoder.Result
                if dechunk {
                    result = decoder.decode(rest, consumed: &consumed) { exchange.responseBody($0) }
                } else {
                    result = decoder.decode(rest, consumed: &consumed) { _ in }
                    exchange.responseBody(UnsafeRawBufferPointer(rebasing: rest[0..<consumed]))
                }
                offset += consumed
                switch result {
                case .needMore: break
                case .done: completed = true; break parsing
                case .failure(let error): protocolError(error.reason); return bytes.count
                }
            case .untilClose, .tunnel:
                exchange.responseBody(UnsafeRawBufferPointer(rebasing: bytes[offset...]))
                return bytes.count
            case .done:
                unexpectedBytes(bytes.count - offset, "bytes after a complete response")
                return bytes.count
            }
        }
        guard completed else { return offset }
        finished(extra: bytes.count - offset)
        return bytes.count
    }

    /// Returns true when the response has no body (it is complete with its head).
    private func startBody(_ exchange: Exchange, _ headBytes: UnsafeRawBufferPointer) -> Bool {
        if head.status == 101 && !(exchange.upgradeForwarded && Self.upgradesToWebSocket(headBytes, head)) {
            // A switch nobody asked for (or to another protocol) would make the gateway a
            // blind tunnel for whatever follows: refused.
            protocolError("101 Switching Protocols without a WebSocket upgrade request")
            return false
        }
        dechunk = head.framing == .chunked && exchange.decodesChunkedResponses
        exchange.responseHead(headBytes, head, decodeChunked: dechunk)
        if head.status == 101 {
            phase = .tunnel
            deadline = 0
            return false
        }
        switch head.framing {
        case .none, .contentLength(0):
            return true
        case .contentLength(let n):
            remaining = n
            phase = .length
        case .chunked:
            decoder.reset()
            phase = .chunked
        case .untilClose:
            phase = .untilClose
        }
        return false
    }

    private static func upgradesToWebSocket(_ bytes: UnsafeRawBufferPointer, _ head: ResponseHead) -> Bool {
        head.fields.contains { field in
            HTTPBytes.equalsCaseInsensitive(bytes, field.name, "upgrade") && HTTPBytes.equalsCaseInsensitive(bytes, field.value, "websocket")
        }
    }

    /// The response is complete; `extra` bytes came behind it in the same read.
    private func finished(extra: Int) {
        phase = .done
        deadline = 0
        if extra > 0 { pool.unexpectedBytes(extra, reason: "bytes past the end of a response") }
        let reusable = extra == 0 && head.keepAlive && requestSent
        let exchange = self.exchange
        self.exchange = nil
        if let exchange {
            exchange.responseComplete(upstreamReusable: reusable)
        } else {
            close()
        }
    }

    private func endOfFile() {
        let exchange = self.exchange
        self.exchange = nil
        let phaseAtEnd = phase
        close()
        guard let exchange else { return }
        switch phaseAtEnd {
        case .untilClose:
            exchange.responseComplete(upstreamReusable: false)
        case .tunnel:
            exchange.tunnelClosed()
        case .head where !receivedResponseBytes:
            exchange.upstreamFailed(.resetBeforeResponse(reusedConnection: reused))
        case .head:
            exchange.upstreamFailed(.badResponse("connection closed inside the response head"))
        default:
            exchange.upstreamFailed(.resetDuringResponse)
        }
    }

    private func failed() {
        let exchange = self.exchange
        self.exchange = nil
        let beforeResponse = phase == .head && !receivedResponseBytes
        // A TLS failure (verification, handshake) says why; it is logged once per change.
        // So does an alert on a fresh connection before any response: a TLS 1.3 server
        // refuses a missing or unknown client certificate only after the client finished
        // its handshake (`certificate required`), when the request is already sent.
        let tlsFailure = (socket.security as? TLSSession).flatMap { session -> TLSError? in
            if !session.isHandshakeComplete || (beforeResponse && !reused) { return session.lastFailure }
            return nil
        }
        close()
        if let tlsFailure {
            pool.target.reportFailure("TLS with \(pool.configuration.url.host): \(tlsFailure)")
            exchange?.upstreamFailed(.tlsFailed(tlsFailure.description))
            return
        }
        guard let exchange else { return }
        exchange.upstreamFailed(beforeResponse ? .resetBeforeResponse(reusedConnection: reused) : .resetDuringResponse)
    }

    private func reportReachable() {
        reportedReachable = true
        pool.target.reportSuccess()
    }

    /// The upstream sent bytes no request asked for: they are dropped with the connection,
    /// logged and counted (a pooled connection that carried them on would hand one client's
    /// response to the next).
    private func unexpectedBytes(_ count: Int, _ what: String) {
        pool.unexpectedBytes(count, reason: what)
        let exchange = self.exchange
        self.exchange = nil
        close()
        exchange?.upstreamFailed(.badResponse(what))
    }

    /// True when bytes (or the end of the stream) wait unread: an idle connection that spoke.
    var hasUnreadInput: Bool { socket.hasUnreadInput }

    private func protocolError(_ reason: String) {
        let exchange = self.exchange
        self.exchange = nil
        close()
        exchange?.upstreamFailed(.badResponse(reason))
    }

    // MARK: Pool life

    /// Parks the connection in the idle list.
    func becameIdle(idleDeadline: UInt64) {
        state = .idle
        exchange = nil
        deadline = idleDeadline
        inbound.releaseIfEmpty()
        outbound.releaseIfEmpty()
    }

    /// Taken from the idle list for a new exchange.
    func reuse() {
        state = .active
        reused = true
        deadline = 0
    }

    func deadlineExpired(now: UInt64) {
        deadline = 0
        if state == .connecting {
            connectFailed(IOError("connect", errno: 110))  // ETIMEDOUT: the next address, or 504
            return
        }
        let exchange = self.exchange
        self.exchange = nil
        close()
        exchange?.responseTimedOut()
    }

    /// The client side went away or gave up: the connection cannot be reused.
    func abandon() {
        exchange = nil
        close()
    }

    func close() {
        guard state != .closed else { return }
        state = .closed
        deadline = 0
        loop.unwatchDeadline(self)
        socket.close()
        inbound.clear()
        inbound.releaseIfEmpty()
        outbound.clear()
        outbound.releaseIfEmpty()
        pool.connectionClosed(self)
    }
}
