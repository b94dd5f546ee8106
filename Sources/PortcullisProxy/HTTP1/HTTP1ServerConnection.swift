import PortcullisCore
import PortcullisHTTP
import PortcullisIO
import PortcullisTLS

/// One client connection speaking HTTP/1.x, pinned to its loop: it owns the stream
/// (plain or TLS), the head parser, request body framing (Content-Length, strict chunked
/// decoding), pipelining, `Expect: 100-continue`, the 101 tunnel, the response head
/// written for the client and output corking. What a request *means* (route, auth,
/// upstream, failures, logs) is its `Exchange`'s job; the connection is its responder.
///
/// Life of a request: the head is parsed straight out of the loop's read scratch (bytes
/// are copied into `inbound` only when a head is incomplete or a pipelined request must
/// wait); the target is normalized; the exchange decides and, when it forwards, the body
/// is streamed to it (Content-Length bodies as they come, chunked bodies decoded); the
/// response comes back through `sendResponseHead` / `sendResponseBody`.
///
/// Back-pressure: while the upstream cannot take more body bytes, reading from the
/// client is paused; while the client cannot take more response bytes, the exchange
/// pauses the upstream. Pipelined requests wait in `inbound` (reading paused) until the
/// current response is complete.
///
/// Threading: everything here runs on `context.loop.queue`.
final class HTTP1ServerConnection: DeadlineTarget, ExchangeResponder, @unchecked Sendable {
    // @unchecked Sendable: confined to the loop queue (see type comment).

    enum Phase {
        /// Between requests (keep-alive idle), no byte of the next request yet.
        case idle
        /// Some bytes of a request head have arrived.
        case head
        /// The exchange is deciding (an authentication that waits for I/O); body bytes wait.
        case deciding
        /// Streaming the request body to the exchange.
        case body
        /// The request is complete; waiting for (or streaming) the response.
        case awaitingResponse
        /// After a 101 response: bytes pass through unchanged both ways.
        case tunnel
        /// Closed, or closing once `outbound` is flushed.
        case closing
    }

    let context: ListenerContext
    let socket: StreamSocket
    let peer: SocketAddress
    private var parser: RequestHeadParser
    private var head = RequestHead()
    private var inbound = ByteBuffer()
    private var outbound = ByteBuffer()
    private(set) var phase: Phase = .idle
    /// The connection's own deadline (handshake, idle, head, body, send, closing); the
    /// exchange's (an authentication or a pool wait) is `exchange.deadline`.
    private var ownDeadline: UInt64 = 0
    /// The earliest of both, for the loop's ticker.
    var deadline: UInt64 {
        let waiting = exchange.deadline
        return waiting != 0 && (ownDeadline == 0 || waiting < ownDeadline) ? waiting : ownDeadline
    }
    private var closeAfterFlush = false
    private(set) var isClosed = false
    /// A TLS connection whose handshake is not complete yet.
    private var awaitingHandshake = false

    /// The one exchange of this connection, reused for every request.
    private var exchange: Exchange!
    private var bodyRemaining = 0
    private var bodyChunked = false
    private var chunkDecoder: ChunkedDecoder
    private var keepAlive = true
    private var isHTTP10 = false
    /// An h2c listener's connection until its first bytes show whether they are the
    /// HTTP/2 client preface (then it is handed to an `HTTP2ServerConnection`).
    private var mayBeH2C = false
    /// The listener's TLS and HTTP/2 settings when this connection was accepted: a reload
    /// changes them for later connections only.
    private let tls: TLSServerEndpoint?
    private let http2: HTTP2Settings?
    /// The generation whose limits `parser` and `chunkDecoder` apply; a keep-alive
    /// connection takes a reload's limits at its next request.
    private var limitsFrom: ListenerServing

    init(context: ListenerContext, socket: StreamSocket, peer: SocketAddress) {
        self.context = context
        self.socket = socket
        self.peer = peer
        let serving = context.serving
        self.parser = RequestHeadParser(limits: serving.configuration.limits)
        self.chunkDecoder = ChunkedDecoder(limits: serving.configuration.limits)
        self.limitsFrom = serving
        self.mayBeH2C = serving.h2c
        self.tls = serving.tls
        self.http2 = serving.http2
        self.exchange = Exchange(context: context, responder: self, peer: peer, transport: .http11,
                                 secure: socket.security != nil)
    }

    var loop: EventLoop { context.loop }

    func start() {
        loop.watchDeadline(self)
        if let tls {
            // Until the handshake completes only `handshake_timeout` applies: a flood of
            // half-open handshakes is cut off early and never holds keep-alive time.
            awaitingHandshake = true
            context.handshaking += 1
            setDeadline(tls.settings.handshakeTimeout)
        } else {
            setDeadline(context.serving.configuration.timeouts.idle)
        }
        // The socket holds the handler, and through it the connection, until it is closed
        // (`close()`) or handed over (`switchToHTTP2`): that breaks the cycle.
        socket.startReading { [self] in readable() }
    }

    private func handshakeCompleted() {
        awaitingHandshake = false
        context.handshaking -= 1
        if phase == .idle { setDeadline(context.serving.configuration.timeouts.idle) }
    }

    /// The connection ends before its TLS handshake completed: counted by reason
    /// (`portcullis_tls_handshake_failures_total`). Before the socket closes (the session
    /// knows why).
    private func handshakeFailed(timedOut: Bool) {
        awaitingHandshake = false
        context.handshaking -= 1
        let reason = (socket.security as? TLSSession)?.handshakeFailure(timedOut: timedOut) ?? .other
        context.handshakeFailures[reason.rawValue] &+= 1
    }

    private func setDeadline(_ seconds: Double) {
        ownDeadline = loop.lastNow &+ UInt64(seconds * 1_000_000_000)
    }

    // MARK: Reading from the client

    private func readable() {
        while !isClosed && !socket.isReadingPaused {
            let result: IOResult
            let fromScratch = inbound.isEmpty
            if fromScratch {
                result = socket.read(into: loop.readScratch)
            } else {
                let space = inbound.writableSpace(minimum: 4096)
                result = socket.read(into: space)
            }
            if awaitingHandshake && socket.isHandshakeComplete {
                handshakeCompleted()
                if http2 != nil, (socket.security as? TLSSession)?.negotiatedProtocol == "h2" {
                    switch result {
                    case .bytes(let n):
                        _ = loop.now()
                        switchToHTTP2(UnsafeRawBufferPointer(rebasing: loop.readScratch[0..<n]), transport: .h2)
                        return
                    case .wouldBlock:
                        switchToHTTP2(UnsafeRawBufferPointer(start: nil, count: 0), transport: .h2)
                        return
                    case .endOfFile, .failed:
                        break
                    }
                }
            }
            switch result {
            case .bytes(let n) where mayBeH2C:
                _ = loop.now()
                if fromScratch { inbound.append(UnsafeRawBufferPointer(rebasing: loop.readScratch[0..<n])) } else { inbound.commitWrite(n) }
                switch HTTP2Preface.check(inbound.readable) {
                case .preface:
                    switchToHTTP2(inbound.readable, transport: .h2c)
                    return
                case .incomplete:
                    continue
                case .other:
                    mayBeH2C = false
                }
                let used = process(inbound.readable)
                if isClosed { return }
                inbound.consume(used)
                applyInboundBackPressure()
            case .bytes(let n):
                _ = loop.now()
                if fromScratch {
                    let bytes = UnsafeRawBufferPointer(rebasing: loop.readScratch[0..<n])
                    let used = process(bytes)
                    if used < n && !isClosed { inbound.append(UnsafeRawBufferPointer(rebasing: bytes[used...])) }
                } else {
                    inbound.commitWrite(n)
                    let used = process(inbound.readable)
                    // A refusal closes the connection inside `process` and empties `inbound`:
                    // nothing is left to consume then (consuming crashed the process).
                    if isClosed { return }
                    inbound.consume(used)
                }
                if isClosed { return }
                applyInboundBackPressure()
                if n < loop.readScratch.count / 2 && fromScratch { return }  // socket very likely drained
            case .wouldBlock:
                return
            case .endOfFile:
                clientClosed()
                return
            case .failed:
                if let tls = socket.security as? TLSSession, tls.sawPlaintextHTTP, !tls.isHandshakeComplete {
                    answerPlaintextOnTLSPort()
                    return
                }
                abort()
                return
            }
        }
    }

    /// Hands the socket to an HTTP/2 connection (ALPN `h2`, or the h2c preface on an h2c
    /// listener); `bytes` were read from it already and start the HTTP/2 stream.
    private func switchToHTTP2(_ bytes: UnsafeRawBufferPointer, transport: RequestProtocol) {
        guard let settings = http2 else { return }
        withExtendedLifetime(self) {
            isClosed = true
            phase = .closing
            ownDeadline = 0
            loop.unwatchDeadline(self)
            exchange.responderClosed()
            socket.stopReading()
            let connection = HTTP2ServerConnection(context: context, socket: socket, peer: peer,
                                                   settings: settings, transport: transport)
            connection.start(initialBytes: bytes)
            inbound.clear()
            inbound.releaseIfEmpty()
        }
    }

    /// A plain HTTP request on a TLS listener: answered 400 in plain text (as nginx
    /// does), since the client cannot read a TLS alert; then closed.
    private func answerPlaintextOnTLSPort() {
        var out = ByteBuffer()
        LocalResponse.error(400, "plain HTTP request sent to an HTTPS port; use https://")
            .encode(into: &out, headOnly: false, close: true)
        _ = socket.rawWrite(out.readable)
        socket.shutdownWrite()
        abort()
    }

    /// Stops reading when bytes wait that cannot be processed now (a pipelined
    /// request behind a pending response, or body bytes the upstream cannot take).
    private func applyInboundBackPressure() {
        if inbound.readableBytes > 0 && (phase == .awaitingResponse || phase == .body || phase == .deciding) {
            if phase != .body || inbound.readableBytes >= 64 * 1024 {
                socket.pauseReading()
            }
        } else {
            inbound.releaseIfEmpty()
        }
    }

    /// Processes what is buffered after something that blocked progress cleared.
    private func resumeProcessing() {
        guard !isClosed else { return }
        if !inbound.isEmpty {
            let used = process(inbound.readable)
            if isClosed { return }
            inbound.consume(used)
        }
        if phase != .awaitingResponse || inbound.isEmpty {
            inbound.releaseIfEmpty()
            if !exchange.upstreamBackedUp { socket.resumeReading() }
        }
        if !socket.isReadingPaused { readable() }
    }

    /// Inside `process`: `bytes` may point into the loop's read scratch or `inbound`, so
    /// nothing may read from the socket or consume `inbound` until it returns.
    private var processing = false

    /// Consumes as much of `bytes` as the current phase allows; returns the count used.
    private func process(_ bytes: UnsafeRawBufferPointer) -> Int {
        processing = true
        defer { processing = false }
        var offset = 0
        while offset < bytes.count && !isClosed {
            switch phase {
            case .idle, .head:
                if phase == .idle {
                    phase = .head
                    if limitsFrom !== context.serving { takeCurrentLimits() }
                    setDeadline(context.serving.configuration.timeouts.header)
                }
                let rest = UnsafeRawBufferPointer(rebasing: bytes[offset...])
                switch parser.parse(rest, into: &head) {
                case .incomplete:
                    return offset
                case .failure(let error):
                    parser.reset()
                    keepAlive = false
                    exchange.reject(.error(error.status, error.reason))
                    return bytes.count
                case .complete:
                    parser.reset()
                    let headBytes = UnsafeRawBufferPointer(rebasing: rest[0..<head.headLength])
                    offset += head.headLength
                    beginRequest(headBytes)
                }
            case .body:
                let rest = UnsafeRawBufferPointer(rebasing: bytes[offset...])
                let used = consumeBody(rest)
                offset += used
                if used == 0 { return offset }
            case .awaitingResponse, .deciding:
                return offset
            case .tunnel:
                guard exchange.tunnelSend(UnsafeRawBufferPointer(rebasing: bytes[offset...])) else { return offset }
                return bytes.count
            case .closing:
                return bytes.count
            }
        }
        return offset
    }

    /// A reload changed the configuration since the last request: its limits apply from
    /// this request on.
    private func takeCurrentLimits() {
        limitsFrom = context.serving
        parser = RequestHeadParser(limits: limitsFrom.configuration.limits)
        chunkDecoder = ChunkedDecoder(limits: limitsFrom.configuration.limits)
    }

    // MARK: A new request

    private func beginRequest(_ headBytes: UnsafeRawBufferPointer) {
        exchange.begin(method: head.method, methodBytes: UnsafeRawBufferPointer(rebasing: headBytes[head.methodRange]),
                       transport: RequestProtocol(http1: head.version))
        isHTTP10 = head.version == .http10
        keepAlive = head.keepAlive && !context.draining
        phase = .deciding
        // Target normalization: one spelling per path before routing.
        let targetBytes = UnsafeRawBufferPointer(rebasing: headBytes[head.target])
        let normalized: NormalizedTarget
        switch TargetNormalizer.normalize(targetBytes, form: head.targetForm) {
        case .success(let n): normalized = n
        case .failure(let error):
            exchange.reject(.error(error.status, error.reason))
            return
        }
        if head.method == .connect || head.targetForm == .authority {
            exchange.reject(.error(405, "CONNECT is not supported"))
            return
        }
        if head.targetForm == .asterisk {
            exchange.reject(.error(400, "asterisk-form target is not routable"))
            return
        }
        let view = RequestView(http1: head, bytes: headBytes, path: normalized.path, query: normalized.query,
                               peer: peer, loop: loop)
        exchange.start(view)
        // Still deciding: the exchange's own deadline (an authentication waiting for keys) governs.
        if phase == .deciding { ownDeadline = 0 }
    }

    // MARK: Request body

    /// The gateway answers `Expect: 100-continue` itself when it wants the body (as nginx
    /// does) and strips Expect upstream.
    func forwardingStarts(_ exchange: Exchange) {
        if head.expectContinue && head.framing != .none && head.framing != .contentLength(0) {
            sendToClient(UnsafeRawBufferPointer(start: Self.continueLine.utf8Start, count: Self.continueLine.utf8CodeUnitCount))
        }
        startBody()
    }

    /// A local handler, or a route whose credential is in the body, reads the body first:
    /// the same as forwarding it, from the client's side.
    func localBodyStarts(_ exchange: Exchange) { forwardingStarts(exchange) }

    private static let continueLine: StaticString = "HTTP/1.1 100 Continue\r\n\r\n"

    private func startBody() {
        switch head.framing {
        case .none, .contentLength(0), .untilClose:
            bodyRemaining = 0
            bodyChunked = false
            bodyEnded()
        case .contentLength(let n):
            bodyRemaining = n
            bodyChunked = false
            phase = .body
            setDeadline(context.serving.configuration.timeouts.body)
        case .chunked:
            bodyChunked = true
            chunkDecoder.reset()
            phase = .body
            setDeadline(context.serving.configuration.timeouts.body)
        }
    }

    func requestBodyCanContinue() {
        // Called inside `process` (a pooled upstream attached at once): its loop goes on
        // with the body by itself. Processing again from here would consume the same bytes
        // twice, and a read would overwrite the scratch `process` is parsing.
        guard !processing else { return }
        if phase == .body || phase == .tunnel || phase == .deciding || phase == .awaitingResponse { resumeProcessing() }
    }

    /// Returns how many bytes were consumed (0 when the exchange cannot take more now).
    private func consumeBody(_ bytes: UnsafeRawBufferPointer) -> Int {
        let exchange = self.exchange!
        guard exchange.canTakeRequestBody else { return 0 }
        setDeadline(context.serving.configuration.timeouts.body)
        if !bodyChunked {
            let n = min(bodyRemaining, bytes.count)
            exchange.requestBody(UnsafeRawBufferPointer(rebasing: bytes[0..<n]))
            bodyRemaining -= n
            if bodyRemaining == 0 { bodyEnded() }
            return n
        }
        var consumed = 0
        let result = chunkDecoder.decode(bytes, consumed: &consumed) { exchange.requestBody($0) }
        switch result {
        case .needMore:
            return consumed
        case .done:
            bodyEnded()
            return consumed
        case .failure(let error):
            // Part of the body may have left: the exchange drops its upstream connection.
            exchange.reject(.error(error.status, error.reason))
            return bytes.count
        }
    }

    /// The whole request was read. From here the upstream's timeouts govern the wait for
    /// the response (the head and body deadlines must not carry over: a slow upstream or a
    /// long download was cut off at the header timeout); only a decision on the body that
    /// waits for keys, or a client that stops reading (`timeouts.send`), has a deadline here.
    private func bodyEnded() {
        phase = .awaitingResponse
        if outbound.isEmpty { ownDeadline = 0 }
        // A decision on the body (a credential in it) may wait for keys: the exchange's deadline.
        exchange.requestBodyEnded()
    }

    // MARK: The response

    func sendResponseHead(_ bytes: UnsafeRawBufferPointer, _ response: ResponseHead, decodeChunked: Bool) {
        if response.status == 101 {
            phase = .tunnel
            ownDeadline = 0
        }
        // A body without framing for this client (until-close, or chunked decoded for an
        // HTTP/1.0 client) ends with the connection, whatever the client asked for; so does
        // a response that came before the whole request body was read.
        if !keepAlive || context.draining || response.framing == .untilClose || decodeChunked
            || (!exchange.requestComplete && response.status != 101) {
            keepAlive = false
        }
        var out = ByteBuffer()
        swap(&out, &loop.headScratch)
        defer { out.clear(); swap(&out, &loop.headScratch) }
        out.append("HTTP/1.1 ")
        out.appendDecimal(response.status)
        out.append(" ")
        if response.reasonRange.isEmpty { out.append(HTTPStatusText.reason(response.status)) }
        else { out.append(UnsafeRawBufferPointer(rebasing: bytes[response.reasonRange])) }
        out.append("\r\n")
        for field in response.fields {
            let name = field.name
            switch HeaderPolicy.responseField(bytes, name) {
            case .hopByHop: continue
            case .upgrade: if response.status != 101 { continue }
            case .transferEncoding: if decodeChunked { continue }
            case .endToEnd: break
            }
            out.append(UnsafeRawBufferPointer(rebasing: bytes[name]))
            out.append(": ")
            out.append(UnsafeRawBufferPointer(rebasing: bytes[field.value]))
            out.append("\r\n")
        }
        if response.status == 101 { out.append("connection: upgrade\r\n") }
        else if !keepAlive { out.append("connection: close\r\n") }
        else if isHTTP10 { out.append("connection: keep-alive\r\n") }
        out.append("\r\n")
        sendToClient(out.readable)
        if response.status == 101 && !isClosed {
            context.tunnels[ObjectIdentifier(self)] = self
            if context.draining { goAway() }
        }
    }

    /// How long a tunnel closed by the gateway waits for the client's Close in answer.
    static let tunnelCloseTimeout = 5.0

    /// The gateway goes away: a tunnel is closed with 1001 (see `Exchange.goAway()`).
    func goAway() {
        guard phase == .tunnel, !isClosed else { return }
        setDeadline(Self.tunnelCloseTimeout)
        exchange.goAway()
    }

    func sendResponseBody(_ bytes: UnsafeRawBufferPointer) { sendToClient(bytes) }

    func sendLocalResponse(_ response: LocalResponse, requestId: UnsafeRawBufferPointer) {
        // A body that was not read cannot be told apart from a next request.
        let bodyUnread = phase == .body || head.framing != .none && !exchange.requestComplete
        // 400 and the size refusals (413, 414, 417, 431) end the connection; a 429 keeps it
        // (the client is told when to come back, not to reconnect), as nginx and HAProxy do.
        if bodyUnread || response.status == 400 || response.status >= 413 && response.status < 500 && response.status != 429 {
            keepAlive = false
        }
        phase = .awaitingResponse
        var out = ByteBuffer()
        swap(&out, &loop.headScratch)
        defer { out.clear(); swap(&out, &loop.headScratch) }
        var response = response
        if !requestId.isEmpty {
            response.headers.append(("x-request-id", String(decoding: requestId, as: UTF8.self)))
        }
        response.encode(into: &out, headOnly: exchange.method == .head, close: !keepAlive)
        sendToClient(out.readable)
    }

    var decodesChunkedResponses: Bool { isHTTP10 }

    func exchangeFinished() {
        if !exchange.requestComplete {
            // The upstream answered before the body was read: the rest of the body
            // cannot be told apart from a next request, so the connection closes.
            keepAlive = false
        }
        phase = .idle
        if !keepAlive || context.draining {
            closeAfterFlushing()
            return
        }
        setDeadline(context.serving.configuration.timeouts.idle)
        if !inbound.isEmpty {
            // Pipelined requests that waited for this response.
            loop.execute { [self] in resumeProcessing() }
        } else {
            inbound.releaseIfEmpty()
            socket.resumeReading()
        }
    }

    func abortExchange() { abort() }

    func tunnelEnded() { closeAfterFlushing() }

    // MARK: Writing to the client

    private func sendToClient(_ bytes: UnsafeRawBufferPointer) {
        guard !isClosed, bytes.count > 0 else { return }
        if corked {
            if loop.gatherScratch.readableBytes + bytes.count <= Self.corkLimit {
                loop.gatherScratch.append(bytes)  // leaves with the rest of the pass in `uncorkOutput()`
                return
            }
            uncorkOutput()  // a large piece: send what is held, then this one directly
            if isClosed { return }
        }
        let wasQueued = !outbound.isEmpty
        switch socket.send(bytes, pending: &outbound) {
        case .written: return
        case .failed: abort(); return
        case .queued: if wasQueued { return }
        }
        // The client is slower than the upstream: stop reading the upstream, and give the
        // client `timeouts.send` to take bytes again.
        if phase == .awaitingResponse { setDeadline(context.serving.configuration.timeouts.send) }
        exchange.pauseResponse()
        socket.waitUntilWritable { [self] in clientWritable() }  // dropped by the socket when it closes
    }

    private func clientWritable() {
        switch socket.flush(&outbound) {
        case .pending: return
        case .failed: abort(); return
        case .drained: break
        }
        if closeAfterFlush { close(); return }
        if phase == .awaitingResponse { ownDeadline = 0 }
        exchange.resumeResponse()
    }

    /// True while the client has unsent response bytes (the upstream should wait).
    var isBackedUp: Bool { !outbound.isEmpty }

    // MARK: Corking (one send per upstream read pass)

    /// While set, `sendToClient` only gathers bytes in the loop's `gatherScratch`;
    /// `uncorkOutput()` sends them with one system call. A response head and the
    /// body that arrived with it then leave together (one `sendto` instead of two,
    /// and one packet), and nothing is allocated for it.
    private var corked = false
    /// Pieces that would grow the held bytes past this go out directly (no copy of
    /// large bodies); what was held is sent first, so order is kept.
    private static let corkLimit = 16 * 1024

    /// Starts gathering output (called by the upstream side before it processes a
    /// read). One connection of a loop at a time: the pass that corks also uncorks.
    func corkOutput() {
        guard !corked, !isClosed else { return }
        corked = true
    }

    /// Sends what was gathered since `corkOutput()`, like `sendToClient` would have.
    func uncorkOutput() {
        guard corked else { return }
        corked = false
        var gathered = ByteBuffer()
        swap(&gathered, &loop.gatherScratch)
        defer { gathered.clear(); swap(&gathered, &loop.gatherScratch) }
        if !gathered.isEmpty { sendToClient(gathered.readable) }
        // A close asked for while corked (the end of a tunnel) happens once nothing is held.
        if closeAfterFlush && outbound.isEmpty { close() }
    }

    // MARK: Timeouts and closing

    func deadlineExpired(now: UInt64) {
        let waiting = exchange.deadline
        if waiting != 0 && waiting <= now {
            exchange.deadlineExpired(now: now)
            return
        }
        guard ownDeadline != 0 && ownDeadline <= now else { return }
        ownDeadline = 0
        switch phase {
        case .idle:
            if awaitingHandshake { handshakeFailed(timedOut: true) }
            close()
        case .head:
            keepAlive = false
            exchange.reject(.error(408, "request head not received in time"))
        case .body:
            exchange.reject(.error(408, "request body not received in time"))
        case .deciding:
            close()
        case .awaitingResponse:
            if exchange.isActive && outbound.isEmpty { return }  // a stale deadline: the upstream's timeouts govern
            else if exchange.responseStarted { abort() } else { close() }
        case .tunnel, .closing:
            close()
        }
    }

    private func clientClosed() {
        // A half-closed client may still wait for a response to a complete request.
        if phase == .awaitingResponse && exchange.requestComplete && exchange.awaitsResponse && inbound.isEmpty {
            keepAlive = false
            socket.pauseReading()
            return
        }
        abort()
    }

    private func closeAfterFlushing() {
        phase = .closing
        if outbound.isEmpty && !corked { close() } else { closeAfterFlush = true; ownDeadline = loop.lastNow &+ 5_000_000_000 }
    }

    /// Closes at once, abandoning any exchange in flight.
    func abort() {
        exchange.cancel()
        close()
    }

    /// The one close path: ends the exchange and lets go of it (breaking the cycle between
    /// them), drops what this connection gathered in the loop's shared output buffer (the
    /// next connection to cork must find it empty), closes the socket (which drops its
    /// handlers, the other cycle) and leaves the loop's deadline watch.
    private func close() {
        guard !isClosed else { return }
        if awaitingHandshake { handshakeFailed(timedOut: false) }
        exchange.responderClosed()
        isClosed = true
        if corked {
            corked = false
            loop.gatherScratch.clear()
        }
        phase = .closing
        ownDeadline = 0
        loop.unwatchDeadline(self)
        socket.close()
        context.openConnections -= 1
        context.tunnels.removeValue(forKey: ObjectIdentifier(self))
        inbound.clear()
        inbound.releaseIfEmpty()
        outbound.clear()
        outbound.releaseIfEmpty()
    }
}
