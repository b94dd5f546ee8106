import PortcullisCore
import PortcullisHTTP
import PortcullisIO

/// One request and its response, wire-format free: routing, the authentication decision
/// (and its deferral), the wait for a pooled upstream connection, the one retry, upstream
/// failures turned into statuses, local answers, the access log and the metrics. It holds
/// the upstream lease while the response flows; the bytes on the client side go through
/// its `ExchangeResponder`.
///
/// A request's path through the gateway, top to bottom: listener → stream (plain or TLS)
/// → `HTTP1ServerConnection` (parses, frames) → `Exchange` (decides, forwards) →
/// `UpstreamPool` → `UpstreamConnection` → back through the exchange to the responder.
///
/// An HTTP/1.1 connection keeps one exchange and reuses it for each request (no allocation
/// per request); `begin` starts one, `finish` or `cancel` ends it.
///
/// Threading: confined to the loop queue.
final class Exchange: @unchecked Sendable {
    // @unchecked Sendable: confined to the loop queue (see type comment).

    let context: ListenerContext
    /// Owns this exchange and outlives it while it is active (it cancels it before going
    /// away); every entry point from elsewhere checks `isActive` first.
    unowned(unsafe) let responder: any ExchangeResponder
    let peer: SocketAddress
    /// The peer's address as text (X-Forwarded-For, access log), made on the first
    /// request: a connection that never sends one (a TLS resumption probe, a port check)
    /// costs no `inet_ntop` (which formats through `sprintf`).
    private(set) lazy var peerText: String = peer.host

    /// Between `begin` and `finish`/`cancel`.
    private(set) var isActive = false
    var loop: EventLoop { context.loop }

    // The request.
    private(set) var method: HTTPMethod = .get
    /// The protocol the request came on (logs and metrics); kept for an unparsed answer.
    private(set) var transport: RequestProtocol
    private var bodyFraming: BodyFraming = .none
    /// The whole request body was read (or there was none).
    private(set) var requestComplete = false
    private var lastChunkSent = false
    private var retryable = false
    private var retried = false

    // The route and the upstream.
    private var routeUpstreamName = ""
    /// The matched route's index + 1 (0: none), for the request counters.
    private var routeSlot = 0
    private var pool: UpstreamPool?
    private(set) var upstream: UpstreamConnection?
    /// The head for the upstream, kept until the response starts (for a retry).
    private var forwardedHead = ByteBuffer()
    private(set) var waitingForPool = false
    /// The request asked for, and the gateway forwarded, a WebSocket upgrade: only then
    /// may a 101 from the upstream turn the connection into a tunnel.
    private(set) var upgradeForwarded = false
    /// Set by a grant on a logout route; told the upstream's status.
    private var responseObserver: (any UpstreamResponseObserver)?
    /// When the request was handed to a pool (upstream latency): `loop.lastNow`, the time
    /// of the read that completed the request, as the response side uses the time of the
    /// read that brought its head (no clock call of its own on either side).
    private var forwardedAt: UInt64 = 0

    // The response.
    private(set) var responseStarted = false
    private var responseStatus = 0
    private var responseBytes = 0

    // The access log.
    private var startedAt: UInt64 = 0
    private var wallStart: Double = 0
    private var logMethod = ""
    private var logPath = ""
    private var requestId = ByteBuffer()

    // Waiting: for an authentication that needs I/O, or for a local handler's body.
    /// The head bytes, copied while the request waits (its view is rebased onto them).
    private var savedHead = ByteBuffer()
    /// The waiting request; its `bytes` point nowhere until rebased onto `savedHead`.
    private var parkedView: RequestView?
    private var parkedRoute: Route?
    private var pendingLocal: (any LocalHandler)?
    /// A local handler's body, or the body of a route whose credential travels in it
    /// (read whole before the decision, then forwarded from here).
    private var localBody = ByteBuffer()
    /// What a local handler reads at most (a route's `credentialBodyLimit` replaces it).
    private static let localHandlerBodyLimit = 64 * 1024
    private var localBodyLimit = Exchange.localHandlerBodyLimit
    private var localBodyTooLarge = false
    /// The route whose credential is in the body being read (`credentialBodyLimit`).
    private var bodyCredentialRoute: Route?
    /// The request body was read before the decision and sits in `localBody`: it goes to
    /// the upstream from there, with a `content-length`, once the upstream is connected.
    private var bodyHeld = false
    private var awaitingLateReply = false
    /// Identifies the current wait, so a late answer for an earlier request is ignored.
    private var generation: UInt64 = 0

    /// Late answers reach the exchange through this (see `ExchangeHandle`).
    private let handle = ExchangeHandle()

    init(context: ListenerContext, responder: any ExchangeResponder, peer: SocketAddress, transport: RequestProtocol) {
        self.transport = transport
        self.context = context
        self.responder = responder
        self.peer = peer
        handle.exchange = self
    }

    deinit { handle.exchange = nil }

    // MARK: Starting

    /// Opens the exchange for a request whose head arrived (`methodBytes` for the log).
    func begin(method: HTTPMethod, methodBytes: UnsafeRawBufferPointer, transport: RequestProtocol) {
        open()
        self.method = method
        self.transport = transport
        if context.accessLog != nil { logMethod = String(decoding: methodBytes, as: UTF8.self) }
        switch method {
        case .get, .head, .options, .put, .delete, .trace: retryable = true
        default: retryable = false
        }
    }

    /// Opens the exchange for an answer to bytes that never became a request (a bad head).
    private func beginUnparsed() {
        open()
        method = .get
        logMethod = "-"
        logPath = "-"
    }

    private func open() {
        isActive = true
        context.activeRequests += 1
        startedAt = loop.lastNow
        wallStart = context.accessLog != nil ? WallClock.nowSeconds() : 0
        bodyFraming = .none
        requestComplete = false
        lastChunkSent = false
        responseStarted = false
        responseStatus = 0
        responseBytes = 0
        retried = false
        responseObserver = nil
        routeUpstreamName = ""
        routeSlot = 0
        logPath = "-"  // until routing names the normalized path (a request refused before it logs "-")
        upgradeForwarded = false
        requestId.clear()
        bodyCredentialRoute = nil
        releaseHeldBody()
    }

    /// `redirect_https` (plain HTTP/1.1 listeners only: the configuration refuses it with TLS
    /// or h2c): 308 (method and body kept, RFC 9110 §15.4.9) to the same host and normalized
    /// target over https, on the default port.
    private func redirectToHTTPS(_ view: RequestView) {
        guard let host = view.host(), !host.isEmpty,
              host.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F && $0 != UInt8(ascii: "/") && $0 != UInt8(ascii: "@") }) else {
            reject(.error(400, "a Host is required to redirect to https"))
            return
        }
        let location = "https://\(host)\(view.path)\(view.query.map { "?\($0)" } ?? "")"
        reject(LocalResponse.error(308, "use https", headers: [("location", location)]))
    }

    /// Routes, authenticates and forwards (or answers) a request whose target was normalized.
    func start(_ view: RequestView) {
        logPath = view.path
        if context.redirectsToHTTPS {
            redirectToHTTPS(view)
            return
        }
        bodyFraming = view.framing
        if case .local(let handler) = context.mode {
            savedHead.clear()
            savedHead.append(view.bytes)
            parkedView = view
            pendingLocal = handler
            localBodyLimit = Self.localHandlerBodyLimit
            responder.localBodyStarts(self)
            return
        }
        if view.path.utf8.count == context.publishedPathLength, let published = context.published, view.path == published.path {
            reject(published.answer(method: view.methodBytes))
            return
        }
        let host = context.routes.hasHostRoutes ? view.host() : nil
        guard let route = context.routes.match(path: view.path, host: host) else {
            reject(.error(404, "no route for this path"))
            return
        }
        routeUpstreamName = route.configuration.upstream
        routeSlot = route.index + 1

        if let limit = route.configuration.credentialBodyLimit, !view.upgrade {
            // The credential is in the body: read it whole (bounded), then decide.
            savedHead.clear()
            savedHead.append(view.bytes)
            parkedView = view
            bodyCredentialRoute = route
            localBodyLimit = limit
            responder.localBodyStarts(self)
            return
        }

        generation &+= 1
        let resumption = AuthResumption(handle: handle, generation: generation, loop: loop)
        let outcome = context.authenticator.authenticate(view, route: route, resumption: resumption)
        guard case .deferred = outcome else {
            apply(outcome, view, route: route)
            return
        }
        // Keep the head; body bytes wait with the responder (it reads nothing meanwhile).
        savedHead.clear()
        savedHead.append(view.bytes)
        parkedView = view
        parkedRoute = route
    }

    /// True while the decision waits for I/O (the responder holds the body and times it out).
    var isAuthenticating: Bool { parkedRoute != nil }

    /// Continues a request after a deferred authentication decision.
    func resumeAuthentication(_ outcome: AuthOutcome, generation: UInt64) {
        guard isActive, generation == self.generation, let view = parkedView, let route = parkedRoute else { return }
        parkedView = nil
        parkedRoute = nil
        var head = ByteBuffer()
        swap(&head, &savedHead)
        defer { head.clear(); swap(&head, &savedHead) }
        apply(outcome, view.rebased(onto: head.readable), route: route)
        responder.requestBodyCanContinue()
    }

    /// The whole body of a `credentialBodyLimit` route was read: decide on it.
    private func decideOnBody(_ route: Route, _ view: RequestView) {
        bodyCredentialRoute = nil
        if localBodyTooLarge {
            parkedView = nil
            localBodyTooLarge = false
            reject(.error(413, "request body too large for the credential check on this route"))
            return
        }
        bodyHeld = true
        // Forwarded with the length of the body read (a chunked upload included).
        let held = view.rebased(onto: savedHead.readable, framing: .contentLength(localBody.readableBytes))
        generation &+= 1
        let resumption = AuthResumption(handle: handle, generation: generation, loop: loop)
        let outcome = context.authenticator.authenticate(held, route: route, body: localBody.readable, resumption: resumption)
        guard case .deferred = outcome else {
            parkedView = nil
            apply(outcome, held, route: route)
            savedHead.clear()
            return
        }
        // `savedHead` and `parkedView` stay; the body waits in `localBody`.
        parkedView = held
        parkedRoute = route
    }

    /// The authentication did not complete in time (keys unavailable).
    func authenticationTimedOut() {
        parkedView = nil
        parkedRoute = nil
        savedHead.clear()
        reject(.error(503, "authentication keys unavailable"))
    }

    /// Acts on a decision: forward (with the grant's headers) or answer the client. A
    /// decision still deferred after a resumption is an internal error.
    private func apply(_ outcome: AuthOutcome, _ view: RequestView, route: Route) {
        switch outcome {
        case .anonymous:
            forward(view, route: route, grant: nil)
        case .grant(let grant):
            forward(view, route: route, grant: grant)
        case .reject(let response):
            reject(response)
        case .deferred:
            reject(.error(500, "authentication did not complete"))
        }
    }

    private func forward(_ view: RequestView, route: Route, grant: AuthGrant?) {
        responseObserver = grant?.observer
        let pool = context.pools[route.upstreamIndex]
        upgradeForwarded = ForwardedHead.build(
            into: &forwardedHead, view, path: RouteTable.forwardedPath(view.path, route: route), grant: grant,
            pool: pool, context: context, peerText: peerText, requestId: &requestId)
        self.pool = pool
        if context.metrics != nil { forwardedAt = loop.lastNow }
        switch view.framing {
        case .none, .contentLength(0), .untilClose: break
        case .contentLength, .chunked: retryable = false  // the body is streamed once
        }
        if bodyHeld {
            bodyFraming = view.framing  // sent whole from `localBody`; the client's is read
        } else {
            responder.forwardingStarts(self)
            guard isActive else { return }
        }
        pool.acquire(for: self)
    }

    // MARK: The request body (called by the responder)

    /// True when body bytes can be taken now (to a local handler, or to a connected
    /// upstream whose send buffer has room).
    var canTakeRequestBody: Bool {
        if pool == nil { return true }
        guard let upstream else { return false }
        return upstream.isConnected && upstream.canTakeMore
    }

    /// Decoded body bytes (re-framed as chunks when the upstream gets a chunked body).
    func requestBody(_ piece: UnsafeRawBufferPointer) {
        guard pool != nil else { appendLocalBody(piece); return }
        guard let upstream else { return }
        if case .chunked = bodyFraming { upstream.sendChunk(piece) } else { upstream.send(piece) }
    }

    /// The whole request body was read.
    func requestBodyEnded() {
        requestComplete = true
        if pool != nil {
            if let upstream, upstream.isConnected { requestFullySent(upstream) }
        } else if let route = bodyCredentialRoute, let view = parkedView {
            decideOnBody(route, view)
        } else if let handler = pendingLocal, let view = parkedView {
            pendingLocal = nil
            parkedView = nil
            finishLocal(handler, view.rebased(onto: savedHead.readable))
            savedHead.clear()
            savedHead.releaseIfEmpty()
        }
    }

    private func requestFullySent(_ upstream: UpstreamConnection) {
        if case .chunked = bodyFraming, !lastChunkSent {
            lastChunkSent = true
            upstream.sendLastChunk()
        }
        upstream.requestFullySent()
    }

    /// Bytes for the upstream after a 101 (the tunnel); false when it cannot take more now.
    func tunnelSend(_ bytes: UnsafeRawBufferPointer) -> Bool {
        guard let upstream, upstream.canTakeMore else { return false }
        upstream.send(bytes)
        return true
    }

    // MARK: Local handlers

    private func appendLocalBody(_ piece: UnsafeRawBufferPointer) {
        if localBody.readableBytes + piece.count > localBodyLimit { localBodyTooLarge = true; return }
        localBody.append(piece)
    }

    private func releaseHeldBody() {
        guard bodyHeld else { return }
        bodyHeld = false
        localBody.clear()
        localBody.releaseIfEmpty()
    }

    private func finishLocal(_ handler: any LocalHandler, _ view: RequestView) {
        let response: LocalResponse?
        if localBodyTooLarge {
            response = .error(413, "request body too large for this endpoint")
        } else {
            generation &+= 1
            response = handler.handle(view, body: localBody.readable,
                                      reply: LocalReply(handle: handle, generation: generation, loop: loop))
        }
        localBody.clear()
        localBody.releaseIfEmpty()
        localBodyTooLarge = false
        guard let response else {
            awaitingLateReply = true  // answered through `sendLateLocalResponse`; pipelined bytes wait
            return
        }
        answer(response)
    }

    /// A local handler's answer that needed I/O.
    func sendLateLocalResponse(_ response: LocalResponse, generation: UInt64) {
        guard isActive, awaitingLateReply, generation == self.generation else { return }
        awaitingLateReply = false
        answer(response)
    }

    // MARK: Upstream events (called by UpstreamPool / UpstreamConnection)

    /// The pool handed over a connection (connected or still connecting).
    func attach(_ connection: UpstreamConnection) {
        waitingForPool = false
        upstream = connection
        connection.exchange = self
        if connection.isConnected { upstreamConnected() }
    }

    func upstreamConnected() {
        guard let upstream, isActive else { return }
        upstream.beginExchange(method: method, head: forwardedHead.readable)
        if bodyHeld && localBody.readableBytes > 0 { upstream.send(localBody.readable) }
        if requestComplete {
            requestFullySent(upstream)
        } else {
            responder.requestBodyCanContinue()
        }
    }

    func markQueued(until deadline: UInt64) {
        waitingForPool = true
        responder.waitsForConnection(until: deadline)
    }

    /// The pool has no connection and no queue room.
    func poolExhausted() {
        waitingForPool = false
        pool?.exhaustedCount += 1
        reject(.error(503, "upstream \(routeUpstreamName) has no free connection"))
    }

    /// The wait for a pooled connection expired.
    func poolWaitExpired() {
        pool?.cancelWaiter(self)
        poolExhausted()
    }

    /// The upstream can take more body bytes again.
    func upstreamDrained() { responder.requestBodyCanContinue() }

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
        guard isActive else { return }
        if responseStarted {
            cancel()
            responder.abortExchange()
            return
        }
        let name = routeUpstreamName
        switch failure {
        case .resetBeforeResponse(let reused):
            if reused && retryable && !retried, let pool {
                // The pooled connection had been closed by the upstream: one retry.
                retried = true
                pool.acquire(for: self, fresh: true)
                return
            }
            reject(.error(502, "upstream \(name) closed the connection"))
        case .connectFailed:
            reject(.error(502, "upstream \(name) refused the connection"))
        case .connectTimeout:
            reject(.error(504, "upstream \(name) connect timed out"))
        case .unresolved:
            reject(.error(502, "upstream \(name) cannot be resolved"))
        case .tlsFailed:
            reject(.error(502, "upstream \(name) failed the TLS handshake"))
        case .responseTimeout:
            reject(.error(504, "upstream \(name) timed out"))
        case .badResponse(let reason):
            reject(.error(502, "upstream \(name) sent an invalid response: \(reason)"))
        case .resetDuringResponse:
            reject(.error(502, "upstream \(name) reset the connection"))
        }
    }

    /// The upstream's response head arrived.
    func responseHead(_ bytes: UnsafeRawBufferPointer, _ head: ResponseHead, decodeChunked: Bool) {
        responseStarted = true
        responseStatus = head.status
        if let metrics = context.metrics, let pool {
            metrics.upstreamLatency[pool.index].recordNanoseconds(Int64(truncatingIfNeeded: loop.lastNow &- forwardedAt))
        }
        if let observer = responseObserver {
            responseObserver = nil
            observer.upstreamAnswered(status: head.status)
        }
        forwardedHead.clear()
        forwardedHead.releaseIfEmpty(keepingUpTo: 4096)
        responder.sendResponseHead(bytes, head, decodeChunked: decodeChunked)
    }

    func responseBody(_ bytes: UnsafeRawBufferPointer) {
        responseBytes += bytes.count
        responder.sendResponseBody(bytes)
    }

    /// The whole response has been forwarded.
    func responseComplete(upstreamReusable: Bool) {
        let connection = upstream
        upstream = nil
        if let connection, let pool {
            pool.release(connection, reusable: upstreamReusable && requestComplete)
        }
        finish()
    }

    /// The upstream ended a tunnel.
    func tunnelClosed() {
        upstream = nil
        guard isActive else { return }
        finish(notify: false)
        responder.tunnelEnded()
    }

    /// The upstream's response deadline passed.
    func responseTimedOut() { upstreamFailed(.responseTimeout) }

    var decodesChunkedResponses: Bool { responder.decodesChunkedResponses }
    var isBackedUp: Bool { responder.isBackedUp }
    func corkOutput() { responder.corkOutput() }
    func uncorkOutput() { responder.uncorkOutput() }

    /// The client cannot take more response bytes now / again.
    func pauseResponse() { upstream?.socket.pauseReading() }
    func resumeResponse() { upstream?.socket.resumeReading() }

    // MARK: Ending

    /// Answers locally (errors, auth challenges) and ends the exchange.
    func reject(_ response: LocalResponse) {
        if !isActive { beginUnparsed() }
        detachUpstream()
        parkedView = nil
        parkedRoute = nil
        pendingLocal = nil
        bodyCredentialRoute = nil
        releaseHeldBody()
        answer(response)
    }

    private func answer(_ response: LocalResponse) {
        // Every answer has a request id, in the access log and the response (`x-request-id`),
        // also one the gateway gave itself (a 401, a redirect, a 400): a client quoting it
        // finds the log line.
        if requestId.readableBytes == 0 { context.nextRequestId(into: &requestId) }
        responseStarted = true
        responseStatus = response.status
        responseBytes = response.body.count
        responder.sendLocalResponse(response, requestId: requestId.readable)
        requestComplete = true
        finish()
    }

    private func finish(notify: Bool = true) {
        guard isActive else { return }
        isActive = false
        context.activeRequests -= 1
        context.metrics?.countRequest(loopIndex: loop.index, routeSlot: routeSlot, status: responseStatus, transport: transport)
        if let log = context.accessLog {
            log.record(AccessRecord(
                time: wallStart, requestId: requestId.readable, method: logMethod, path: logPath,
                status: responseStatus, upstream: routeUpstreamName, bytes: responseBytes,
                durationNanoseconds: loop.now() &- startedAt, client: peerText, transport: transport))
        }
        pool = nil
        releaseHeldBody()
        if notify { responder.exchangeFinished() }
    }

    /// The client went away (or the connection is dropped): the exchange ends unlogged,
    /// its upstream connection is closed and its place in a pool queue given up.
    func cancel() {
        guard isActive else { return }
        isActive = false
        context.activeRequests -= 1
        detachUpstream()
        parkedView = nil
        parkedRoute = nil
        pendingLocal = nil
        bodyCredentialRoute = nil
        awaitingLateReply = false
        pool = nil
        releaseHeldBody()
    }

    private func detachUpstream() {
        if let upstream {
            upstream.abandon()
            self.upstream = nil
        }
        if waitingForPool {
            pool?.cancelWaiter(self)
            waitingForPool = false
        }
    }
}
