import PortcullisHTTP
import PortcullisIO

/// What an authenticated request carries to its upstream.
///
/// A class: the grant travels from the decision through the exchange to the forwarded head
/// by reference (as a struct with two existentials, an array and three strings, every hop
/// copied it through its value witnesses: 1.9 % of the authenticated h2 row's CPU).
/// Immutable, so one grant can serve many requests at once: the authenticator keeps one per
/// verified credential and route policy (`EdgeAuthenticator`), and a change is a new grant
/// (`replacingCookie`). The exchange only reads it (a retried forward reads the same grant).
public final class AuthGrant: Sendable {
    /// Injected after every client identity header was stripped.
    public let headers: [(name: String, value: String)]
    /// Remove the client's `Authorization` header before forwarding.
    public let dropAuthorization: Bool
    /// When set, every client `Cookie` field is replaced by this value (the
    /// session cookies removed); an empty string drops the field.
    public let replacementCookie: String?
    /// Told the upstream's status once the response head arrives (logout routes).
    public let observer: (any UpstreamResponseObserver)?
    /// The verified identity itself, for a route the gateway answers (`RouteHandler`).
    public let identity: (any Sendable)?
    /// The injected user id and the provider that verified it, for the access log (the
    /// strings the identity headers carry; nil for an anonymous grant).
    public let userID: String?
    public let provider: String?

    public init(headers: [(name: String, value: String)], dropAuthorization: Bool = false,
                replacementCookie: String? = nil, observer: (any UpstreamResponseObserver)? = nil,
                identity: (any Sendable)? = nil, userID: String? = nil, provider: String? = nil) {
        self.headers = headers
        self.dropAuthorization = dropAuthorization
        self.replacementCookie = replacementCookie
        self.observer = observer
        self.identity = identity
        self.userID = userID
        self.provider = provider
    }

    /// The same grant with `cookie` as the replacement Cookie value.
    public func replacingCookie(_ cookie: String?) -> AuthGrant {
        AuthGrant(headers: headers, dropAuthorization: dropAuthorization, replacementCookie: cookie, observer: observer,
                  identity: identity, userID: userID, provider: provider)
    }
}

/// Learns how the upstream answered a request the authenticator let through.
/// Called once, on the connection's loop queue, when the response head arrives.
public protocol UpstreamResponseObserver: AnyObject, Sendable {
    func upstreamAnswered(status: Int)
    /// The same, for a sampled request: `spans` records what the observer does on its behalf
    /// (a revocation store call) as child spans of the request.
    func upstreamAnswered(status: Int, spans: ChildSpans?)
}

extension UpstreamResponseObserver {
    public func upstreamAnswered(status: Int, spans: ChildSpans?) { upstreamAnswered(status: status) }
}

/// The decision for one request.
public enum AuthOutcome {
    /// Forward without identity (identity headers are still stripped).
    case anonymous
    /// Forward with the grant's headers injected.
    case grant(AuthGrant)
    /// Answer locally and do not forward.
    case reject(LocalResponse)
    /// The decision waits for I/O (a signing-key refetch). The connection keeps
    /// the request, reads nothing more from the client, and continues when the
    /// authenticator calls `AuthResumption.resume` (exactly once, on the loop).
    case deferred
    /// The credential travels in the request body: the exchange reads the whole body (at
    /// most `limit` bytes; past it, 413) and asks again with
    /// `authenticate(_:route:body:resumption:)`, then forwards the body unchanged.
    /// Only from the head's `authenticate`.
    case needsBody(limit: Int)
}

/// What a deferred decision is delivered to: the request's exchange (or, in a test of an
/// authenticator, whatever records the outcome). Called on the loop's queue.
public protocol DeferredDecisionTarget: AnyObject {
    /// `generation` names the wait the outcome answers; a target that moved on ignores it.
    func resumeAuthentication(_ outcome: AuthOutcome, generation: UInt64)
}

/// The handle through which a deferred decision is delivered. It holds its target (the
/// exchange) strongly, so a late answer can never find freed memory, together with the
/// generation of the wait it answers: an exchange that ended meanwhile (the client left)
/// or moved on to another request ignores it. Holding the exchange keeps it, its responder
/// and their buffers alive until the answer arrives; every deferral ends (a key fetch has
/// its timeout), so nothing is held for longer than that.
public struct AuthResumption: @unchecked Sendable {
    // @unchecked Sendable: the target is only touched on `loop.queue` (`resume` hops there).
    /// Where the outcome goes, and which wait it answers (an authenticator that wraps another
    /// hands the inner one a resumption of its own and passes the outcome on to these).
    public let target: any DeferredDecisionTarget
    public let generation: UInt64
    /// The connection's loop; the decision is applied on its queue.
    public let loop: EventLoop

    public init(target: any DeferredDecisionTarget, generation: UInt64, loop: EventLoop) {
        self.target = target
        self.generation = generation
        self.loop = loop
    }

    /// Delivers the final outcome (from any queue; it is applied on `loop`).
    /// `.deferred` is answered with 500.
    public func resume(_ outcome: sending AuthOutcome) {
        let box = OutcomeBox(outcome)
        loop.execute { [self] in target.resumeAuthentication(box.outcome, generation: generation) }
    }
}

/// Carries an outcome (header strings and a response) across to the loop queue.
final class OutcomeBox: @unchecked Sendable {
    // @unchecked Sendable: written once before the hop, read once after it.
    let outcome: AuthOutcome
    init(_ outcome: AuthOutcome) { self.outcome = outcome }
}

/// Decides whether a request may pass and with which identity. Called on the
/// connection's loop queue; it must not block (I/O answers `.deferred`).
public protocol RequestAuthenticator: AnyObject, Sendable {
    func authenticate(_ request: RequestView, route: Route, resumption: AuthResumption) -> AuthOutcome
    /// Decides once the whole request body was read, after the head's decision was
    /// `.needsBody` (`body` is valid only during the call).
    func authenticate(_ request: RequestView, route: Route, body: UnsafeRawBufferPointer,
                      resumption: AuthResumption) -> AuthOutcome
}

/// The authenticator used when no provider is configured: `auth: required` routes
/// answer 401 with a Bearer challenge instead of forwarding unauthenticated traffic;
/// `optional` and `none` routes pass without identity.
public final class NoProvidersAuthenticator: RequestAuthenticator {
    let realm: String
    public init(realm: String) { self.realm = realm }

    public func authenticate(_ request: RequestView, route: Route, body: UnsafeRawBufferPointer,
                             resumption: AuthResumption) -> AuthOutcome {
        authenticate(request, route: route, resumption: resumption)
    }

    public func authenticate(_ request: RequestView, route: Route, resumption: AuthResumption) -> AuthOutcome {
        switch route.configuration.auth {
        case .required:
            return .reject(.error(401, "authentication required",
                                  headers: [("www-authenticate", "Bearer realm=\"\(realm)\"")]))
        case .optional, .none:
            return .anonymous
        }
    }
}
