/// A record layer between a `StreamSocket` and its owner (TLS, in PortcullisTLS).
///
/// The socket keeps its readiness rules and its callers keep theirs: a caller reads
/// and sends plaintext exactly as on a plain socket, and the layer reads and writes
/// ciphertext through the socket's raw calls (`rawRead`, `rawWrite`), which keep the
/// socket's readiness flags true to what the kernel said. So the edge-triggered
/// poller, the "short read means drained" rule of the readers and the `pending`
/// buffers of the writers work unchanged over TLS; the socket adds only what TLS
/// needs on top:
/// - decrypted bytes the layer still holds (`hasBufferedInput`) keep the socket
///   readable and re-run the read handler, since no socket event will announce them;
/// - ciphertext the kernel did not take is queued by the layer (`hasQueuedOutput`)
///   and drained by the socket on the next writable edge, before the owner's writes;
/// - a write that must first read (a client's handshake) waits for a readable edge.
///
/// Threading: confined to the socket's loop queue, like the socket.
public protocol StreamSecurity: AnyObject {
    /// Decrypts into `buffer`; drives the handshake first when it is not complete.
    func read(into buffer: UnsafeMutableRawBufferPointer) -> SecureIOResult
    /// Encrypts `bytes`. Ciphertext the kernel does not take is queued inside the layer
    /// (so plaintext is accepted whole or not at all).
    func write(_ bytes: UnsafeRawBufferPointer) -> SecureIOResult
    /// Ciphertext waiting for the kernel.
    var hasQueuedOutput: Bool { get }
    /// Writes queued ciphertext: `.bytes` once all of it left, `.wantWrite` while the
    /// kernel is full, `.failed` when the socket failed.
    func flushQueuedOutput() -> SecureIOResult
    /// Decrypted bytes are buffered that a socket event will not announce.
    var hasBufferedInput: Bool { get }
    var isHandshakeComplete: Bool { get }
    /// Sends close_notify (best effort, never blocks).
    func shutdown()
    /// Frees the layer's state; the socket is closing.
    func close()
}

/// What a record layer did with one read or write.
public enum SecureIOResult: Equatable, Sendable {
    case bytes(Int)
    /// Needs more ciphertext from the peer.
    case wantRead
    /// The kernel is full (ciphertext queued; retry the plaintext later).
    case wantWrite
    /// The peer ended the stream (close_notify or end of file).
    case closed
    /// A protocol or socket failure; the layer keeps the reason (`lastFailure`).
    case failed
}
