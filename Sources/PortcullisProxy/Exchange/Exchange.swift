import Foundation
import PortcullisCore
import PortcullisHTTP
import PortcullisIO
import W3CTraceContext

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
/// Its life is one `ExchangePhase` (see there for the moves). Every event from elsewhere is
/// checked against the phase: a late answer for a wait that is over (a deferred decision,
/// a local handler's reply) is dropped by its generation; an upstream or pool event that
/// is not legal in the current phase is counted and ignored (a debug build traps), never
/// followed into state that belongs to another request.
///
/// Ownership, all of it strong and visible to the compiler: the responder (the connection
/// or stream) owns its exchange and the exchange holds its responder; the responder breaks
/// that cycle in its one close path (`responderClosed`). The exchange holds its upstream
/// connection and that connection holds the exchange while attached; both let go when the
/// exchange ends. A pool's queue and a deferred decision hold the exchange too, so a late
/// event always finds a live object, which then decides by its phase whether it applies.
///
/// Deadlines: the exchange owns the ones of its own waits (`deadline`: an authentication
/// waiting for keys, a request waiting for a pooled connection); its responder reports
/// the earliest of its own and this one to the loop and calls `deadlineExpired`.
///
/// An HTTP/1.1 connection keeps one exchange and reuses it for each request (no allocation
/// per request); `begin` starts one, `finish` or `cancel` ends it.
///
/// Threading: confined to the loop queue.
final class Exchange: DeferredDecisionTarget, @unchecked Sendable {
    // @unchecked Sendable: confined to the loop queue (see type comment).

    let context: ListenerContext
    /// The configuration this request is served under: the listener's current one when
    /// the request began (`open`), kept to its end whatever a reload does meanwhile.
    private(set) var serving: ListenerServing
    /// `X-Forwarded-Proto`: the client connection's own (TLS or not), not the listener's now.
    let scheme: StaticString
    /// The connection is TLS (`scheme` is https).
    let isSecure: Bool
    /// The client side; nil once it closed (`responderClosed`), after which nothing is sent.
    private var responder: (any ExchangeResponder)?
    let peer: SocketAddress
    /// The peer's address as text (X-Forwarded-For, access log), made on the first
    /// request: a connection that never sends one (a TLS resumption probe, a port check)
    /// costs no `inet_ntop` (which formats through `sprintf`).
    private(set) lazy var peerText: String = peer.host

    private(set) var phase: ExchangePhase = .idle
    /// Between `begin` and `finish`/`cancel`.
    var isActive: Bool { phase != .idle }
    /// The response head went to the client (its status can no longer change).
    var responseStarted: Bool { phase == .responding || phase == .tunnel }
    /// The request went to an upstream and no response came yet: a client that half-closed
    /// still gets it (one that left earlier, still waiting for a decision or a connection,
    /// gives up its place).
    var awaitsResponse: Bool { phase == .forwarding }
    /// The upstream has request bytes queued (the client's reading stays paused).
    var upstreamBackedUp: Bool { upstream.map { !$0.canTakeMore } ?? false }
    /// When the current wait (authenticating, waiting for a connection) gives up; 0: none.
    private(set) var deadline: UInt64 = 0
    var loop: EventLoop { context.loop }

    // The request.
    private(set) var method: HTTPMethod = .get
    /// The protocol the request came on (logs and metrics); kept for an unparsed answer.
    private(set) var transport: RequestProtocol
    private var bodyFraming: BodyFraming = .none
    /// The whole request body was read (or there was none). The request side runs beside
    /// the phase: an upstream may answer before the body is complete.
    private(set) var requestComplete = false
    private var lastChunkSent = false
    private var retryable = false
    private var retried = false

    // The route and the upstream.
    private var routeUpstreamName = ""
    /// The matched route's index + 1 (0: none), for the request counters.
    private var routeSlot = 0
    private var pool: UpstreamPool?
    /// Attached in `forwarding`, `responding` and `tunnel` only.
    private var upstream: UpstreamConnection?
    /// The head for the upstream, kept until the response starts (for a retry).
    private var forwardedHead = ByteBuffer()
    /// The request asked for, and the gateway forwarded, a WebSocket upgrade: only then
    /// may a 101 from the upstream turn the connection into a tunnel.
    private(set) var upgradeForwarded = false
    /// The tunnel's frames in each direction (after a 101), followed so that a Close can go
    /// between two frames when the gateway goes away (`goAway()`).
    private var framesToClient = WebSocketFrameCursor()
    private var framesToUpstream = WebSocketFrameCursor()
    private var tunnelClosing = TunnelClosing()
    /// Set by a grant on a logout route; told the upstream's status.
    private var responseObserver: (any UpstreamResponseObserver)?
    /// When the request was handed to a pool (upstream latency): `loop.lastNow`, the time
    /// of the read that completed the request, as the response side uses the time of the
    /// read that brought its head (no clock call of its own on either side).
    private var forwardedAt: UInt64 = 0

    // The response.
    private var responseStatus = 0
    private var responseBytes = 0

    // The access log.
    private var startedAt: UInt64 = 0
    private var wallStart: Double = 0
    private var logMethod = ""
    private var logPath = ""
    private var requestId = ByteBuffer()
    /// Who was refused and why (#35.3): kept per request with no allocation of their own (the
    /// route's prefix, the grant's user and provider and the refusal's reason are strings
    /// that exist already; Host and User-Agent are copied into buffers reused by the next
    /// request, only when the log carries them).
    private var logRoute = ""
    private var logDecision = AccessRecord.Decision.none
    private var logReason: String?
    private var logUser: String?
    private var logProvider: String?
    private var logUpstreamAddress: String?
    /// The gateway answered (true) or the app did (false).
    private var answeredAtEdge = true
    private var logHost = ByteBuffer()
    private var logUserAgent = ByteBuffer()

    // Tracing (`tracing:`; nil when off or for local handlers).
    fileprivate(set) var trace: RequestTrace?
    /// Kept for a sampled span only: the route matched, the auth decision and its reason.
    // (fileprivate: set by the tracing extension below.)
    fileprivate var tracedRoute: RouteConfiguration?
    fileprivate var tracedDecision = "none"
    fileprivate var tracedReason: String?
    fileprivate var tracedProvider: String?
    /// When a sampled request began waiting for signing keys (wall-clock ns; 0: not waiting).
    fileprivate var keysWaitStart: UInt64 = 0

    // Waiting: for an authentication that needs I/O, or for a body read before acting.
    /// The head bytes, copied while the request waits (its view is rebased onto them).
    private var savedHead = ByteBuffer()
    /// The waiting request; its `bytes` point into `savedHead`. Set in `readingBody` and
    /// `authenticating`.
    private var parkedView: RequestView?
    /// The route decided on (`readingBody(.credential)`, `authenticating`).
    private var parkedRoute: Route?
    /// The handler answering (`readingBody(.local)`).
    private var pendingLocal: (any LocalHandler)?
    /// A local handler's body, or the body of a route whose credential travels in it
    /// (read whole before the decision, then forwarded from here: `bodyHeld`).
    private var heldBody = ByteBuffer()
    /// What a local handler reads at most (an authenticator's `.needsBody` limit replaces it).
    private static let localHandlerBodyLimit = 64 * 1024
    private var heldBodyLimit = Exchange.localHandlerBodyLimit
    private var heldBodyTooLarge = false
    /// The request body was read before the decision and sits in `heldBody`: it goes to
    /// the upstream from there, with a `content-length`, once the upstream is connected.
    private var bodyHeld = false
    /// Identifies the current wait, so a late answer for an earlier one is ignored.
    private var generation: UInt64 = 0

    init(context: ListenerContext, responder: any ExchangeResponder, peer: SocketAddress, transport: RequestProtocol,
         secure: Bool) {
        self.transport = transport
        self.context = context
        self.serving = context.serving
        self.scheme = secure ? "https" : "http"
        self.isSecure = secure
        self.responder = responder
        self.peer = peer
    }

    // MARK: Phases

    /// Moves to `next`; a move the table does not list is a bug here (debug builds trap).
    private func enter(_ next: ExchangePhase) {
        if !ExchangePhase.allows(phase, next) {
            outOfPhase("move to \(next.name)")
        }
        phase = next
        deadline = 0
    }

    /// An event that is not legal in the current phase: counted and ignored. After the
    /// exchange ended (`idle`) it is a late one (an upstream read pass that was under way
    /// when the client left); in any other phase it is a bug here, and a debug build traps.
    private func outOfPhase(_ event: @autoclosure () -> String) {
        serving.metrics?.countOutOfPhaseEvent(loopIndex: loop.index)
        if phase != .idle { assertionFailure("exchange event out of phase: \(event()) in \(phase.name)") }
    }

    // MARK: Starting

    /// Opens the exchange for a request whose head arrived (`methodBytes` for the log).
    func begin(method: HTTPMethod, methodBytes: UnsafeRawBufferPointer, transport: RequestProtocol) {
        open()
        self.method = method
        self.transport = transport
        if serving.accessLog != nil { logMethod = String(decoding: methodBytes, as: UTF8.self) }
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
        if phase != .idle {
            outOfPhase("begin")
            cancel()
        }
        enter(.received)
        serving = context.serving
        context.activeRequests += 1
        startedAt = loop.lastNow
        wallStart = serving.accessLog != nil ? WallClock.nowSeconds() : 0
        bodyFraming = .none
        requestComplete = false
        lastChunkSent = false
        responseStatus = 0
        responseBytes = 0
        retried = false
        responseObserver = nil
        routeUpstreamName = ""
        routeSlot = 0
        if trace != nil {
            trace = nil
            tracedRoute = nil
            tracedDecision = "none"
            tracedReason = nil
            tracedProvider = nil
            keysWaitStart = 0
        }
        logPath = "-"  // until routing names the normalized path (a request refused before it logs "-")
        if serving.accessLog != nil {
            logRoute = ""
            logDecision = .none
            logReason = nil
            logUser = nil
            logProvider = nil
            logUpstreamAddress = nil
            answeredAtEdge = true
        }
        // The one reset of the copied Host and User-Agent (the access log's and a sampled
        // span's): `noteForLog` only fills what is still empty.
        logHost.clear()
        logUserAgent.clear()
        upgradeForwarded = false
        requestId.clear()
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

    /// The request's Host (`:authority`) and User-Agent, copied for its access log line
    /// while the head is at hand (only the fields the log carries; `all`: both, for a sampled
    /// span's `server.address` and `user_agent.original`). A field copied already (a sampled
    /// request the access log noted first) is not copied again.
    private func noteForLog(_ view: RequestView, all: Bool = false) {
        let fields = all ? AccessLogFields.all : serving.configuration.accessLogFields
        if fields.contains(.host), logHost.isEmpty, let host = view.host() { logHost.append(host) }
        if fields.contains(.userAgent), logUserAgent.isEmpty {
            var seen = false
            view.values(of: "user-agent") { value in
                guard !seen else { return }
                seen = true
                logUserAgent.append(UnsafeRawBufferPointer(rebasing: value.prefix(512)))
            }
        }
    }

    /// Routes, authenticates and forwards (or answers) a request whose target was normalized.
    func start(_ view: RequestView) {
        guard phase == .received else { outOfPhase("start"); return }
        logPath = view.path
        if serving.accessLog != nil { noteForLog(view) }
        if serving.redirectsToHTTPS {
            redirectToHTTPS(view)
            return
        }
        bodyFraming = view.framing
        if case .local(let handler) = context.mode {
            pendingLocal = handler
            readBodyFirst(view, purpose: .local, limit: Self.localHandlerBodyLimit)
            return
        }
        if let tracer = serving.tracer {
            beginTrace(view, tracer)
            if trace?.sampled == true { noteForLog(view, all: true) }
        }
        if view.path.utf8.count == serving.publishedPathLength, let published = serving.published, view.path == published.path {
            reject(published.answer(method: view.methodBytes))
            return
        }
        let host = serving.routes.hasHostRoutes ? view.host() : nil
        guard let route = serving.routes.match(path: view.path, host: host) else {
            reject(.error(404, "no route for this path"))
            return
        }
        routeUpstreamName = route.configuration.upstream
        routeSlot = serving.routeSlots[route.index]
        if serving.accessLog != nil { logRoute = route.configuration.pathPrefix }
        if trace?.sampled == true { tracedRoute = route.configuration }
        generation &+= 1
        let outcome = serving.authenticator.authenticate(view, route: route, resumption: resumption())
        if case .needsBody(let limit) = outcome {
            // The credential is in the body: read it whole (bounded), then decide.
            parkedRoute = route
            readBodyFirst(view, purpose: .credential, limit: limit)
            return
        }
        decide(outcome, view, route: route)
    }

    private func resumption() -> AuthResumption {
        AuthResumption(target: self, generation: generation, loop: loop)
    }

    /// Reads the whole body into `heldBody` before acting; the head waits in `savedHead`.
    private func readBodyFirst(_ view: RequestView, purpose: ExchangePhase.BodyPurpose, limit: Int) {
        park(view)
        heldBodyLimit = limit
        enter(.readingBody(purpose))
        responder?.localBodyStarts(self)
    }

    /// Copies the head so the request can wait past the read that brought it.
    private func park(_ view: RequestView) {
        savedHead.clear()
        savedHead.append(view.bytes)
        parkedView = view.rebased(onto: savedHead.readable)
    }

    private func unpark() {
        parkedView = nil
        parkedRoute = nil
        pendingLocal = nil
        savedHead.clear()
        savedHead.releaseIfEmpty(keepingUpTo: 4096)
    }

    /// Applies a decision, or parks the request until `resumeAuthentication`.
    private func decide(_ outcome: AuthOutcome, _ view: RequestView, route: Route) {
        guard case .deferred = outcome else {
            apply(outcome, view, route: route)
            return
        }
        // Keep the head; body bytes wait with the responder (it reads nothing meanwhile).
        if parkedView == nil { park(view) } else { parkedView = view }
        parkedRoute = route
        enter(.authenticating)
        if trace?.sampled == true { keysWaitStart = ChildSpans.nowNanos }
        deadline = loop.lastNow &+ UInt64(serving.configuration.timeouts.header * 1e9)
    }

    /// Continues a request after a deferred authentication decision. An answer for a wait
    /// that is over (the client left, the wait timed out, another request began) is dropped.
    func resumeAuthentication(_ outcome: AuthOutcome, generation: UInt64) {
        guard phase == .authenticating, generation == self.generation, let view = parkedView, let route = parkedRoute else { return }
        // The view points into `savedHead`: keep those bytes until the decision was applied.
        var head = ByteBuffer()
        swap(&head, &savedHead)
        defer { head.clear(); swap(&head, &savedHead) }
        parkedView = nil
        parkedRoute = nil
        recordKeysWait(outcome)
        apply(outcome, view, route: route)
        if phase == .waitingForConnection || phase == .forwarding { responder?.requestBodyCanContinue() }
    }

    /// The whole body the authenticator asked for (`.needsBody`) was read: decide on it.
    private func decideOnBody() {
        guard let route = parkedRoute, let view = parkedView else { outOfPhase("body decision"); return }
        if heldBodyTooLarge {
            heldBodyTooLarge = false
            reject(.error(413, "request body too large for the credential check on this route"))
            return
        }
        bodyHeld = true
        // Forwarded with the length of the body read (a chunked upload included).
        let held = view.rebased(onto: savedHead.readable, framing: .contentLength(heldBody.readableBytes))
        parkedView = held
        generation &+= 1
        let outcome = serving.authenticator.authenticate(held, route: route, body: heldBody.readable, resumption: resumption())
        decide(outcome, held, route: route)
    }

    /// Acts on a decision: forward (with the grant's headers) or answer the client. A
    /// decision still deferred after a resumption is an internal error.
    private func apply(_ outcome: AuthOutcome, _ view: RequestView, route: Route) {
        if trace?.sampled == true { noteDecision(outcome) }
        if serving.accessLog != nil {
            switch outcome {
            case .grant(let grant) where grant.userID != nil:
                logDecision = .verified
                logUser = grant.userID
                logProvider = grant.provider
            case .anonymous, .grant: logDecision = .anonymous
            case .reject(let response):
                logDecision = .refused
                logReason = response.authReason
            case .deferred, .needsBody: break
            }
        }
        switch outcome {
        case .anonymous:
            forward(view, route: route, grant: nil)
        case .grant(let grant):
            forward(view, route: route, grant: grant)
        case .reject(let response):
            reject(response)
        case .deferred, .needsBody:
            reject(.error(500, "authentication did not complete"))
        }
    }

    private func forward(_ view: RequestView, route: Route, grant: AuthGrant?) {
        if let handler = route.configuration.handler {
            answerItself(handler, view, grant: grant, route: route)
            return
        }
        forwardUpstream(view, route: route, grant: grant)
    }

    private func forwardUpstream(_ view: RequestView, route: Route, grant: AuthGrant?) {
        if !route.configuration.privatePaths.isEmpty,
           RouteTable.isPrivate(RouteTable.forwardedPath(view.path, route: route), route.configuration.privatePaths) {
            reject(.error(404, "no route for this path"))
            return
        }
        responseObserver = grant?.observer
        let pool = serving.pools[route.upstreamIndex]
        upgradeForwarded = ForwardedHead.build(
            into: &forwardedHead, view, path: RouteTable.forwardedPath(view.path, route: route), grant: grant,
            pool: pool, context: context, serving: serving, scheme: scheme, peerText: peerText, trace: trace,
            requestId: &requestId)
        self.pool = pool
        if serving.metrics != nil { forwardedAt = loop.lastNow }
        switch view.framing {
        case .none, .contentLength(0), .untilClose: break
        case .contentLength, .chunked: retryable = false  // the body is streamed once
        }
        unpark()
        enter(.waitingForConnection)
        if bodyHeld {
            bodyFraming = view.framing  // sent whole from `heldBody`; the client's is read
        } else {
            responder?.forwardingStarts(self)
            guard phase == .waitingForConnection else { return }  // the body was refused meanwhile
        }
        pool.acquire(for: self)
    }

    /// A route the gateway answers (`RouteHandler`): with the body already read for the
    /// decision (a credential in it), at once; else once the body was read.
    private func answerItself(_ handler: any RouteHandler, _ view: RequestView, grant: AuthGrant?, route: Route) {
        pendingLocal = RouteHandlerCall(handler, grant: grant)
        // Set before the body is read: a body already buffered may end (and `finishLocal`
        // run) inside `readBodyFirst`.
        parkedRoute = route
        if bodyHeld {
            bodyHeld = false
            if parkedView == nil { park(view) }
            finishLocal()
        } else {
            readBodyFirst(view, purpose: .local, limit: handler.bodyLimit)
        }
    }

    // MARK: The request body (called by the responder)

    /// True when body bytes can be taken now (into `heldBody`, or by a connected upstream
    /// whose send buffer has room).
    var canTakeRequestBody: Bool {
        switch phase {
        case .readingBody: return true
        case .forwarding, .responding:
            guard let upstream else { return false }
            return upstream.isConnected && upstream.canTakeMore
        default: return false
        }
    }

    /// Decoded body bytes (re-framed as chunks when the upstream gets a chunked body).
    /// Bytes nobody can take now (see `canTakeRequestBody`) are dropped.
    func requestBody(_ piece: UnsafeRawBufferPointer) {
        switch phase {
        case .readingBody:
            appendHeldBody(piece)
        case .forwarding, .responding:
            guard let upstream else { return }
            if case .chunked = bodyFraming { upstream.sendChunk(piece) } else { upstream.send(piece) }
        default:
            break
        }
    }

    /// The whole request body was read.
    func requestBodyEnded() {
        requestComplete = true
        switch phase {
        case .readingBody(.credential):
            decideOnBody()
        case .readingBody(.local):
            finishLocal()
        case .forwarding, .responding:
            if let upstream, upstream.isConnected { requestFullySent(upstream) }
        default:
            break  // waiting for a connection: sent once connected (`upstreamConnected`)
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
        guard phase == .tunnel, let upstream else { return false }
        if tunnelClosing.sentToUpstream {
            // Nothing more goes to the upstream after the gateway's Close (RFC 6455 §5.5.1);
            // the client's own Close, its answer to ours, ends the tunnel.
            framesToUpstream.advance(bytes)
            endTunnelIfClosed()
            return true
        }
        guard upstream.canTakeMore else { return false }
        if !tunnelClosing.requested {
            framesToUpstream.advance(bytes)
            upstream.send(bytes)
            return true
        }
        let before = framesToUpstream.advance(bytes, stopAtBoundary: true)
        upstream.send(UnsafeRawBufferPointer(rebasing: bytes[..<before]))
        if framesToUpstream.atBoundary {
            closeTowardUpstream()
            if before < bytes.count, phase == .tunnel {
                return tunnelSend(UnsafeRawBufferPointer(rebasing: bytes[before...]))
            }
        }
        return true
    }

    /// The gateway goes away (shutdown, or a reload removed the listener): a tunnel gets a
    /// WebSocket Close with 1001 in both directions, each between two frames (at once, or
    /// when the frame under way ends). Nothing follows it; the client's Close in answer (or
    /// the upstream closing) ends the tunnel, and the connection's close timeout bounds
    /// the wait. The tunnel is a WebSocket: only a forwarded WebSocket upgrade becomes one.
    func goAway() {
        guard phase == .tunnel, !tunnelClosing.requested else { return }
        tunnelClosing.requested = true
        tunnelClosing.clientClosesBefore = framesToUpstream.closeFrames
        if framesToClient.atBoundary { closeTowardClient() }
        if phase == .tunnel, framesToUpstream.atBoundary { closeTowardUpstream() }
    }

    private func closeTowardClient() {
        tunnelClosing.sentToClient = true
        WebSocketGoingAway.toClient.withUnsafeBytes { responder?.sendResponseBody($0) }
        endTunnelIfClosed()
    }

    private func closeTowardUpstream() {
        tunnelClosing.sentToUpstream = true
        WebSocketGoingAway.toUpstream().withUnsafeBytes { upstream?.send($0) }
        endTunnelIfClosed()
    }

    /// Both Close frames left and the client answered: the upstream connection is dropped
    /// (its answer is not needed) and the client connection closes once flushed.
    private func endTunnelIfClosed() {
        guard phase == .tunnel, tunnelClosing.sentToClient, tunnelClosing.sentToUpstream,
              framesToUpstream.closeFrames > tunnelClosing.clientClosesBefore else { return }
        detachUpstream()
        finish(notify: false)
        responder?.tunnelEnded()
    }

    // MARK: Bodies read before acting

    private func appendHeldBody(_ piece: UnsafeRawBufferPointer) {
        if heldBody.readableBytes + piece.count > heldBodyLimit { heldBodyTooLarge = true; return }
        heldBody.append(piece)
    }

    private func releaseHeldBody() {
        bodyHeld = false
        heldBodyTooLarge = false
        heldBody.clear()
        heldBody.releaseIfEmpty()
    }

    private func finishLocal() {
        guard let handler = pendingLocal, let view = parkedView else { outOfPhase("local answer"); return }
        // A handler whose route also has an upstream may hand the request on to it, whole
        // (the session refresh endpoint on an app's old refresh path: a token that is not
        // the gateway's goes to the app as before), with the body read, as a body-credential
        // route forwards it.
        if !heldBodyTooLarge, let call = handler as? RouteHandlerCall, let route = parkedRoute, route.upstreamIndex >= 0,
           call.handler.forwardsInstead(view, body: heldBody.readable) {
            bodyHeld = true
            let held = view.rebased(onto: savedHead.readable, framing: .contentLength(heldBody.readableBytes))
            parkedView = held
            pendingLocal = nil
            forwardUpstream(held, route: route, grant: call.grant)
            return
        }
        let response: LocalResponse?
        if heldBodyTooLarge {
            response = .error(413, "request body too large for this endpoint")
        } else {
            generation &+= 1
            response = handler.handle(view, body: heldBody.readable,
                                      reply: LocalReply(exchange: self, generation: generation, loop: loop,
                                                        secure: isSecure))
        }
        unpark()
        releaseHeldBody()
        guard let response else {
            enter(.answeringLate)  // answered through `sendLateLocalResponse`; pipelined bytes wait
            return
        }
        answer(response)
    }

    /// A local handler's answer that needed I/O.
    func sendLateLocalResponse(_ response: LocalResponse, generation: UInt64) {
        guard phase == .answeringLate, generation == self.generation else { return }
        answer(response)
    }

    // MARK: Upstream events (called by UpstreamPool / UpstreamConnection)

    /// The pool handed over a connection (connected or still connecting).
    func attach(_ connection: UpstreamConnection) {
        guard phase == .waitingForConnection else {
            outOfPhase("attach")
            connection.abandon()
            return
        }
        enter(.forwarding)
        upstream = connection
        connection.exchange = self
        if connection.isConnected { upstreamConnected() }
    }

    func upstreamConnected() {
        guard phase == .forwarding, let upstream else { outOfPhase("upstream connected"); return }
        upstream.beginExchange(method: method, head: forwardedHead.readable)
        // A failed send lets go of this exchange (it may be on a fresh connection already).
        guard phase == .forwarding, self.upstream === upstream else { return }
        if bodyHeld && heldBody.readableBytes > 0 { upstream.send(heldBody.readable) }
        guard phase == .forwarding, self.upstream === upstream else { return }
        if requestComplete {
            requestFullySent(upstream)
        } else {
            responder?.requestBodyCanContinue()
        }
    }

    /// The pool queued the request: it gives up at `until` (monotonic ns).
    func markQueued(until deadline: UInt64) {
        guard phase == .waitingForConnection else { outOfPhase("queued"); return }
        self.deadline = deadline
    }

    /// The pool has no connection and no queue room.
    func poolExhausted() {
        guard phase == .waitingForConnection else { outOfPhase("pool exhausted"); return }
        pool?.exhaustedCount += 1
        reject(.error(503, "upstream \(routeUpstreamName) has no free connection"))
    }

    /// The upstream can take more body bytes again.
    func upstreamDrained() {
        guard phase == .forwarding || phase == .responding || phase == .tunnel else { return }
        responder?.requestBodyCanContinue()
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

    /// The upstream connection failed (it has let go of this exchange already).
    func upstreamFailed(_ failure: UpstreamFailure) {
        upstream = nil
        switch phase {
        case .waitingForConnection, .forwarding:
            break
        case .responding, .tunnel:
            cancel()
            responder?.abortExchange()
            return
        default:
            outOfPhase("upstream failed")
            return
        }
        let name = routeUpstreamName
        switch failure {
        case .resetBeforeResponse(let reused):
            if reused && retryable && !retried, let pool {
                // The pooled connection had been closed by the upstream: one retry.
                retried = true
                enter(.waitingForConnection)
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
        guard phase == .forwarding else { outOfPhase("response head"); return }
        enter(head.status == 101 ? .tunnel : .responding)
        if head.status == 101 {
            framesToClient = WebSocketFrameCursor()
            framesToUpstream = WebSocketFrameCursor()
            tunnelClosing = TunnelClosing()
        }
        responseStatus = head.status
        if serving.accessLog != nil {
            answeredAtEdge = false
            logUpstreamAddress = upstream?.addressText
        }
        if let latency = pool?.latency {
            latency.recordNanoseconds(Int64(truncatingIfNeeded: loop.lastNow &- forwardedAt))
        }
        if let observer = responseObserver {
            responseObserver = nil
            observer.upstreamAnswered(status: head.status, spans: childSpans())
        }
        forwardedHead.clear()
        forwardedHead.releaseIfEmpty(keepingUpTo: 4096)
        responder?.sendResponseHead(bytes, head, decodeChunked: decodeChunked)
    }

    func responseBody(_ bytes: UnsafeRawBufferPointer) {
        guard phase == .responding || phase == .tunnel else { outOfPhase("response body"); return }
        responseBytes += bytes.count
        if phase == .tunnel {
            if tunnelClosing.sentToClient { return }  // nothing may follow the Close sent
            if !tunnelClosing.requested {
                framesToClient.advance(bytes)
                responder?.sendResponseBody(bytes)
                return
            }
            let before = framesToClient.advance(bytes, stopAtBoundary: true)
            responder?.sendResponseBody(UnsafeRawBufferPointer(rebasing: bytes[..<before]))
            if framesToClient.atBoundary, phase == .tunnel { closeTowardClient() }
            return
        }
        responder?.sendResponseBody(bytes)
    }

    /// The whole response has been forwarded.
    func responseComplete(upstreamReusable: Bool) {
        guard phase == .responding else { outOfPhase("response complete"); return }
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
        guard phase == .tunnel else { outOfPhase("tunnel closed"); return }
        finish(notify: false)
        responder?.tunnelEnded()
    }

    /// The upstream's response deadline passed.
    func responseTimedOut() { upstreamFailed(.responseTimeout) }

    var decodesChunkedResponses: Bool { responder?.decodesChunkedResponses ?? false }
    var isBackedUp: Bool { responder?.isBackedUp ?? false }
    func corkOutput() { responder?.corkOutput() }
    func uncorkOutput() { responder?.uncorkOutput() }

    /// The client cannot take more response bytes now / again.
    func pauseResponse() { upstream?.socket.pauseReading() }
    func resumeResponse() { upstream?.socket.resumeReading() }

    // MARK: Deadlines

    /// The current wait's deadline passed (the responder checks `deadline`).
    func deadlineExpired(now: UInt64) {
        guard deadline != 0, deadline <= now else { return }
        deadline = 0
        switch phase {
        case .authenticating:
            recordKeysWait(nil)
            reject(.error(503, "authentication keys unavailable"))
        case .waitingForConnection:
            pool?.exhaustedCount += 1  // `reject` gives up the place in the queue
            reject(.error(503, "upstream \(routeUpstreamName) has no free connection"))
        default:
            break
        }
    }

    // MARK: Ending

    /// Answers locally (errors, auth challenges) and ends the exchange.
    func reject(_ response: LocalResponse) {
        if phase == .idle { beginUnparsed() }
        detachUpstream()
        unpark()
        releaseHeldBody()
        answer(response)
    }

    private func answer(_ response: LocalResponse) {
        // Every answer has a request id, in the access log and the response (`x-request-id`),
        // also one the gateway gave itself (a 401, a redirect, a 400): a client quoting it
        // finds the log line.
        if requestId.readableBytes == 0 { context.nextRequestId(into: &requestId) }
        responseStatus = response.status
        responseBytes = response.body.count
        // The responder reads `requestComplete` as it was (a body left unread closes the
        // connection); if sending fails it cancels the exchange, and `finish` does nothing.
        responder?.sendLocalResponse(response, requestId: requestId.readable)
        requestComplete = true
        finish()
    }

    private func finish(notify: Bool = true) {
        guard phase != .idle else { return }
        enter(.idle)
        context.activeRequests -= 1
        // The duration from the request's head to its end, at the loop's clock (no clock call).
        serving.metrics?.countRequest(loopIndex: loop.index, routeSlot: routeSlot, status: responseStatus, transport: transport,
                                      nanoseconds: loop.lastNow &- startedAt)
        if let log = serving.accessLog {
            log.record(AccessRecord(
                time: wallStart, requestId: requestId.readable, method: logMethod, path: logPath,
                status: responseStatus, upstream: routeUpstreamName, bytes: responseBytes,
                durationNanoseconds: loop.now() &- startedAt, client: peerText, transport: transport,
                traceID: trace?.traceID, host: logHost.readable, userAgent: logUserAgent.readable, route: logRoute,
                edge: answeredAtEdge, decision: logDecision, reason: logReason, user: logUser, provider: logProvider,
                upstreamAddress: logUpstreamAddress), fields: serving.configuration.accessLogFields)
        }
        if let trace, trace.sampled { recordSpan(trace) }
        pool = nil
        releaseHeldBody()
        if notify { responder?.exchangeFinished() }
    }

    /// The client went away (or the connection is dropped): the exchange ends unlogged,
    /// its upstream connection is closed and its place in a pool queue given up.
    func cancel() {
        guard phase != .idle else { return }
        detachUpstream()
        enter(.idle)
        context.activeRequests -= 1
        unpark()
        pool = nil
        releaseHeldBody()
    }

    /// The responder closed for good: the exchange ends and lets go of it (the cycle
    /// between them is broken here, in the responder's one close path).
    func responderClosed() {
        cancel()
        responder = nil
    }

    private func detachUpstream() {
        if let upstream {
            self.upstream = nil
            upstream.abandon()
        }
        if phase == .waitingForConnection { pool?.cancelWaiter(self) }
    }
}

// MARK: Tracing

extension Exchange {
    /// Starts this request's trace: the client's `traceparent` continued when `accept_parent`
    /// allows it (its trace id, its span as the parent, its sampled flag, its `tracestate`),
    /// else a new trace sampled at `sample_ratio`. A malformed `traceparent` starts a new one.
    /// The client's `tracestate` fields as one value, or nil when there are none or they pass
    /// W3C Trace Context's limits (32 list members, 512 bytes): such a state is dropped whole,
    /// not forwarded (the spec lets a vendor drop what it cannot pass on intact).
    static func acceptableTraceState(_ fields: [String]) -> String? {
        guard !fields.isEmpty else { return nil }
        let joined = fields.joined(separator: ",")
        guard joined.utf8.count <= 512 else { return nil }
        let members = joined.split(separator: ",").filter { $0.contains { $0 != " " && $0 != "\t" } }.count
        return members <= 32 ? joined : nil
    }

    fileprivate func beginTrace(_ view: RequestView, _ tracer: Tracer) {
        let accepts: Bool
        switch serving.traceAccept {
        case .always: accepts = true
        case .trustedProxies: accepts = serving.isTrusted(peer)
        case .never: accepts = false
        }
        var parent: TraceContext?
        if accepts {
            var parentText: String?
            var count = 0
            view.values(of: "traceparent") { value in
                count += 1
                parentText = String(decoding: value, as: UTF8.self)
            }
            if count == 1, let parentText {
                var state: [String] = []
                view.values(of: "tracestate") { state.append(String(decoding: $0, as: UTF8.self)) }
                parent = try? TraceContext(traceParentHeaderValue: parentText,
                                           traceStateHeaderValue: Self.acceptableTraceState(state))
            }
        }
        let index = loop.index
        var started: RequestTrace
        if let parent {
            started = RequestTrace(traceID: parent.traceID, spanID: tracer.newSpanID(loopIndex: index), parentSpanID: parent.spanID,
                                   sampled: parent.flags.contains(.sampled), traceState: parent.traceStateHeaderValue)
        } else {
            let (traceID, spanID) = tracer.newIDs(loopIndex: index)
            started = RequestTrace(traceID: traceID, spanID: spanID, parentSpanID: nil,
                                   sampled: tracer.sample(loopIndex: index, ratio: serving.traceSampleRatio), traceState: nil)
        }
        if started.sampled { started.wallStart = WallClock.nowSeconds() }
        trace = started
    }

    /// What the authenticator decided, for a sampled span: the refusal's `error` code and
    /// description from its body, the provider from the injected provider header.
    fileprivate func noteDecision(_ outcome: AuthOutcome) {
        switch outcome {
        case .anonymous:
            tracedDecision = "anonymous"
        case .grant(let grant):
            tracedDecision = "verified"
            let header = serving.configuration.providerHeader
            tracedProvider = grant.headers.first { $0.name.lowercased() == header.lowercased() }?.value
        case .reject(let response):
            tracedDecision = "refused"
            if let object = try? JSONSerialization.jsonObject(with: Data(response.body)) as? [String: Any] {
                let code = object["error"] as? String
                let description = object["error_description"] as? String
                tracedReason = [code, description].compactMap { $0 }.joined(separator: ": ")
            }
        case .deferred, .needsBody:
            tracedDecision = "incomplete"
        }
    }

    /// `http.request.method` (OpenTelemetry's `_OTHER` for a method outside the known set).
    fileprivate static func spanMethod(_ method: HTTPMethod) -> String {
        switch method {
        case .get: return "GET"
        case .head: return "HEAD"
        case .post: return "POST"
        case .put: return "PUT"
        case .delete: return "DELETE"
        case .options: return "OPTIONS"
        case .patch: return "PATCH"
        case .trace: return "TRACE"
        case .connect: return "CONNECT"
        case .other: return "_OTHER"
        }
    }

    /// Child spans of this request, when it is sampled.
    fileprivate func childSpans() -> ChildSpans? {
        guard let trace, trace.sampled, let tracer = serving.tracer else { return nil }
        return ChildSpans(tracer: tracer, loop: loop, traceID: trace.traceID, parentSpanID: trace.spanID,
                          limit: serving.traceQueueLimit)
    }

    /// The wait for signing keys (a deferred decision) as a child span: how long, and what was
    /// decided once they came (nil: the wait timed out).
    fileprivate func recordKeysWait(_ outcome: AuthOutcome?) {
        guard keysWaitStart != 0 else { return }
        let start = keysWaitStart
        keysWaitStart = 0
        let decision: String
        switch outcome {
        case .anonymous?: decision = "anonymous"
        case .grant?: decision = "verified"
        case .reject?: decision = "refused"
        case .deferred?, .needsBody?: decision = "incomplete"
        case nil: decision = "timed out"
        }
        childSpans()?.record(name: "signing keys fetch", client: false, startNanos: start, endNanos: ChildSpans.nowNanos,
                             attributes: [("portcullis.auth.decision", decision)], failed: outcome == nil)
    }

    /// Queues the request's server span on this loop (sampled requests only).
    fileprivate func recordSpan(_ trace: RequestTrace) {
        guard let tracer = serving.tracer else { return }
        let start = UInt64(max(0, trace.wallStart) * 1e9)
        let route = tracedRoute.map { ($0.host ?? "") + $0.pathPrefix }
        let span = FinishedSpan(traceID: trace.traceID, spanID: trace.spanID, parentSpanID: trace.parentSpanID,
                                startNanos: start, endNanos: start &+ (loop.now() &- startedAt),
                                method: Self.spanMethod(method), path: logPath, route: route, upstream: routeUpstreamName,
                                status: responseStatus, transport: "\(transport.name)",
                                requestId: String(decoding: requestId.readable, as: UTF8.self),
                                authDecision: tracedRoute == nil ? "none" : tracedDecision, authReason: tracedReason,
                                provider: tracedProvider, scheme: isSecure ? "https" : "http",
                                serverAddress: String(decoding: logHost.readable, as: UTF8.self), clientAddress: peerText,
                                userAgent: String(decoding: logUserAgent.readable, as: UTF8.self))
        tracer.record(span, loopIndex: loop.index, limit: serving.traceQueueLimit)
    }
}

/// Where a tunnel's closing stands when the gateway goes away (`Exchange.goAway()`).
struct TunnelClosing {
    var requested = false
    var sentToClient = false
    var sentToUpstream = false
    /// Close frames the client had sent before: one more is its answer.
    var clientClosesBefore = 0
}
