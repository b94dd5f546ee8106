import PortcullisHTTP

/// The client side of an `Exchange`: what a server connection does for the one request
/// it handed over. The HTTP/1.1 connection implements it; an HTTP/2 stream will too. The
/// exchange and the upstream never reach into a client's socket: every byte for the
/// client, every pause and every end goes through here.
///
/// Called on the loop queue only. The responder owns its exchange and the exchange holds
/// its responder; the responder's close path calls `exchange.responderClosed()`, which ends
/// the exchange and breaks that cycle. After it, the exchange calls nothing here.
protocol ExchangeResponder: AnyObject {
    /// The request is going to an upstream (authentication passed): start reading its
    /// body now (HTTP/1.1 answers `Expect: 100-continue` here). A request without a body
    /// calls `exchange.requestBodyEnded()` at once.
    func forwardingStarts(_ exchange: Exchange)

    /// A local handler will answer after the body: read it into the exchange, as above.
    func localBodyStarts(_ exchange: Exchange)

    /// The request body may flow again (the upstream connected or drained its buffer).
    func requestBodyCanContinue()

    /// The upstream's response head. `decodeChunked` says the body bytes that follow are
    /// the decoded payload of a chunked response (see `decodesChunkedResponses`).
    func sendResponseHead(_ bytes: UnsafeRawBufferPointer, _ head: ResponseHead, decodeChunked: Bool)

    /// Response body bytes, in order (after a 101: tunnelled bytes).
    func sendResponseBody(_ bytes: UnsafeRawBufferPointer)

    /// A response made by the gateway (errors, challenges, redirects, local handlers).
    func sendLocalResponse(_ response: LocalResponse, requestId: UnsafeRawBufferPointer)

    /// The exchange is over: the response was handed over in full (or answered locally).
    func exchangeFinished()

    /// The exchange failed after its response began (the upstream reset): the client
    /// cannot be told with a status, so the connection (or stream) is dropped.
    func abortExchange()

    /// The upstream closed a tunnel: the client connection ends once what is queued left.
    func tunnelEnded()

    /// Chunked response bodies must be decoded for this client (HTTP/1.0, HTTP/2).
    var decodesChunkedResponses: Bool { get }

    /// True while response bytes wait to be sent (the upstream should stop reading).
    var isBackedUp: Bool { get }

    /// Gathers response bytes during one upstream read pass; `uncorkOutput` sends them.
    func corkOutput()
    func uncorkOutput()
}
