import PortcullisCore
internal import COpenSSL
#if canImport(Glibc)
import Glibc
#endif

/// The TLS versions a listener accepts (1.0 and 1.1 never).
public enum TLSVersion: String, Sendable, CaseIterable {
    case v1_2 = "1.2"
    case v1_3 = "1.3"

    var openSSL: Int32 { self == .v1_2 ? TLS1_2_VERSION : TLS1_3_VERSION }
}

/// What a TLS listener serves: `listen[].tls` in the configuration.
public struct TLSServerSettings: Sendable, Equatable {
    public struct CertificateFiles: Sendable, Equatable {
        public var certificate: String
        public var privateKey: String
        public init(certificate: String, privateKey: String) {
            self.certificate = certificate
            self.privateKey = privateKey
        }
    }
    /// The first is the default (no SNI, or a name no certificate covers).
    public var certificates: [CertificateFiles]
    public var minimumVersion: TLSVersion = .v1_2
    /// ALPN protocols in our order of preference: HTTP/2 first, as browsers and
    /// URLSession prefer it (HAProxy's and h2o's default too).
    public var alpn: [String] = ["h2", "http/1.1"]
    /// A client that has not finished its handshake by then is cut off.
    public var handshakeTimeout: Double = 10
    public init(certificates: [CertificateFiles]) { self.certificates = certificates }
}

/// A listener's TLS server side: one OpenSSL `SSL_CTX` per configured certificate,
/// chosen per handshake by SNI (exact names, then `*.` wildcards, from each
/// certificate's subjectAltName; the first certificate otherwise). Every context
/// shares the settings below; owns its contexts and frees them in `deinit`.
///
/// Defaults, written down: TLS 1.2 and 1.3 only; TLS 1.2 suites are ECDHE with
/// AES-GCM or ChaCha20-Poly1305 (forward secrecy and AEAD only), TLS 1.3 suites are
/// OpenSSL's (all AEAD); groups X25519, P-256, P-384; no renegotiation, no
/// compression; server-side session cache off, resumption by stateless tickets
/// sealed with `TicketKeys.shared` (one per TLS 1.3 handshake); buffers released while
/// a connection is idle.
///
/// Reloading (SIGHUP) builds a new `TLSServerContext` and swaps it in for new
/// connections; a session keeps the context it started with alive (it retains it),
/// so established connections never notice.
///
/// Threading: immutable after `init`; sessions are created on any loop.
public final class TLSServerContext: @unchecked Sendable {
    // @unchecked Sendable: immutable after init (see type comment).
    public static let tls12Ciphers = "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305"

    public let settings: TLSServerSettings
    public let certificates: [TLSCertificate]
    let contexts: [OpaquePointer]  // SSL_CTX*, one per certificate
    private let exactNames: [String: Int]
    private let wildcardNames: [String: Int]  // "example.com" for "*.example.com"
    private let alpnList: UnsafeMutablePointer<portcullis_alpn_list>

    /// Loads and checks every certificate; throws naming the file that is wrong.
    public init(settings: TLSServerSettings) throws(TLSFileError) {
        precondition(!settings.certificates.isEmpty, "a TLS listener needs a certificate")
        self.settings = settings
        alpnList = .allocate(capacity: 1)
        alpnList.initialize(to: portcullis_alpn_list())
        var wire: [UInt8] = []
        for name in settings.alpn where !name.isEmpty && name.utf8.count < 256 {
            wire.append(UInt8(name.utf8.count))
            wire.append(contentsOf: name.utf8)
        }
        alpnList.pointee.length = UInt32(min(wire.count, 255))
        withUnsafeMutableBytes(of: &alpnList.pointee.bytes) { $0.copyBytes(from: wire.prefix(255)) }

        var certificates: [TLSCertificate] = []
        for files in settings.certificates {
            certificates.append(try TLSCertificate(certificateFile: files.certificate, keyFile: files.privateKey))
        }
        self.certificates = certificates
        var exact: [String: Int] = [:]
        var wildcard: [String: Int] = [:]
        for (index, certificate) in certificates.enumerated() {
            for name in certificate.names {
                if name.hasPrefix("*.") {
                    if wildcard[String(name.dropFirst(2))] == nil { wildcard[String(name.dropFirst(2))] = index }
                } else if exact[name] == nil {
                    exact[name] = index
                }
            }
        }
        exactNames = exact
        wildcardNames = wildcard

        var contexts: [OpaquePointer] = []
        for certificate in certificates {
            do {
                contexts.append(try Self.makeContext(certificate, settings: settings, alpn: alpnList))
            } catch {
                contexts.forEach { SSL_CTX_free($0) }
                alpnList.deallocate()
                throw error
            }
        }
        self.contexts = contexts
        // SNI is decided on the context the handshake starts with: the default one.
        // A handle, not a pointer (`CallbackHandles`): a callback after this is gone finds nil.
        handle = Self.callbackHandles.register(self)
        _ = portcullis_ssl_ctx_set_servername_callback(contexts[0], serverNameCallback, handle)
        TicketKeys.shared.refresh()
    }

    static let callbackHandles = CallbackHandles<TLSServerContext>()
    private var handle: UnsafeMutableRawPointer?

    deinit {
        if let handle { Self.callbackHandles.remove(handle) }
        contexts.forEach { SSL_CTX_free($0) }
        alpnList.deallocate()
    }

    /// The certificate index for a server name (lowercased): exact, then wildcard, else 0.
    public func certificateIndex(forServerName name: String) -> Int {
        if let index = exactNames[name] { return index }
        if let dot = name.firstIndex(of: "."), dot != name.startIndex,
           let index = wildcardNames[String(name[name.index(after: dot)...])] {
            return index
        }
        return 0
    }

    fileprivate func selectCertificate(_ ssl: OpaquePointer) {
        guard let raw = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name) else { return }
        // Read as every host is (`Authority`: lower case, one trailing dot dropped); a name that
        // is no host keeps the default certificate.
        guard let name = Authority.normalizedHost(String(cString: raw), allowPort: false) else { return }
        let index = certificateIndex(forServerName: name)
        if index != 0 { _ = SSL_set_SSL_CTX(ssl, contexts[index]) }
    }

    private static func makeContext(_ certificate: TLSCertificate, settings: TLSServerSettings,
                                    alpn: UnsafeMutablePointer<portcullis_alpn_list>) throws(TLSFileError) -> OpaquePointer {
        let file = certificate.certificateFile
        guard let ctx = SSL_CTX_new(TLS_server_method()) else {
            throw TLSFileError(file: file, reason: TLSError.drainQueue())
        }
        func fail(_ what: String) -> TLSFileError {
            SSL_CTX_free(ctx)
            return TLSFileError(file: file, reason: "\(what): \(TLSError.drainQueue())")
        }
        _ = portcullis_ssl_ctx_set_min_version(ctx, settings.minimumVersion.openSSL)
        _ = portcullis_ssl_ctx_set_max_version(ctx, TLS1_3_VERSION)
        _ = SSL_CTX_set_options(ctx, portcullis_ssl_default_options() | portcullis_ssl_op_server_preference())
        _ = portcullis_ssl_ctx_set_mode(ctx, Int(SSL_MODE_RELEASE_BUFFERS) | Int(SSL_MODE_ENABLE_PARTIAL_WRITE)
            | Int(SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER))
        _ = portcullis_ssl_ctx_set_read_ahead(ctx, 1)
        guard SSL_CTX_set_cipher_list(ctx, tls12Ciphers) == 1 else { throw fail("cipher list") }
        guard portcullis_ssl_ctx_set_groups(ctx, "X25519:P-256:P-384") == 1 else { throw fail("groups") }
        _ = portcullis_ssl_ctx_set_session_cache_mode(ctx, Int(SSL_SESS_CACHE_OFF))
        let sessionContext: [UInt8] = Array("portcullis".utf8)
        _ = SSL_CTX_set_session_id_context(ctx, sessionContext, UInt32(sessionContext.count))
        _ = SSL_CTX_set_timeout(ctx, Int(TicketKeys.shared.ticketLifetime))
        _ = portcullis_ssl_ctx_set_ticket_callback(ctx, ticketKeyCallback)
        // One TLS 1.3 ticket per handshake, not OpenSSL's two: a client resumes one
        // connection with one ticket (browsers and URLSession keep one per origin), and each
        // ticket is a session encoded, sealed and sent on every full handshake.
        _ = SSL_CTX_set_num_tickets(ctx, 1)
        portcullis_ssl_ctx_set_alpn_list(ctx, alpn)

        guard SSL_CTX_use_certificate(ctx, certificate.chain[0]) == 1 else { throw fail("certificate") }
        for intermediate in certificate.chain.dropFirst() {
            guard portcullis_ssl_ctx_add_chain_cert(ctx, intermediate) == 1 else { throw fail("chain certificate") }
        }
        guard SSL_CTX_use_PrivateKey(ctx, certificate.key) == 1, SSL_CTX_check_private_key(ctx) == 1 else {
            throw fail("private key")
        }
        return ctx
    }

    /// A server session for an accepted socket's descriptor (see `TLSSession`).
    func makeSSL() -> OpaquePointer? {
        guard let ssl = SSL_new(contexts[0]) else { return nil }
        SSL_set_accept_state(ssl)
        return ssl
    }
}

/// `SSL_CTX_set_tlsext_servername_callback`: switch to the certificate the name selects.
private let serverNameCallback: @convention(c) (OpaquePointer?, UnsafeMutablePointer<Int32>?, UnsafeMutableRawPointer?) -> Int32 = { ssl, _, arg in
    guard let ssl, let context = TLSServerContext.callbackHandles.target(arg) else { return portcullis_ssl_tlsext_err_ok() }
    context.selectCertificate(ssl)
    return portcullis_ssl_tlsext_err_ok()
}
