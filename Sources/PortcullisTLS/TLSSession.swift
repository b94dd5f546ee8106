internal import COpenSSL
import PortcullisCore
import PortcullisIO

/// One TLS connection on a `StreamSocket`: the socket's record layer.
///
/// OpenSSL reads and writes ciphertext through a BIO of our own whose callbacks call
/// the socket's raw `read(2)`/`send(2)` (`StreamSocket.rawRead` / `rawWrite`), so:
/// - ciphertext goes straight between the kernel and OpenSSL's buffers (no copy,
///   read-ahead fills OpenSSL's buffer in one `read(2)`);
/// - the socket's readiness flags stay true to the kernel, so "a short read means
///   drained" still holds for the socket, and the socket re-runs its reader while
///   OpenSSL holds decrypted bytes (`hasBufferedInput`);
/// - a write never blocks inside OpenSSL: ciphertext the kernel does not take is
///   queued here (`outbox`) and drained on the next writable edge before anything
///   else, so `SSL_write` never needs the "retry with the same buffer" dance and a
///   `send` either takes plaintext whole or refuses it (`.wantWrite`).
///
/// The handshake runs inside the first reads (server) or writes (client), driven
/// by the same readiness as everything else: `SSL_ERROR_WANT_READ` waits for the
/// next readable edge, nothing blocks, nothing hops queues.
///
/// Ownership: owns its `SSL` (freed in `close`), retains the context it was made
/// from (certificate reloads never pull a context from under a live connection);
/// the socket owns the session and outlives it.
///
/// Threading: confined to the socket's loop queue.
public final class TLSSession: StreamSecurity {
    private var ssl: OpaquePointer?
    /// The socket owns this session (`StreamSocket.security`) and is the only caller of
    /// its reads and writes, so it is alive whenever the BIO reaches it; `unowned` (checked)
    /// states that, and a reference counted the other way would be a cycle.
    private unowned let socket: StreamSocket
    private let retainedContext: AnyObject
    /// Ciphertext the kernel did not take yet, in order.
    private var outbox = ByteBuffer()
    private var handshakeDone = false
    /// The socket reported end of file or an error inside a BIO call.
    fileprivate var socketEnded = false
    fileprivate var socketErrno: Int32 = 0
    /// Why the session failed, for the owner's log line or 502 reason. Only client
    /// sessions' owners read it, so a socket error's text (strerror, which goes through
    /// gettext) is made when asked for, not on every reset connection.
    ///
    /// A client without a certificate whose server asked for one says so: under TLS 1.3 the
    /// server checks the certificate after the client's handshake is done and refuses it
    /// with an alert, often followed by a reset that arrives first ("connection reset by
    /// peer" alone would hide the reason).
    public var lastFailure: TLSError? {
        let error: TLSError
        switch failureState {
        case .none: return nil
        case .described(let described): error = described
        case .socket(let operation, let code): error = TLSError(operation, reason: IOError("socket", errno: code).description)
        }
        guard certificateRequested else { return error }
        return TLSError(error.operation, reason: "the server asked for a client certificate and none is configured (\(error.reason))")
    }
    /// Set when the session fails: the server had asked for a client certificate and this
    /// client (a `TLSClientContext` without one) sent none.
    private var certificateRequested = false
    private enum FailureState {
        case none
        case described(TLSError)
        case socket(operation: String, errno: Int32)
    }
    private var failureState = FailureState.none
    private var hasFailed: Bool { if case .none = failureState { return false } else { return true } }
    /// The first bytes from the client were plain HTTP, not a TLS record (a client
    /// that used http:// on the TLS port): the owner may answer 400 in plain text.
    public private(set) var sawPlaintextHTTP = false
    private var receivedAny = false
    /// Why a server handshake failed, as OpenSSL's error queue said (nil: it did not fail
    /// inside OpenSSL).
    private var serverHandshakeFailure: TLSHandshakeFailure?

    /// Why the handshake of this server session did not complete, for
    /// `portcullis_tls_handshake_failures_total` (the owner asks when it closes a connection
    /// whose handshake never completed; `timedOut`: its handshake deadline passed).
    public func handshakeFailure(timedOut: Bool) -> TLSHandshakeFailure {
        if sawPlaintextHTTP { return .plaintextHTTP }
        if let serverHandshakeFailure { return serverHandshakeFailure }
        if timedOut { return .timeout }
        return receivedAny ? .closed : .empty
    }

    /// What the BIO's callbacks find this session by (`CallbackHandles`).
    static let callbackHandles = CallbackHandles<CallbackAnchor<TLSSession>>()
    private var handle: UnsafeMutableRawPointer?
    /// What the table holds for this session while the SSL lives (see `CallbackAnchor`).
    private var anchor: CallbackAnchor<TLSSession>?

    deinit {
        if let handle { Self.callbackHandles.remove(handle) }
        if let ssl { SSL_free(ssl) }  // let go of without `close`
    }

    private init(ssl: OpaquePointer, socket: StreamSocket, context: AnyObject) {
        self.ssl = ssl
        self.socket = socket
        self.retainedContext = context
        let bio = BIO_new(socketBIOMethod)!
        // A handle, not a pointer: a BIO call after the session is gone finds nil and fails.
        let anchor = CallbackAnchor(self)
        self.anchor = anchor
        handle = Self.callbackHandles.register(anchor, shardHint: socket.loop.index)
        BIO_set_data(bio, handle)
        BIO_set_init(bio, 1)
        SSL_set_bio(ssl, bio, bio)  // the SSL owns the BIO (one reference for both directions)
    }

    /// Secures an accepted socket as the server side of `context`.
    @discardableResult
    public static func secureServer(_ socket: StreamSocket, context: TLSServerContext) -> TLSSession? {
        guard let ssl = context.makeSSL() else { TLSError.discardQueue(); return nil }
        let session = TLSSession(ssl: ssl, socket: socket, context: context)
        socket.secure(with: session)
        return session
    }

    /// Secures a connected (or connecting) socket as a client of `context`, sending
    /// `serverName` as SNI and checking the certificate against it.
    @discardableResult
    public static func secureClient(_ socket: StreamSocket, context: TLSClientContext,
                                    serverName: String) throws(TLSError) -> TLSSession {
        let ssl = try context.makeSSL(serverName: serverName)
        let session = TLSSession(ssl: ssl, socket: socket, context: context)
        socket.secure(with: session)
        return session
    }

    // MARK: StreamSecurity

    public func read(into buffer: UnsafeMutableRawBufferPointer) -> SecureIOResult {
        guard let ssl, !hasFailed else { return .failed }  // the first failure is the reason
        clearStaleErrors()
        var n = 0
        let ok = SSL_read_ex(ssl, buffer.baseAddress, buffer.count, &n)
        if !handshakeDone { noteHandshake(ssl) }
        if ok == 1 { return .bytes(n) }
        return failure(ssl, ok, "read")
    }

    public func write(_ bytes: UnsafeRawBufferPointer) -> SecureIOResult {
        guard let ssl, !hasFailed else { return .failed }
        guard outbox.isEmpty else { return .wantWrite }
        guard !bytes.isEmpty else { return .bytes(0) }
        clearStaleErrors()
        var written = 0
        var total = 0
        // Partial-write mode returns after each record: keep going while the kernel takes them.
        while total < bytes.count {
            let ok = SSL_write_ex(ssl, bytes.baseAddress! + total, bytes.count - total, &written)
            if !handshakeDone { noteHandshake(ssl) }
            guard ok == 1 else {
                if total > 0 { return .bytes(total) }
                return failure(ssl, ok, "write")
            }
            total += written
            if !outbox.isEmpty { break }
        }
        return .bytes(total)
    }

    public var hasQueuedOutput: Bool { !outbox.isEmpty }

    public func flushQueuedOutput() -> SecureIOResult {
        var sent = 0
        while !outbox.isEmpty {
            switch socket.rawWrite(outbox.readable) {
            case .bytes(let n):
                outbox.consume(n)
                sent += n
            case .wouldBlock, .endOfFile:
                return .wantWrite
            case .failed(let e):
                socketErrno = e
                return .failed
            }
        }
        outbox.releaseIfEmpty()
        return .bytes(sent)
    }

    public var hasBufferedInput: Bool {
        guard let ssl else { return false }
        return SSL_has_pending(ssl) == 1
    }

    public var isHandshakeComplete: Bool { handshakeDone }

    /// Queues `close_notify` (once, never waiting for the peer's). Not after a failure or
    /// the peer's end: there is nobody to tell, or nothing sound to say it with.
    public func shutdown() {
        guard let ssl, handshakeDone, !socketEnded, !hasFailed, socketErrno == 0 else { return }
        ERR_clear_error()
        _ = SSL_shutdown(ssl)  // queues close_notify through the BIO; the peer's is not awaited
        ERR_clear_error()
    }

    public func close() {
        guard let ssl else { return }
        self.ssl = nil
        SSL_free(ssl)
        if let handle {
            self.handle = nil
            Self.callbackHandles.remove(handle)
        }
        anchor = nil
        outbox.clear()
        outbox.releaseIfEmpty()
    }

    // MARK: What the handshake agreed

    /// The ALPN protocol agreed ("h2", "http/1.1"), nil when none was.
    public var negotiatedProtocol: String? {
        guard let ssl else { return nil }
        var data: UnsafePointer<UInt8>?
        var length: UInt32 = 0
        SSL_get0_alpn_selected(ssl, &data, &length)
        guard let data, length > 0 else { return nil }
        return String(decoding: UnsafeBufferPointer(start: data, count: Int(length)), as: UTF8.self)
    }

    /// The handshake resumed an earlier session (ticket).
    public var wasResumed: Bool {
        guard let ssl else { return false }
        return portcullis_ssl_session_reused(ssl) == 1
    }

    /// "TLSv1.3" and so on.
    public var protocolVersion: String {
        guard let ssl, let name = SSL_get_version(ssl) else { return "" }
        return String(cString: name)
    }

    // MARK: Internals

    /// `SSL_get_error` reads the thread's error queue, so it must hold nothing left by
    /// other libcrypto users on this thread (token verification) before a read or write.
    /// Peeking first skips `ERR_clear_error`'s walk of the whole queue on the usual,
    /// empty case (it showed up at 0.5% of the gateway's CPU under the TLS load row).
    @inline(__always)
    private func clearStaleErrors() {
        if ERR_peek_error() != 0 { ERR_clear_error() }
    }

    private func noteHandshake(_ ssl: OpaquePointer) {
        if SSL_is_init_finished(ssl) == 1 { handshakeDone = true }
    }

    private func failure(_ ssl: OpaquePointer, _ rc: Int32, _ operation: String) -> SecureIOResult {
        switch SSL_get_error(ssl, rc) {
        case SSL_ERROR_WANT_READ:
            return .wantRead
        case SSL_ERROR_WANT_WRITE:
            return .wantWrite
        case SSL_ERROR_ZERO_RETURN:
            return .closed
        case SSL_ERROR_SYSCALL where socketErrno == 0:
            TLSError.discardQueue()
            if socketEnded { return .closed }
            failed(ssl, .described(TLSError(handshakeDone ? operation : "handshake", reason: "connection closed")))
            return .failed
        default:
            if !handshakeDone && portcullisIsServer(ssl) {
                serverHandshakeFailure = TLSHandshakeFailure(openSSLReason: portcullis_err_peek_reason())
            }
            let verify = SSL_get_verify_result(ssl)
            if verify != X509_V_OK && !portcullisIsServer(ssl) {
                let text = X509_verify_cert_error_string(verify).map { String(cString: $0) } ?? "code \(verify)"
                TLSError.discardQueue()
                failed(ssl, .described(TLSError("certificate verification failed", reason: text)))
            } else if socketErrno != 0 {
                TLSError.discardQueue()
                failed(ssl, .socket(operation: operation, errno: socketErrno))
            } else {
                failed(ssl, .described(.drain(handshakeDone ? operation : "handshake")))
            }
            return .failed
        }
    }

    /// Records why the session failed, and whether the server had asked for a client
    /// certificate this client did not have (see `lastFailure`).
    private func failed(_ ssl: OpaquePointer, _ state: FailureState) {
        failureState = state
        certificateRequested = portcullis_ssl_certificate_was_requested(ssl) == 1
    }

    private func portcullisIsServer(_ ssl: OpaquePointer) -> Bool { portcullis_ssl_is_server(ssl) == 1 }

    /// The BIO's write: straight to the kernel while nothing is queued; the rest queued.
    fileprivate func transmit(_ bytes: UnsafeRawBufferPointer) -> Bool {
        if !outbox.isEmpty {
            outbox.append(bytes)
            return true
        }
        switch socket.rawWrite(bytes) {
        case .bytes(let n):
            if n < bytes.count { outbox.append(UnsafeRawBufferPointer(rebasing: bytes[n...])) }
            return true
        case .wouldBlock, .endOfFile:
            outbox.append(bytes)
            return true
        case .failed(let e):
            socketErrno = e
            return false
        }
    }

    /// The BIO's read: one `read(2)`; `nil` means "would block".
    fileprivate func receive(_ buffer: UnsafeMutableRawBufferPointer) -> Int? {
        switch socket.rawRead(into: buffer) {
        case .bytes(let n):
            if !receivedAny {
                receivedAny = true
                // A TLS record starts with its content type (0x14…0x18); a request line with a method.
                let first = buffer[0]
                sawPlaintextHTTP = first >= UInt8(ascii: "A") && first <= UInt8(ascii: "Z")
            }
            return n
        case .wouldBlock: return nil
        case .endOfFile:
            socketEnded = true
            return 0
        case .failed(let e):
            socketErrno = e
            return 0
        }
    }
}

/// The BIO method behind every `TLSSession`: read/write through the session's
/// socket. Created once per process.
nonisolated(unsafe) private let socketBIOMethod: OpaquePointer = {  // immutable after creation; OpenSSL only reads it
    let method = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "portcullis socket")!
    _ = BIO_meth_set_write_ex(method) { bio, data, length, written in
        guard let bio, let data, let session = TLSSession.callbackHandles.target(BIO_get_data(bio))?.target else { return 0 }
        portcullis_bio_clear_retry_flags(bio)
        guard session.transmit(UnsafeRawBufferPointer(start: data, count: length)) else { return 0 }
        written?.pointee = length
        return 1
    }
    _ = BIO_meth_set_read_ex(method) { bio, data, length, read in
        guard let bio, let data, let session = TLSSession.callbackHandles.target(BIO_get_data(bio))?.target else { return 0 }
        portcullis_bio_clear_retry_flags(bio)
        guard let n = session.receive(UnsafeMutableRawBufferPointer(start: data, count: length)) else {
            portcullis_bio_set_retry_read(bio)
            return 0
        }
        read?.pointee = n
        return n > 0 ? 1 : 0
    }
    _ = BIO_meth_set_ctrl(method) { _, command, _, _ in
        command == BIO_CTRL_FLUSH ? 1 : 0
    }
    return method
}()
