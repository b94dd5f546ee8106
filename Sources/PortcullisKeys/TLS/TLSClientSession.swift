internal import COpenSSL

/// One TLS client connection over memory BIOs: the socket code feeds it the
/// bytes it reads (`receiveCiphertext`) and sends what it produces
/// (`takeCiphertext`), so OpenSSL never touches the descriptor and nothing
/// blocks. Owns its `SSL` (and through it both BIOs); freed in `deinit`.
///
/// Threading: used only on the owning exchange's loop queue.
final class TLSClientSession {
    enum Step: Equatable {
        /// The handshake is complete.
        case done
        /// Needs more bytes from the peer.
        case wantRead
        case failed(String)
    }

    enum ReadResult: Equatable {
        case bytes(Int)
        case wantRead
        /// The peer sent close_notify.
        case closed
        case failed(String)
    }

    private let ssl: OpaquePointer
    private let incoming: OpaquePointer  // network → OpenSSL
    private let outgoing: OpaquePointer  // OpenSSL → network

    /// Sets SNI (for names) and the identity to check: a DNS name via
    /// `SSL_set1_host`, an IP literal via the verify parameters.
    init(context: TLSClientContext, host: String, isIPLiteral: Bool) throws(HTTPFetchError) {
        guard let ssl = SSL_new(context.context) else { throw .tlsFailed(url: host, reason: "SSL_new: \(TLSErrors.drain())") }
        guard let incoming = BIO_new(BIO_s_mem()), let outgoing = BIO_new(BIO_s_mem()) else {
            SSL_free(ssl)
            throw .tlsFailed(url: host, reason: "BIO_new failed")
        }
        SSL_set_bio(ssl, incoming, outgoing)  // the SSL owns both BIOs from here on
        self.ssl = ssl
        self.incoming = incoming
        self.outgoing = outgoing
        SSL_set_connect_state(ssl)
        if isIPLiteral {
            guard X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), host) == 1 else {
                throw .tlsFailed(url: host, reason: "cannot check the certificate against IP \(host)")
            }
        } else {
            guard portcullis_ssl_set_sni(ssl, host) == 1, SSL_set1_host(ssl, host) == 1 else {
                throw .tlsFailed(url: host, reason: "cannot set the server name \(host)")
            }
        }
    }

    deinit { SSL_free(ssl) }

    func handshake() -> Step {
        let rc = SSL_do_handshake(ssl)
        if rc == 1 { return .done }
        switch SSL_get_error(ssl, rc) {
        case SSL_ERROR_WANT_READ, SSL_ERROR_WANT_WRITE:
            return .wantRead  // with memory BIOs, writes never block: output waits in `outgoing`
        default:
            let verify = SSL_get_verify_result(ssl)
            if verify != X509_V_OK {
                let text = X509_verify_cert_error_string(verify).map { String(cString: $0) } ?? "code \(verify)"
                _ = TLSErrors.drain()
                return .failed("certificate verification failed: \(text)")
            }
            return .failed(TLSErrors.drain())
        }
    }

    /// Bytes read from the socket.
    func receiveCiphertext(_ bytes: UnsafeRawBufferPointer) {
        guard !bytes.isEmpty else { return }
        _ = BIO_write(incoming, bytes.baseAddress, Int32(bytes.count))
    }

    /// Encrypts `bytes` (the whole request; memory BIOs take it all).
    func write(_ bytes: [UInt8]) -> Bool {
        bytes.withUnsafeBytes { SSL_write(ssl, $0.baseAddress, Int32($0.count)) == Int32(bytes.count) }
    }

    /// Decrypted bytes into `buffer`.
    func read(into buffer: UnsafeMutableRawBufferPointer) -> ReadResult {
        let rc = SSL_read(ssl, buffer.baseAddress, Int32(min(buffer.count, Int(Int32.max))))
        if rc > 0 { return .bytes(Int(rc)) }
        switch SSL_get_error(ssl, rc) {
        case SSL_ERROR_WANT_READ, SSL_ERROR_WANT_WRITE: return .wantRead
        case SSL_ERROR_ZERO_RETURN: return .closed
        default: return .failed(TLSErrors.drain())
        }
    }

    /// Moves what OpenSSL wants sent into `append`.
    func takeCiphertext(_ append: (UnsafeRawBufferPointer) -> Void) {
        var chunk = [UInt8](repeating: 0, count: 16 * 1024)
        while BIO_ctrl_pending(outgoing) > 0 {
            let n = chunk.withUnsafeMutableBytes { BIO_read(outgoing, $0.baseAddress, Int32($0.count)) }
            guard n > 0 else { return }
            chunk.withUnsafeBytes { append(UnsafeRawBufferPointer(rebasing: $0[0..<Int(n)])) }
        }
    }
}
