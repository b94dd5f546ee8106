internal import COpenSSL
import PortcullisCore

/// The client side of TLS towards one destination (an upstream, a key host, a Redis
/// server): TLS 1.2+, the peer verified against the system trust store or a CA file,
/// SNI and host-name (or IP) verification per connection, an optional client
/// certificate, and resumption: the newest session ticket the destination sent is
/// offered on the next connection. Owns its `SSL_CTX` and cached session.
///
/// One context per destination: the cached session is the last one received, so a
/// context shared by two servers would offer one server's ticket to the other
/// (harmless — the server falls back to a full handshake — but wasted).
///
/// Threading: any thread; the cached session is behind a lock.
public final class TLSClientContext: @unchecked Sendable {
    // @unchecked Sendable: `context` is configured in init only; `session` under `lock`.
    let context: OpaquePointer
    private let lock = Lock()
    private var session: OpaquePointer?  // SSL_SESSION*, one reference owned
    public let caFile: String?

    /// - Parameters:
    ///   - caFile: a PEM bundle of trusted roots; nil → the system store.
    ///   - certificate: a client certificate to present (mutual TLS).
    public init(caFile: String?, certificate: TLSCertificate? = nil) throws(TLSFileError) {
        self.caFile = caFile
        ERR_clear_error()
        guard let context = SSL_CTX_new(TLS_client_method()) else {
            throw TLSFileError(file: caFile ?? "", reason: "SSL_CTX_new: \(TLSError.drainQueue())")
        }
        self.context = context
        SSL_CTX_set_verify(context, SSL_VERIFY_PEER, nil)
        _ = portcullis_ssl_ctx_min_tls12(context)
        _ = SSL_CTX_set_options(context, portcullis_ssl_default_options())
        _ = portcullis_ssl_ctx_set_mode(context, Int(SSL_MODE_RELEASE_BUFFERS) | Int(SSL_MODE_ENABLE_PARTIAL_WRITE)
            | Int(SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER))
        _ = portcullis_ssl_ctx_set_read_ahead(context, 1)
        let loaded = caFile.map { SSL_CTX_load_verify_locations(context, $0, nil) } ?? SSL_CTX_set_default_verify_paths(context)
        guard loaded == 1 else {
            // Every stored property is set: a throw from here runs `deinit`, which frees the context.
            throw TLSFileError(file: caFile ?? "the system trust store", reason: "cannot load trusted certificates (\(TLSError.drainQueue()))")
        }
        if let certificate {
            guard SSL_CTX_use_certificate(context, certificate.chain[0]) == 1,
                  certificate.chain.dropFirst().allSatisfy({ portcullis_ssl_ctx_add_chain_cert(context, $0) == 1 }),
                  SSL_CTX_use_PrivateKey(context, certificate.key) == 1 else {
                throw TLSFileError(file: certificate.certificateFile, reason: "cannot use the client certificate (\(TLSError.drainQueue()))")
            }
        } else {
            portcullis_ssl_ctx_note_certificate_requests(context)  // see `TLSSession.lastFailure`
        }
        _ = portcullis_ssl_ctx_set_session_cache_mode(context, Int(SSL_SESS_CACHE_CLIENT) | Int(SSL_SESS_CACHE_NO_INTERNAL_STORE))
        // A handle, not a pointer (`CallbackHandles`): a callback after this is gone finds nil.
        handle = Self.callbackHandles.register(self)
        _ = SSL_CTX_set_ex_data(context, 0, handle)
        SSL_CTX_sess_set_new_cb(context, newSessionCallback)
    }

    static let callbackHandles = CallbackHandles<TLSClientContext>()
    private var handle: UnsafeMutableRawPointer?

    deinit {
        if let handle { Self.callbackHandles.remove(handle) }
        if let session { SSL_SESSION_free(session) }
        SSL_CTX_free(context)
    }

    /// A client `SSL` for one connection: SNI and the identity to check (a DNS
    /// name, or an IP literal checked against the certificate's IP addresses).
    func makeSSL(serverName: String) throws(TLSError) -> OpaquePointer {
        ERR_clear_error()
        guard let ssl = SSL_new(context) else { throw .drain("SSL_new") }
        SSL_set_connect_state(ssl)
        let isIPLiteral = serverName.contains(":") || serverName.allSatisfy { $0.isNumber || $0 == "." }
        if isIPLiteral {
            guard X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), serverName) == 1 else {
                SSL_free(ssl)
                throw TLSError("certificate verification", reason: "cannot check the certificate against IP \(serverName)")
            }
        } else {
            guard portcullis_ssl_set_sni(ssl, serverName) == 1, SSL_set1_host(ssl, serverName) == 1 else {
                SSL_free(ssl)
                throw TLSError("certificate verification", reason: "cannot set the server name \(serverName)")
            }
        }
        lock.withLock {
            if let session { _ = SSL_set_session(ssl, session) }
        }
        return ssl
    }

    fileprivate func store(_ newSession: OpaquePointer) {
        let old = lock.withLock { () -> OpaquePointer? in
            let old = session
            session = newSession
            return old
        }
        if let old { SSL_SESSION_free(old) }
    }

    /// True once a session to offer has been received (tests, `/metrics`).
    public var hasResumableSession: Bool { lock.withLock { session != nil } }
}

/// `SSL_CTX_sess_set_new_cb`: keep the newest ticket; returning 1 takes the reference.
private let newSessionCallback: @convention(c) (OpaquePointer?, OpaquePointer?) -> Int32 = { ssl, session in
    guard let ssl, let session, let ctx = SSL_get_SSL_CTX(ssl),
          let context = TLSClientContext.callbackHandles.target(SSL_CTX_get_ex_data(ctx, 0)) else { return 0 }
    context.store(session)
    return 1
}
