import PortcullisIO

/// Answers requests locally (admin endpoints, demo apps). Called on the loop queue
/// with the complete request body (bounded by the limits); must not block.
public protocol LocalHandler: AnyObject, Sendable {
    func handle(_ request: RequestView, body: UnsafeRawBufferPointer) -> LocalResponse
    /// Handlers whose answer needs I/O (a Redis write) return nil and call
    /// `reply.send` later. The default answers with `handle(_:body:)`.
    func handle(_ request: RequestView, body: UnsafeRawBufferPointer, reply: LocalReply) -> LocalResponse?
}

extension LocalHandler {
    public func handle(_ request: RequestView, body: UnsafeRawBufferPointer, reply: LocalReply) -> LocalResponse? {
        handle(request, body: body)
    }
}

/// Delivers a local handler's late answer; may be called from any queue, once. Like
/// `AuthResumption`, it holds its exchange and the generation of the wait it answers.
public struct LocalReply: @unchecked Sendable {
    // @unchecked Sendable: the exchange is only touched on `loop.queue` (`send` hops there).
    let exchange: Exchange
    let generation: UInt64
    let loop: EventLoop
    /// The request came over TLS.
    public let secure: Bool

    public func send(_ response: LocalResponse) {
        loop.execute { [self] in exchange.sendLateLocalResponse(response, generation: generation) }
    }
}
