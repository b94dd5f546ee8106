import Foundation
import Logging
import PortcullisIO
import PortcullisTestSupport
import Testing
@testable import PortcullisProxy

/// Late events and lifetimes: a decision that arrives after its client left, after the
/// connection answered and closed, or twice; upstream faults while clients go away. Each
/// must find a live object that ignores what no longer applies, and every connection's
/// objects must be freed once nothing needs them (no cycle left behind).
@Suite(.serialized)
struct ExchangeLifetimeTests {
    /// An authenticator that defers every decision; the test resumes them when it chooses.
    final class DeferringAuthenticator: RequestAuthenticator, @unchecked Sendable {
        // @unchecked Sendable: `pending` is guarded by `lock`.
        private let lock = NSLock()
        private var pending: [AuthResumption] = []

        func authenticate(_ request: RequestView, route: Route, resumption: AuthResumption) -> AuthOutcome {
            lock.withLock { pending.append(resumption) }
            return .deferred
        }

        func authenticate(_ request: RequestView, route: Route, body: UnsafeRawBufferPointer,
                          resumption: AuthResumption) -> AuthOutcome {
            authenticate(request, route: route, resumption: resumption)
        }

        /// The next deferred decision, waiting up to `timeout` seconds.
        func next(timeout: Double = 5) throws -> AuthResumption {
            let end = Date().addingTimeInterval(timeout)
            while Date() < end {
                if let first = lock.withLock({ pending.isEmpty ? nil : pending.removeFirst() }) { return first }
                usleep(2_000)
            }
            throw TestFailure("no decision was deferred within \(timeout) s")
        }
    }

    final class Gateway {
        let group: EventLoopGroup
        let server: ProxyServer
        let port: UInt16

        init(upstream: UInt16, authenticator: any RequestAuthenticator,
             configure: (inout ProxyConfiguration) -> Void = { _ in }) throws {
            group = EventLoopGroup(count: 1)
            let address = try SocketAddress(parsing: "127.0.0.1:\(upstream)")
            var configuration = ProxyConfiguration(
                routes: [RouteConfiguration(pathPrefix: "/", upstream: "app", auth: .required)],
                upstreams: [UpstreamConfiguration(name: "app", address: address, responseTimeout: 5)])
            configure(&configuration)
            server = try ProxyServer(group: group, configuration: configuration, authenticator: authenticator,
                                     accessLogFD: nil, logger: Logger(label: "test"))
            port = try server.addListener(address: SocketAddress(parsing: "127.0.0.1:0"), mode: .gateway)
            server.start()
        }

        func connect() throws -> RawConnection { try RawConnection(port: port) }

        /// Runs `body` on the loop and waits for it (the loop's state is confined there).
        func onLoop<T>(_ body: @escaping () -> T) -> T {
            nonisolated(unsafe) var result: T?
            group.loops[0].queue.sync { result = body() }
            return result!
        }

        deinit {
            let done = DispatchSemaphore(value: 0)
            server.shutdown(gracePeriod: 0) { done.signal() }
            done.wait()
        }
    }

    static func ok(_ body: String) -> String {
        "HTTP/1.1 200 OK\r\ncontent-length: \(body.utf8.count)\r\n\r\n\(body)"
    }

    static var refusal: AuthOutcome { .reject(.error(401, "no", headers: [("www-authenticate", "Bearer")])) }

    /// Waits until `condition` holds (checked on the caller's thread), up to `timeout`.
    static func eventually(timeout: Double = 5, _ condition: () -> Bool) -> Bool {
        let end = Date().addingTimeInterval(timeout)
        while Date() < end {
            if condition() { return true }
            usleep(5_000)
        }
        return condition()
    }

    /// The shape of the crash found by an outside check: a refusal delivered late, on a
    /// `Connection: close` request, closes the connection inside the resumption, which
    /// then went on into freed memory. Many rounds, each answered, the gateway serving on.
    @Test func aLateRefusalThatClosesTheConnectionIsDeliveredAndTheGatewayServesOn() throws {
        let upstream = try ScriptedUpstream()
        let auth = DeferringAuthenticator()
        let gateway = try Gateway(upstream: upstream.port, authenticator: auth)
        for round in 0..<50 {
            let client = try gateway.connect()
            client.send("GET /r/\(round) HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
            try auth.next().resume(Self.refusal)
            let response = try #require(client.readMessage())
            #expect(response.status == 401)
            #expect(client.peerClosed())
        }
        #expect(Self.eventually { gateway.onLoop { gateway.server.openConnectionsByLoop[0] } == 0 })
    }

    /// The decision arrives after the client went away: it is dropped, nothing reaches the
    /// upstream, and the exchange, its connection and their buffers are freed once the
    /// late answer was let go (nothing holds them in a cycle).
    @Test func aDecisionForAClientThatLeftIsDroppedAndItsObjectsAreFreed() throws {
        let upstream = try ScriptedUpstream()
        let auth = DeferringAuthenticator()
        let gateway = try Gateway(upstream: upstream.port, authenticator: auth)
        weak var exchange: Exchange?
        do {
            let client = try gateway.connect()
            client.send("GET /gone HTTP/1.1\r\nHost: a\r\n\r\n")
            let resumption = try auth.next()
            exchange = resumption.target as? Exchange
            client.close()
            #expect(Self.eventually { gateway.onLoop { gateway.server.openConnectionsByLoop[0] } == 0 })
            resumption.resume(.anonymous)
            // Let the resumption run on the loop, then let go of it.
            gateway.onLoop { () }
        }
        #expect(Self.eventually { gateway.onLoop { exchange == nil } })
        #expect(upstream.acceptedCount == 0)
        // The gateway still answers.
        let client = try gateway.connect()
        client.send("GET /next HTTP/1.1\r\nHost: a\r\n\r\n")
        try auth.next().resume(Self.refusal)
        #expect(client.readMessage()?.status == 401)
    }

    /// A decision delivered twice (or for an earlier wait of a reused exchange) applies once.
    @Test func aSecondOrStaleDecisionIsIgnored() throws {
        let upstream = try ScriptedUpstream()
        let auth = DeferringAuthenticator()
        let gateway = try Gateway(upstream: upstream.port, authenticator: auth)
        let client = try gateway.connect()
        client.send("GET /one HTTP/1.1\r\nHost: a\r\n\r\n")
        let first = try auth.next()
        first.resume(.anonymous)
        let app = try upstream.accept()
        #expect(app.readMessage()?.startLine == "GET /one HTTP/1.1")
        first.resume(Self.refusal)  // the same wait again: ignored
        app.send(Self.ok("one"))
        #expect(client.readMessage()?.bodyText == "one")
        // The connection's exchange is reused for the next request; the first wait's
        // decision still arrives for it and is ignored by its generation.
        client.send("GET /two HTTP/1.1\r\nHost: a\r\n\r\n")
        let second = try auth.next()
        first.resume(.anonymous)
        #expect(app.staysQuiet(for: 0.3))
        second.resume(Self.refusal)
        #expect(client.readMessage()?.status == 401)
    }

    /// The upstream resets mid-response while other clients queue for the one pooled
    /// connection and leave: every client gets an answer or a closed connection, the
    /// waiters that stayed are served, and nothing is left open.
    @Test func upstreamFaultsWhileQueuedClientsLeaveLeaveNothingBehind() throws {
        let upstream = try ScriptedUpstream()
        let auth = DeferringAuthenticator()
        let gateway = try Gateway(upstream: upstream.port, authenticator: auth) {
            $0.upstreams[0].maxConnections = 1
        }
        let first = try gateway.connect()
        first.send("GET /slow HTTP/1.1\r\nHost: a\r\n\r\n")
        try auth.next().resume(.anonymous)
        let app = try upstream.accept()
        #expect(app.readMessage()?.startLine == "GET /slow HTTP/1.1")
        // Three more wait for the pool; two of them leave.
        var waiting: [RawConnection] = []
        for i in 0..<3 {
            let client = try gateway.connect()
            client.send("GET /w/\(i) HTTP/1.1\r\nHost: a\r\n\r\n")
            try auth.next().resume(.anonymous)
            waiting.append(client)
        }
        waiting[0].close()
        waiting[2].close()
        usleep(100_000)  // the gateway sees them leave (end of file) and gives up their places
        // Half a response, then a reset: the first client's connection is dropped.
        app.send("HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nhalf")
        usleep(50_000)
        app.close()
        #expect(first.peerClosed())
        // The waiter that stayed gets the next connection.
        let next = try upstream.accept()
        #expect(next.readMessage()?.startLine == "GET /w/1 HTTP/1.1")
        next.send(Self.ok("w1"))
        #expect(waiting[1].readMessage()?.bodyText == "w1")
        waiting[1].close()
        #expect(Self.eventually { gateway.onLoop { gateway.server.openConnectionsByLoop[0] } == 0 })
    }

    /// A request whose upstream connection is attached at once (an idle pooled one) lets
    /// the body flow from inside the read that brought its head. When the head had arrived
    /// in pieces (so the bytes sit in the connection's buffer), the body used to be
    /// consumed twice, once by a nested pass: a precondition failure killed the process.
    @Test func aBodyBehindAHeadInPiecesOnAPooledConnectionIsForwardedOnce() throws {
        let upstream = try ScriptedUpstream()
        let gateway = try Gateway(upstream: upstream.port, authenticator: NoProvidersAuthenticator(realm: "t")) {
            $0.routes[0].auth = .none
        }
        let client = try gateway.connect()
        client.send("GET /warm HTTP/1.1\r\nHost: a\r\n\r\n")
        let app = try upstream.accept()
        #expect(app.readMessage()?.startLine == "GET /warm HTTP/1.1")
        app.send(Self.ok("warm"))
        #expect(client.readMessage()?.bodyText == "warm")
        // The pool now holds an idle connection; the next head arrives in two pieces, the
        // second with the whole body behind it.
        for round in 0..<3 {
            client.send("POST /b/\(round) HTTP/1.1\r\nHo")
            usleep(50_000)
            client.send("st: a\r\nContent-Length: 11\r\n\r\nhello world")
            let request = try #require(app.readMessage())
            #expect(request.startLine == "POST /b/\(round) HTTP/1.1")
            #expect(request.bodyText == "hello world")
            app.send(Self.ok("ok \(round)"))
            #expect(client.readMessage()?.bodyText == "ok \(round)")
        }
        #expect(upstream.acceptedCount == 1)
    }
}
