import PortcullisCore
import PortcullisHTTP
import PortcullisIO
import PortcullisTLS

/// One client connection speaking HTTP/1.1, pinned to its loop.
///
/// Life of a request: the head is parsed straight out of the loop's read scratch
/// (bytes are copied into `inbound` only when a head is incomplete or a pipelined
/// request must wait); the target is normalized and routed; the authenticator
/// decides; the rewritten head goes to a pooled upstream connection; the body is
/// streamed (Content-Length bodies as they come, chunked bodies re-framed after
/// strict decoding); the response streams back through `UpstreamConnection`.
///
/// Back-pressure: while the upstream cannot take more body bytes, reading from the
/// client is paused; while the client cannot take more response bytes, reading from
/// the upstream is paused. Pipelined requests wait in `inbound` (reading paused)
/// until the current response is complete.
///
/// Threading: everything here runs on `context.loop.queue`.
final class ClientConnection: DeadlineTarget, AuthResumable, LocalReplyTarget, @unchecked Sendable {
    // @unchecked Sendable: confined to the loop queue (see type comment).

    enum Phase {
        /// Between requests (keep-alive idle), no byte of the next request yet.
        case idle
        /// Some bytes of a request head have arrived.
        case head
        /// Streaming the request body (to the upstream or into `localBody`).
        case body
        /// The head is parked while the authenticator waits for I/O (a key refetch).
        case authenticating
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
    /// The peer's address as text, computed once (X-Forwarded-For, access log).
    private let peerText: String
    private var parser: RequestHeadParser
    private(set) var head = RequestHead()
    private var inbound = ByteBuffer()
    private var outbound = ByteBuffer()
    private(set) var phase: Phase = .idle
    var deadline: UInt64 = 0
    private var closeAfterFlush = false
    private(set) var isClosed = false

    // The current exchange. Reset by `startExchange()`.
    private(set) var upstream: UpstreamConnection?
    private var pool: UpstreamPool?
    /// The rewritten head for the upstream, kept until the response starts (for a retry).
    private(set) var upstreamHead = ByteBuffer()
    private var bodyRemaining = 0
    private var bodyChunked = false
    private var chunkDecoder: ChunkedDecoder
    private var localBody = ByteBuffer()
    private var localBodyTooLarge = false
    private var requestComplete = false
    private(set) var responseStarted = false
    private(set) var clientKeepAlive = true
    private(set) var requestMethod: HTTPMethod = .get
    private(set) var clientIsHTTP10 = false
    private(set) var retryable = false
    private var retried = false
    private var exchangeStart: UInt64 = 0
    private var exchangeWallStart: Double = 0
    private var routeUpstreamName: String = ""
    /// The matched route's index + 1 (0: none), for the request counters.
    private var routeSlot = 0
    /// `loop.now()` when the request was handed to a pool (upstream latency).
    private var forwardedAt: UInt64 = 0
    private var logPath: String = ""
    private var logMethod: String = ""
    private var responseStatus = 0
    private var responseBytes = 0
    private var requestId = ByteBuffer()
    private var waitingForPool = false
    private var exchangeOpen = false
    /// Local mode: the head bytes, kept while the body is read.
    private var localHead = ByteBuffer()
    /// Set by a grant on a logout route; told the upstream's status.
    private var responseObserver: (any UpstreamResponseObserver)?
    /// A request parked while its authentication waits for I/O.
    private var parked: (path: String, query: String?, route: Route)?
    /// Identifies the current authentication, so a late resumption for an earlier request is ignored.
    private var authGeneration: UInt64 = 0

    init(context: ListenerContext, socket: StreamSocket, peer: SocketAddress) {
        self.context = context
        self.socket = socket
        self.peer = peer
        self.peerText = peer.host
        self.parser = RequestHeadParser(limits: context.configuration.limits)
        self.chunkDecoder = ChunkedDecoder(limits: context.configuration.limits)
    }

    var loop: EventLoop { context.loop }

    func start() {
        loop.watchDeadline(self)
        if let tls = context.tls {
            // Until the handshake completes only `handshake_timeout` applies: a flood of
            // half-open handshakes is cut off early and never holds keep-alive time.
            awaitingHandshake = true
            setDeadline(tls.settings.handshakeTimeout)
        } else {
            setDeadline(context.configuration.timeouts.idle)
        }
        socket.startReading { [unowned self] in self.readable() }
    }

    /// A TLS connection whose handshake is not complete yet.
    private var awaitingHandshake = false

    private func handshakeCompleted() {
        awaitingHandshake = false
        if phase == .idle { setDeadline(context.configuration.timeouts.idle) }
    }

    private func setDeadline(_ seconds: Double) {
        deadline = loop.lastNow &+ UInt64(seconds * 1_000_000_000)
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
            if awaitingHandshake && socket.isHandshakeComplete { handshakeCompleted() }
            switch result {
            case .bytes(let n):
                _ = loop.now()
                if fromScratch {
                    let bytes = UnsafeRawBufferPointer(rebasing: loop.readScratch[0..<n])
                    let used = process(bytes)
                    if used < n && !isClosed { inbound.append(UnsafeRawBufferPointer(rebasing: bytes[used...])) }
                } else {
                    inbound.commitWrite(n)
                    let used = process(inbound.readable)
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
        if inbound.readableBytes > 0 && (phase == .awaitingResponse || phase == .body || phase == .authenticating) {
            if phase != .body || inbound.readableBytes >= 64 * 1024 {
                socket.pauseReading()
            }
        } else {
            inbound.releaseIfEmpty()
        }
    }

    /// Processes what is buffered after something that blocked progress cleared.
    func resumeProcessing() {
        guard !isClosed else { return }
        if !inbound.isEmpty {
            let used = process(inbound.readable)
            if isClosed { return }
            inbound.consume(used)
        }
        if phase != .awaitingResponse || inbound.isEmpty {
            inbound.releaseIfEmpty()
            if upstream?.canTakeMore ?? true { socket.resumeReading() }
        }
        if !socket.isReadingPaused { readable() }
    }

    /// Consumes as much of `bytes` as the current phase allows; returns the count used.
    private func process(_ bytes: UnsafeRawBufferPointer) -> Int {
        var offset = 0
        while offset < bytes.count && !isClosed {
            switch phase {
            case .idle, .head:
                if phase == .idle {
                    phase = .head
                    setDeadline(context.configuration.timeouts.header)
                }
                let rest = UnsafeRawBufferPointer(rebasing: bytes[offset...])
                switch parser.parse(rest, into: &head) {
                case .incomplete:
                    return offset
                case .failure(let error):
                    parser.reset()
                    rejectRequest(LocalResponse.error(error.status, error.reason))
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
            case .awaitingResponse, .authenticating:
                return offset
            case .tunnel:
                guard let upstream, upstream.canTakeMore else { return offset }
                upstream.send(UnsafeRawBufferPointer(rebasing: bytes[offset...]))
                return bytes.count
            case .closing:
                return bytes.count
            }
        }
        return offset
    }

    // MARK: A new request

    private func beginRequest(_ headBytes: UnsafeRawBufferPointer) {
        startExchange(headBytes)
        // Target normalization: one spelling per path before routing.
        let targetBytes = UnsafeRawBufferPointer(rebasing: headBytes[head.target])
        let normalized: NormalizedTarget
        switch TargetNormalizer.normalize(targetBytes, form: head.targetForm) {
        case .success(let n): normalized = n
        case .failure(let error):
            rejectRequest(.error(error.status, error.reason))
            return
        }
        logPath = normalized.path
        if head.method == .connect || head.targetForm == .authority {
            rejectRequest(.error(405, "CONNECT is not supported"))
            return
        }
        if head.targetForm == .asterisk {
            rejectRequest(.error(400, "asterisk-form target is not routable"))
            return
        }
        if context.redirectsToHTTPS {
            redirectToHTTPS(headBytes, path: normalized.path, query: normalized.query)
            return
        }
        let view = RequestView(bytes: headBytes, head: head, path: normalized.path, query: normalized.query,
                               peer: peer, loop: loop)

        if case .local(let handler) = context.mode {
            startBody(upstream: nil)
            if phase == .awaitingResponse {
                finishLocal(handler, view: view)
            } else {
                localHead.clear()
                localHead.append(headBytes)
                pendingLocal = (handler, normalized.path, normalized.query)
            }
            return
        }

        let host = context.routes.hasHostRoutes ? requestHost(headBytes) : nil
        guard let route = context.routes.match(path: normalized.path, host: host) else {
            rejectRequest(.error(404, "no route for this path"))
            return
        }
        routeUpstreamName = route.configuration.upstream
        routeSlot = route.index + 1

        authGeneration &+= 1
        let resumption = AuthResumption(target: self, generation: authGeneration, loop: loop)
        let outcome = context.authenticator.authenticate(view, route: route, resumption: resumption)
        guard case .deferred = outcome else {
            apply(outcome, headBytes: headBytes, path: normalized.path, query: normalized.query, route: route)
            return
        }
        // Keep the head; body bytes wait in `inbound` (reading pauses).
        localHead.clear()
        localHead.append(headBytes)
        parked = (normalized.path, normalized.query, route)
        phase = .authenticating
        setDeadline(context.configuration.timeouts.header)
    }

    /// Continues a request after a deferred authentication decision.
    func resumeAuthentication(_ outcome: AuthOutcome, generation: UInt64) {
        guard !isClosed, phase == .authenticating, generation == authGeneration, let request = parked else { return }
        parked = nil
        var headBytes = ByteBuffer()
        swap(&headBytes, &localHead)
        defer { headBytes.clear(); swap(&headBytes, &localHead) }
        apply(outcome, headBytes: headBytes.readable, path: request.path, query: request.query, route: request.route)
        resumeProcessing()
    }

    /// Acts on an authentication decision: forward (with the grant's
    /// headers) or answer the client. A decision still deferred after a
    /// resumption is an internal error.
    private func apply(_ outcome: AuthOutcome, headBytes: UnsafeRawBufferPointer, path: String, query: String?, route: Route) {
        switch outcome {
        case .anonymous:
            forward(headBytes, path: path, query: query, route: route, grant: nil)
        case .grant(let grant):
            forward(headBytes, path: path, query: query, route: route, grant: grant)
        case .reject(let response):
            rejectRequest(response)
        case .deferred:
            rejectRequest(.error(500, "authentication did not complete"))
        }
    }

    private func forward(_ headBytes: UnsafeRawBufferPointer, path: String, query: String?, route: Route, grant: AuthGrant?) {
        responseObserver = grant?.observer
        let pool = context.pools[route.upstreamIndex]
        buildUpstreamHead(headBytes, path: RouteTable.forwardedPath(path, route: route), query: query, grant: grant,
                          upstreamAuthority: pool.authority, useUpstreamAuthority: pool.sendsUpstreamHost)
        if head.expectContinue && head.framing != .none && head.framing != .contentLength(0) {
            // The gateway answers 100 itself (as nginx does) and strips Expect upstream.
            sendToClient(UnsafeRawBufferPointer(start: Self.continueLine.utf8Start, count: Self.continueLine.utf8CodeUnitCount))
        }
        self.pool = pool
        if context.metrics != nil { forwardedAt = loop.now() }
        startBody(upstream: pool)
        pool.acquire(for: self)
    }

    private static let continueLine: StaticString = "HTTP/1.1 100 Continue\r\n\r\n"

    private var pendingLocal: (any LocalHandler, String, String?)?

    private func startExchange(_ headBytes: UnsafeRawBufferPointer) {
        exchangeOpen = true
        context.activeRequests += 1
        exchangeStart = loop.lastNow
        exchangeWallStart = context.accessLog != nil ? WallClock.nowSeconds() : 0
        requestMethod = head.method
        clientIsHTTP10 = head.version == .http10
        clientKeepAlive = head.keepAlive && !context.draining
        requestComplete = false
        responseStarted = false
        responseStatus = 0
        responseBytes = 0
        retried = false
        responseObserver = nil
        routeUpstreamName = ""
        routeSlot = 0
        logPath = ""
        if context.accessLog != nil {
            logMethod = String(decoding: UnsafeRawBufferPointer(rebasing: headBytes[head.methodRange]), as: UTF8.self)
        }
        switch head.method {
        case .get, .head, .options, .put, .delete, .trace: retryable = true
        default: retryable = false
        }
        requestId.clear()
    }

    /// `redirect_https`: 308 (method and body kept, RFC 9110 §15.4.9) to the same
    /// host and normalized target over https, on the default port.
    private func redirectToHTTPS(_ headBytes: UnsafeRawBufferPointer, path: String, query: String?) {
        guard let host = requestHost(headBytes), !host.isEmpty,
              host.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F && $0 != UInt8(ascii: "/") && $0 != UInt8(ascii: "@") }) else {
            rejectRequest(.error(400, "a Host is required to redirect to https"))
            return
        }
        let location = "https://\(host)\(path)\(query.map { "?\($0)" } ?? "")"
        rejectRequest(LocalResponse.error(308, "use https", headers: [("location", location)]))
    }

    private func requestHost(_ bytes: UnsafeRawBufferPointer) -> Substring? {
        guard let range = head.absoluteAuthority ?? head.host else { return nil }
        var host = Substring(String(decoding: UnsafeRawBufferPointer(rebasing: bytes[range]), as: UTF8.self).lowercased())
        if host.hasPrefix("[") {
            if let close = host.firstIndex(of: "]") { host = host[...close] }
        } else if let colon = host.lastIndex(of: ":") {
            host = host[..<colon]
        }
        return host
    }

    // MARK: Request body

    private func startBody(upstream pool: UpstreamPool?) {
        switch head.framing {
        case .none, .contentLength(0), .untilClose:
            bodyRemaining = 0
            bodyChunked = false
            requestBodyFinished()
        case .contentLength(let n):
            bodyRemaining = n
            bodyChunked = false
            phase = .body
            setDeadline(context.configuration.timeouts.body)
        case .chunked:
            bodyChunked = true
            chunkDecoder.reset()
            phase = .body
            retryable = false
            setDeadline(context.configuration.timeouts.body)
        }
        if phase == .body { retryable = false }
    }

    /// Returns how many bytes were consumed (0 when the upstream cannot take more now).
    private func consumeBody(_ bytes: UnsafeRawBufferPointer) -> Int {
        let toLocal = pool == nil
        if !toLocal {
            guard let upstream, upstream.isConnected, upstream.canTakeMore else { return 0 }
        }
        setDeadline(context.configuration.timeouts.body)
        if !bodyChunked {
            let n = min(bodyRemaining, bytes.count)
            let piece = UnsafeRawBufferPointer(rebasing: bytes[0..<n])
            if toLocal { appendLocalBody(piece) } else { upstream!.send(piece) }
            bodyRemaining -= n
            if bodyRemaining == 0 { requestBodyFinished() }
            return n
        }
        var consumed = 0
        let result: ChunkedDecoder.Result
        if toLocal {
            result = chunkDecoder.decode(bytes, consumed: &consumed) { appendLocalBody($0) }
        } else {
            let upstream = self.upstream!
            result = chunkDecoder.decode(bytes, consumed: &consumed) { data in
                upstream.sendChunk(data)
            }
        }
        switch result {
        case .needMore:
            return consumed
        case .done:
            if !toLocal { upstream!.sendLastChunk() }
            requestBodyFinished()
            return consumed
        case .failure(let error):
            if responseStarted || !toLocal && upstream != nil {
                // Part of the body already left: the upstream connection is unusable.
                upstream?.abandon()
                upstream = nil
            }
            rejectRequest(.error(error.status, error.reason))
            return bytes.count
        }
    }

    private func appendLocalBody(_ piece: UnsafeRawBufferPointer) {
        if localBody.readableBytes + piece.count > 64 * 1024 { localBodyTooLarge = true; return }
        localBody.append(piece)
    }

    private func requestBodyFinished() {
        requestComplete = true
        phase = .awaitingResponse
        if pool != nil {
            if let upstream, upstream.isConnected { upstream.requestFullySent() }
        } else if let (handler, path, query) = pendingLocal {
            pendingLocal = nil
            // `head` still describes this request: the next one is parsed only after it ends.
            let view = RequestView(bytes: localHead.readable, head: head, path: path, query: query, peer: peer, loop: loop)
            finishLocal(handler, view: view)
            localHead.clear()
            localHead.releaseIfEmpty()
        }
    }

    private func finishLocal(_ handler: any LocalHandler, view: RequestView) {
        let response: LocalResponse?
        if localBodyTooLarge {
            response = .error(413, "request body too large for this endpoint")
        } else {
            authGeneration &+= 1
            response = handler.handle(view, body: localBody.readable,
                                      reply: LocalReply(target: self, generation: authGeneration, loop: loop))
        }
        localBody.clear()
        localBody.releaseIfEmpty()
        localBodyTooLarge = false
        guard let response else {
            // Answered later through `sendLateLocalResponse`; pipelined bytes wait.
            awaitingLateReply = true
            return
        }
        writeLocalResponse(response, close: !clientKeepAlive)
        finishExchange()
    }

    /// A local handler's answer that needed I/O.
    func sendLateLocalResponse(_ response: LocalResponse, generation: UInt64) {
        guard !isClosed, awaitingLateReply, generation == authGeneration else { return }
        awaitingLateReply = false
        writeLocalResponse(response, close: !clientKeepAlive)
        finishExchange()
    }

    private var awaitingLateReply = false

    // MARK: Upstream head

    /// - Parameters:
    ///   - upstreamAuthority: the upstream URL's `host[:port]`: the Host the upstream gets
    ///     with `host_header: upstream` (the client's stays in X-Forwarded-Host), and for
    ///     an HTTP/1.0 request that had none, so the upstream always gets exactly one Host.
    private func buildUpstreamHead(_ bytes: UnsafeRawBufferPointer, path: Substring, query: String?,
                                   grant: AuthGrant?, upstreamAuthority: String, useUpstreamAuthority: Bool) {
        upstreamHead.clear()
        let trusted = context.isTrusted(peer)
        let policy = context.policy
        var buffer = ByteBuffer()
        swap(&buffer, &upstreamHead)
        defer { swap(&buffer, &upstreamHead) }

        buffer.append(UnsafeRawBufferPointer(rebasing: bytes[head.methodRange]))
        buffer.append(" ")
        buffer.append(path)
        if let query {
            buffer.append("?")
            buffer.append(query)
        }
        buffer.append(" HTTP/1.1\r\n")

        // Fields named by Connection (other than the protected ones) are dropped too.
        var connectionTokens: [Range<Int>] = []
        for field in head.fields where HTTPBytes.equalsCaseInsensitive(bytes, field.name, "connection") {
            HTTPBytes.forEachToken(bytes, field.value) { token in
                if !policy.protectedFromConnection(bytes, token) { connectionTokens.append(token) }
            }
        }

        var forwardedFor: Range<Int>? = nil
        var forwardedProto: Range<Int>? = nil
        var forwardedHost: Range<Int>? = nil
        var clientRequestId: Range<Int>? = nil
        var upgradeValue: Range<Int>? = nil
        let dropAuthorization = grant?.dropAuthorization ?? false
        let replaceCookie = grant?.replacementCookie != nil

        fieldLoop: for field in head.fields {
            switch policy.classify(bytes, field.name) {
            case .drop:
                if head.upgrade && HTTPBytes.equalsCaseInsensitive(bytes, field.name, "upgrade") { upgradeValue = field.value }
                continue fieldLoop
            case .forwardedFor:
                if trusted { forwardedFor = field.value }
                continue fieldLoop
            case .forwardedProto:
                if trusted { forwardedProto = field.value }
                continue fieldLoop
            case .forwardedHost:
                if trusted { forwardedHost = field.value }
                continue fieldLoop
            case .requestId:
                if trusted { clientRequestId = field.value }
                continue fieldLoop
            case .forwarded:
                if !trusted { continue fieldLoop }
            case .copy:
                if dropAuthorization && HTTPBytes.equalsCaseInsensitive(bytes, field.name, "authorization") { continue fieldLoop }
                if replaceCookie && HTTPBytes.equalsCaseInsensitive(bytes, field.name, "cookie") { continue fieldLoop }
            }
            for token in connectionTokens where token.count == field.name.count {
                if Self.sameNameIgnoringCase(bytes, field.name, token) { continue fieldLoop }
            }
            buffer.append(UnsafeRawBufferPointer(rebasing: bytes[field.name]))
            buffer.append(": ")
            buffer.append(UnsafeRawBufferPointer(rebasing: bytes[field.value]))
            buffer.append("\r\n")
        }

        // Exactly one Host: the absolute-form authority wins over the Host field (RFC 9112
        // §3.2.2); an HTTP/1.0 request without either gets the upstream's (as nginx sends
        // its upstream's name); the parser already refused a missing, repeated or invalid one on 1.1.
        buffer.append("host: ")
        if !useUpstreamAuthority, let host = head.absoluteAuthority ?? head.host {
            buffer.append(UnsafeRawBufferPointer(rebasing: bytes[host]))
        } else {
            buffer.append(upstreamAuthority)
        }
        buffer.append("\r\n")
        switch head.framing {
        case .contentLength(let n):
            buffer.append("content-length: ")
            buffer.appendDecimal(n)
            buffer.append("\r\n")
        case .chunked:
            buffer.append("transfer-encoding: chunked\r\n")
        case .none, .untilClose:
            break
        }
        // Only WebSocket may be upgraded: any other protocol (h2c above all, which would
        // leave the gateway tunnelling requests it never inspects) is dropped and the request
        // goes on as plain HTTP/1.1; a list naming websocket among others keeps websocket only.
        upgradeForwarded = false
        if head.upgrade, let upgradeValue, Self.listsWebSocket(bytes, upgradeValue) {
            buffer.append("connection: upgrade\r\nupgrade: websocket\r\n")
            upgradeForwarded = true
        }
        buffer.append("x-forwarded-for: ")
        if let forwardedFor {
            buffer.append(UnsafeRawBufferPointer(rebasing: bytes[forwardedFor]))
            buffer.append(", ")
        }
        buffer.append(peerText)
        buffer.append("\r\nx-forwarded-proto: ")
        if let forwardedProto { buffer.append(UnsafeRawBufferPointer(rebasing: bytes[forwardedProto])) }
        else { buffer.append(context.scheme) }
        if let host = forwardedHost ?? head.absoluteAuthority ?? head.host {
            buffer.append("\r\nx-forwarded-host: ")
            buffer.append(UnsafeRawBufferPointer(rebasing: bytes[host]))
        }
        buffer.append("\r\nx-request-id: ")
        if let clientRequestId {
            requestId.append(UnsafeRawBufferPointer(rebasing: bytes[clientRequestId]))
        } else {
            context.nextRequestId(into: &requestId)
        }
        buffer.append(requestId.readable)
        buffer.append("\r\n")
        if let grant {
            if let cookie = grant.replacementCookie, !cookie.isEmpty {
                buffer.append("cookie: ")
                Self.appendFieldValue(cookie, to: &buffer)
                buffer.append("\r\n")
            }
            for (name, value) in grant.headers {
                buffer.append(name)
                buffer.append(": ")
                Self.appendFieldValue(value, to: &buffer)
                buffer.append("\r\n")
            }
        }
        buffer.append("\r\n")
    }

    /// Whether an `Upgrade` value lists the `websocket` protocol (any case, any version suffix refused).
    private static func listsWebSocket(_ bytes: UnsafeRawBufferPointer, _ value: Range<Int>) -> Bool {
        var found = false
        HTTPBytes.forEachToken(bytes, value) { token in
            if HTTPBytes.equalsCaseInsensitive(bytes, token, "websocket") { found = true }
        }
        return found
    }

    /// The request asked for, and the gateway forwarded, a WebSocket upgrade: only then
    /// may a 101 from the upstream turn the connection into a tunnel.
    private(set) var upgradeForwarded = false

    /// Appends an injected value; control characters (claims come from tokens)
    /// become spaces so no value can split the head.
    private static func appendFieldValue(_ value: String, to buffer: inout ByteBuffer) {
        if value.utf8.allSatisfy({ $0 >= 0x20 && $0 != 0x7F }) {
            buffer.append(value)
        } else {
            buffer.append(String(decoding: value.utf8.map { $0 < 0x20 || $0 == 0x7F ? 0x20 : $0 }, as: UTF8.self))
        }
    }

    private static func sameNameIgnoringCase(_ bytes: UnsafeRawBufferPointer, _ a: Range<Int>, _ b: Range<Int>) -> Bool {
        guard a.count == b.count else { return false }
        for i in 0..<a.count where bytes[a.lowerBound + i] | 0x20 != bytes[b.lowerBound + i] | 0x20 { return false }
        return true
    }

    // MARK: Upstream events (called by UpstreamPool / UpstreamConnection)

    /// The pool handed over a connection (connected or still connecting).
    func attach(_ connection: UpstreamConnection) {
        waitingForPool = false
        upstream = connection
        connection.client = self
        if connection.isConnected { upstreamConnected() }
    }

    func upstreamConnected() {
        guard let upstream, !isClosed else { return }
        upstream.beginExchange(method: requestMethod, head: upstreamHead.readable)
        if requestComplete {
            upstream.requestFullySent()
        } else {
            resumeProcessing()
        }
    }

    func markQueued() { waitingForPool = true }

    /// The pool has no connection and no queue room, or the queue wait expired.
    func poolExhausted() {
        waitingForPool = false
        pool?.exhaustedCount += 1
        rejectRequest(.error(503, "upstream \(routeUpstreamName) has no free connection"))
    }

    /// The upstream can take more body bytes again.
    func upstreamDrained() {
        if phase == .body || phase == .tunnel { resumeProcessing() }
    }

    /// Why an exchange failed on the upstream side.
    enum UpstreamFailure {
        case connectFailed(IOError)
        case connectTimeout
        /// The host name has no address (the reason is logged by the upstream target).
        case unresolved(String)
        /// The TLS handshake with the upstream failed (verification, protocol).
        case tlsFailed(String)
        case resetBeforeResponse(reusedConnection: Bool)
        case responseTimeout
        case badResponse(String)
        case resetDuringResponse
    }

    func upstreamFailed(_ failure: UpstreamFailure) {
        upstream = nil
        guard !isClosed else { return }
        if responseStarted {
            abort()
            return
        }
        switch failure {
        case .resetBeforeResponse(let reused):
            if reused && retryable && !retried, let pool {
                // The pooled connection had been closed by the upstream: one retry.
                retried = true
                pool.acquire(for: self, fresh: true)
                return
            }
            rejectRequest(.error(502, "upstream \(routeUpstreamName) closed the connection"))
        case .connectFailed:
            rejectRequest(.error(502, "upstream \(routeUpstreamName) refused the connection"))
        case .connectTimeout:
            rejectRequest(.error(504, "upstream \(routeUpstreamName) connect timed out"))
        case .unresolved:
            rejectRequest(.error(502, "upstream \(routeUpstreamName) cannot be resolved"))
        case .tlsFailed:
            rejectRequest(.error(502, "upstream \(routeUpstreamName) failed the TLS handshake"))
        case .responseTimeout:
            rejectRequest(.error(504, "upstream \(routeUpstreamName) timed out"))
        case .badResponse(let reason):
            rejectRequest(.error(502, "upstream \(routeUpstreamName) sent an invalid response: \(reason)"))
        case .resetDuringResponse:
            rejectRequest(.error(502, "upstream \(routeUpstreamName) reset the connection"))
        }
    }

    /// Writes the response head, rewritten for the client.
    func sendResponseHead(_ bytes: UnsafeRawBufferPointer, _ response: ResponseHead, dechunk: Bool) {
        responseStarted = true
        responseStatus = response.status
        if let metrics = context.metrics, let pool {
            metrics.upstreamLatency[pool.index].recordNanoseconds(Int64(truncatingIfNeeded: loop.now() &- forwardedAt))
        }
        if let observer = responseObserver {
            responseObserver = nil
            observer.upstreamAnswered(status: response.status)
        }
        upstreamHead.clear()
        upstreamHead.releaseIfEmpty(keepingUpTo: 4096)
        if response.status == 101 {
            phase = .tunnel
            deadline = 0
        }
        // A body without framing for this client (until-close, or chunked decoded for an
        // HTTP/1.0 client) ends with the connection, whatever the client asked for.
        let closing = !clientKeepAlive || context.draining || response.framing == .untilClose || dechunk
            || (!requestComplete && response.status != 101)
        if closing { clientKeepAlive = false }
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
            switch name.count {
            case 10 where HTTPBytes.equalsCaseInsensitive(bytes, name, "connection"),
                 10 where HTTPBytes.equalsCaseInsensitive(bytes, name, "keep-alive"),
                 16 where HTTPBytes.equalsCaseInsensitive(bytes, name, "proxy-connection"),
                 7 where HTTPBytes.equalsCaseInsensitive(bytes, name, "trailer"),
                 2 where HTTPBytes.equalsCaseInsensitive(bytes, name, "te"):
                continue
            case 7 where HTTPBytes.equalsCaseInsensitive(bytes, name, "upgrade"):
                if response.status != 101 { continue }
            case 17 where HTTPBytes.equalsCaseInsensitive(bytes, name, "transfer-encoding"):
                if dechunk { continue }
            default:
                break
            }
            out.append(UnsafeRawBufferPointer(rebasing: bytes[name]))
            out.append(": ")
            out.append(UnsafeRawBufferPointer(rebasing: bytes[field.value]))
            out.append("\r\n")
        }
        if response.status == 101 { out.append("connection: upgrade\r\n") }
        else if !clientKeepAlive { out.append("connection: close\r\n") }
        else if clientIsHTTP10 { out.append("connection: keep-alive\r\n") }
        out.append("\r\n")
        sendToClient(out.readable)
    }

    func sendResponseBody(_ bytes: UnsafeRawBufferPointer) {
        responseBytes += bytes.count
        sendToClient(bytes)
    }

    /// The whole response has been forwarded.
    func responseComplete(upstreamReusable: Bool) {
        let connection = upstream
        upstream = nil
        if let connection, let pool {
            pool.release(connection, reusable: upstreamReusable && requestComplete)
        }
        if !requestComplete {
            // The upstream answered before the body was read: the rest of the body
            // cannot be told apart from a next request, so the connection closes.
            clientKeepAlive = false
        }
        finishExchange()
    }

    // MARK: Finishing

    private func finishExchange() {
        if exchangeOpen { exchangeOpen = false; context.activeRequests -= 1 }
        context.metrics?.countRequest(loopIndex: loop.index, routeSlot: routeSlot, status: responseStatus)
        if let log = context.accessLog {
            log.record(AccessRecord(
                time: exchangeWallStart, requestId: requestId.readable, method: logMethod, path: logPath,
                status: responseStatus, upstream: routeUpstreamName, bytes: responseBytes,
                durationNanoseconds: loop.now() &- exchangeStart, client: peerText))
        }
        pool = nil
        phase = .idle
        if !clientKeepAlive || context.draining {
            closeAfterFlushing()
            return
        }
        setDeadline(context.configuration.timeouts.idle)
        if !inbound.isEmpty {
            // Pipelined requests that waited for this response.
            loop.execute { [self] in resumeProcessing() }
        } else {
            inbound.releaseIfEmpty()
            socket.resumeReading()
        }
    }

    /// Answers locally (errors, auth challenges) and ends the exchange. A request
    /// whose body was not read closes the connection afterwards.
    private func rejectRequest(_ response: LocalResponse) {
        if !exchangeOpen { startExchangeForError() }
        let bodyUnread = phase == .body || head.framing != .none && !requestComplete
        if let upstream {
            upstream.abandon()
            self.upstream = nil
        }
        if waitingForPool { pool?.cancelWaiter(self); waitingForPool = false }
        if bodyUnread || response.status == 400 || response.status >= 413 && response.status < 500 {
            clientKeepAlive = false
        }
        phase = .awaitingResponse
        requestComplete = true
        writeLocalResponse(response, close: !clientKeepAlive)
        finishExchange()
    }

    private func startExchangeForError() {
        exchangeOpen = true
        routeSlot = 0
        context.activeRequests += 1
        exchangeStart = loop.lastNow
        exchangeWallStart = context.accessLog != nil ? WallClock.nowSeconds() : 0
        requestMethod = .get
        clientKeepAlive = false
        logMethod = "-"
        logPath = "-"
        requestId.clear()
    }

    private func writeLocalResponse(_ response: LocalResponse, close: Bool) {
        responseStarted = true
        responseStatus = response.status
        responseBytes = response.body.count
        var out = ByteBuffer()
        swap(&out, &loop.headScratch)
        defer { out.clear(); swap(&out, &loop.headScratch) }
        var response = response
        if !requestId.isEmpty {
            response.headers.append(("x-request-id", String(decoding: requestId.readable, as: UTF8.self)))
        }
        response.encode(into: &out, headOnly: requestMethod == .head, close: close)
        sendToClient(out.readable)
    }

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
        // The client is slower than the upstream: stop reading the upstream.
        upstream?.socket.pauseReading()
        socket.waitUntilWritable { [unowned self] in self.clientWritable() }
    }

    private func clientWritable() {
        switch socket.flush(&outbound) {
        case .pending: return
        case .failed: abort(); return
        case .drained: break
        }
        if closeAfterFlush { close(); return }
        upstream?.socket.resumeReading()
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
        if gathered.isEmpty { return }
        sendToClient(gathered.readable)
        if closeAfterFlush && outbound.isEmpty { close() }
    }

    // MARK: Timeouts and closing

    func deadlineExpired(now: UInt64) {
        deadline = 0
        if waitingForPool {
            pool?.cancelWaiter(self)
            poolExhausted()
            return
        }
        switch phase {
        case .idle:
            close()
        case .head:
            rejectRequest(.error(408, "request head not received in time"))
        case .body:
            rejectRequest(.error(408, "request body not received in time"))
        case .authenticating:
            parked = nil
            localHead.clear()
            rejectRequest(.error(503, "authentication keys unavailable"))
        case .awaitingResponse:
            if responseStarted { abort() } else { close() }
        case .tunnel, .closing:
            close()
        }
    }

    /// Called by the upstream side when its response deadline passes.
    func responseTimedOut() { upstreamFailed(.responseTimeout) }

    private func clientClosed() {
        // A half-closed client may still wait for a response to a complete request.
        if phase == .awaitingResponse && requestComplete && !responseStarted && upstream != nil && inbound.isEmpty {
            clientKeepAlive = false
            socket.pauseReading()
            return
        }
        abort()
    }

    private func closeAfterFlushing() {
        phase = .closing
        if outbound.isEmpty && !corked { close() } else { closeAfterFlush = true; deadline = loop.lastNow &+ 5_000_000_000 }
    }

    /// Closes at once, abandoning any exchange in flight.
    func abort() {
        if exchangeOpen { exchangeOpen = false; context.activeRequests -= 1 }
        if let upstream { upstream.abandon(); self.upstream = nil }
        if waitingForPool { pool?.cancelWaiter(self); waitingForPool = false }
        close()
    }

    private func close() {
        guard !isClosed else { return }
        isClosed = true
        phase = .closing
        deadline = 0
        loop.unwatchDeadline(self)
        socket.close()
        context.openConnections -= 1
        inbound.clear()
        inbound.releaseIfEmpty()
        outbound.clear()
        outbound.releaseIfEmpty()
    }
}
