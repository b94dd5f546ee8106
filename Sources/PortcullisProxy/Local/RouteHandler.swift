/// A route the gateway answers itself once the request was authenticated, as it would have
/// forwarded it (the session endpoints: exchange, refresh, logout, devices). The route's
/// authentication runs first, exactly as on a forwarded route (a credential in the body
/// included); the handler gets the whole body and the grant. Called on the loop queue;
/// must not block: an answer that needs I/O returns nil and comes through `reply`.
public protocol RouteHandler: AnyObject, Sendable {
    /// The most body bytes the handler reads (past it: 413).
    var bodyLimit: Int { get }
    /// `grant` is nil for an anonymous request (an `auth: none` or `optional` route).
    func handle(_ request: RequestView, body: UnsafeRawBufferPointer, grant: AuthGrant?, reply: LocalReply) -> LocalResponse?
    /// True: forward this request (body read whole) to the route's upstream instead of
    /// answering it. Only asked on a route that has one. Default false.
    func forwardsInstead(_ request: RequestView, body: UnsafeRawBufferPointer) -> Bool
}

extension RouteHandler {
    public func forwardsInstead(_ request: RequestView, body: UnsafeRawBufferPointer) -> Bool { false }
}

/// One request's call of a `RouteHandler`, in the shape the exchange answers local
/// handlers with (`finishLocal`). Confined to the request's loop.
final class RouteHandlerCall: LocalHandler, @unchecked Sendable {
    // @unchecked Sendable: made and used on one loop (the grant is not Sendable).
    let handler: any RouteHandler
    let grant: AuthGrant?

    init(_ handler: any RouteHandler, grant: AuthGrant?) {
        self.handler = handler
        self.grant = grant
    }

    func handle(_ request: RequestView, body: UnsafeRawBufferPointer) -> LocalResponse {
        .error(500, "route handler called without a reply")
    }

    func handle(_ request: RequestView, body: UnsafeRawBufferPointer, reply: LocalReply) -> LocalResponse? {
        handler.handle(request, body: body, grant: grant, reply: reply)
    }
}
