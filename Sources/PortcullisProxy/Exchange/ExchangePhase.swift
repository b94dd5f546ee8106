/// Where an `Exchange` is in its life. One value stands for what used to be a dozen flags
/// and optionals: every event that reaches the exchange from elsewhere (a deferred
/// decision, a pool, an upstream connection, a deadline, the client side) is checked
/// against it, and the moves between phases are the ones `ExchangePhase.allows` lists.
///
/// ```
/// idle ─begin→ received ─┬→ readingBody(local) ──→ answeringLate ──→ idle
///                        ├→ readingBody(credential) ─┐
///                        ├→ authenticating ←─────────┤
///                        └→ waitingForConnection ←───┴─ (from authenticating too)
///                              │        ↑ (retry on a fresh connection)
///                              ↓        │
///                           forwarding ─┴→ responding ──→ idle
///                                        └→ tunnel ────→ idle
/// ```
/// Any phase but `idle` may end in `idle` (answered, finished, cancelled).
enum ExchangePhase: Equatable {
    /// No request: before the first, between two, after the last.
    case idle
    /// A request head arrived (or bytes that never became one); it is being routed.
    case received
    /// The request body is read whole before anything else happens: for a local handler
    /// (`local`), or for a route whose credential travels in the body (`credential`).
    case readingBody(BodyPurpose)
    /// The authentication decision waits for I/O (a signing-key fetch); the head is parked.
    case authenticating
    /// A local handler answers later (a store write).
    case answeringLate
    /// The request waits for a pooled upstream connection (or for the pool to open one).
    case waitingForConnection
    /// An upstream connection is attached: the request goes out, no response yet.
    case forwarding
    /// The upstream's response head went to the client; its body follows.
    case responding
    /// A 101 went to the client: bytes pass through both ways.
    case tunnel

    enum BodyPurpose: Equatable { case local, credential }

    /// The moves the exchange may make. Anything else is a bug in the exchange itself
    /// (events from elsewhere are checked before they move it).
    static func allows(_ from: ExchangePhase, _ to: ExchangePhase) -> Bool {
        if to == .idle { return true }
        switch (from, to) {
        case (.idle, .received):
            return true
        case (.received, .readingBody), (.received, .authenticating), (.received, .waitingForConnection):
            return true
        case (.readingBody(.local), .answeringLate), (.readingBody(.credential), .answeringLate):
            return true
        case (.authenticating, .readingBody(.local)):
            return true  // a route the gateway answers, once authenticated
        case (.readingBody(.local), .waitingForConnection):
            return true  // ... which hands this request to the route's upstream (`RouteHandler.forwardsInstead`)
        case (.readingBody(.credential), .authenticating), (.readingBody(.credential), .waitingForConnection):
            return true
        case (.authenticating, .waitingForConnection):
            return true
        case (.waitingForConnection, .forwarding):
            return true
        case (.forwarding, .waitingForConnection), (.forwarding, .responding), (.forwarding, .tunnel):
            return true
        default:
            return false
        }
    }

    /// A name for counters and debug messages.
    var name: String {
        switch self {
        case .idle: "idle"
        case .received: "received"
        case .readingBody(.local): "reading-local-body"
        case .readingBody(.credential): "reading-credential-body"
        case .authenticating: "authenticating"
        case .answeringLate: "answering-late"
        case .waitingForConnection: "waiting-for-connection"
        case .forwarding: "forwarding"
        case .responding: "responding"
        case .tunnel: "tunnel"
        }
    }
}
