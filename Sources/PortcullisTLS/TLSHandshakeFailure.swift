internal import COpenSSL

/// Why a client's TLS handshake with a gateway listener did not complete: a small, fixed
/// set (a metric label), from OpenSSL's reason code or what the connection saw.
public enum TLSHandshakeFailure: Int, CaseIterable, Sendable {
    /// The client sent plain HTTP to the TLS port (answered 400 in plain text).
    case plaintextHTTP
    /// No TLS version both sides accept (too old a client, `min_version` above it), or bytes
    /// that are not a TLS record.
    case protocolVersion
    /// No cipher suite, group or signature algorithm in common.
    case noSharedCipher
    /// ALPN offered and none of the client's protocols served.
    case noApplicationProtocol
    /// mTLS: the client sent no certificate, or one that did not verify.
    case clientCertificate
    /// The client refused the gateway's certificate (an alert: unknown CA, bad, expired,
    /// unknown certificate): a chain or name the clients do not trust.
    case certificateRejected
    /// The handshake deadline (`tls.handshake_timeout`) passed.
    case timeout
    /// The client closed (or reset) the connection during the handshake.
    case closed
    /// The client closed without sending a byte (a TCP health check, a port scan).
    case empty
    /// Anything else OpenSSL refused.
    case other

    /// The metric label.
    public var name: String {
        switch self {
        case .plaintextHTTP: "plaintext_http"
        case .protocolVersion: "protocol_version"
        case .noSharedCipher: "no_shared_cipher"
        case .noApplicationProtocol: "no_application_protocol"
        case .clientCertificate: "client_certificate"
        case .certificateRejected: "certificate_rejected"
        case .timeout: "timeout"
        case .closed: "closed"
        case .empty: "empty"
        case .other: "other"
        }
    }

    /// Classifies OpenSSL's reason code (`ERR_GET_REASON`; `SSL_R_*` in sslerr.h).
    public init(openSSLReason reason: Int32) {
        switch reason {
        case SSL_R_HTTP_REQUEST:
            self = .plaintextHTTP
        case SSL_R_UNSUPPORTED_PROTOCOL, SSL_R_UNSUPPORTED_SSL_VERSION, SSL_R_VERSION_TOO_LOW,
             SSL_R_TLSV1_ALERT_PROTOCOL_VERSION, SSL_R_WRONG_VERSION_NUMBER, SSL_R_BAD_RECORD_TYPE:
            self = .protocolVersion
        case SSL_R_NO_SHARED_CIPHER, SSL_R_NO_SHARED_GROUPS, SSL_R_NO_SUITABLE_SIGNATURE_ALGORITHM,
             SSL_R_SSLV3_ALERT_HANDSHAKE_FAILURE:
            self = .noSharedCipher
        case SSL_R_NO_APPLICATION_PROTOCOL, SSL_R_TLSV1_ALERT_NO_APPLICATION_PROTOCOL:
            self = .noApplicationProtocol
        case SSL_R_PEER_DID_NOT_RETURN_A_CERTIFICATE, SSL_R_CERTIFICATE_VERIFY_FAILED,
             SSL_R_TLSV13_ALERT_CERTIFICATE_REQUIRED:
            self = .clientCertificate
        case SSL_R_SSLV3_ALERT_BAD_CERTIFICATE, SSL_R_SSLV3_ALERT_CERTIFICATE_EXPIRED,
             SSL_R_SSLV3_ALERT_CERTIFICATE_UNKNOWN, SSL_R_SSLV3_ALERT_CERTIFICATE_REVOKED, SSL_R_TLSV1_ALERT_UNKNOWN_CA:
            self = .certificateRejected
        case SSL_R_UNEXPECTED_EOF_WHILE_READING:
            self = .closed
        default:
            self = .other
        }
    }
}
