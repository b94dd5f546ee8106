internal import COpenSSL
import PortcullisCore
#if canImport(Glibc)
import Glibc
#endif

/// A certificate chain and its private key, loaded from PEM files and checked:
/// the key matches the leaf, every certificate is within its validity period, and
/// each certificate is issued by the one after it (leaf first, as servers send them).
/// Owns its OpenSSL objects (`X509` and `EVP_PKEY` references), freed in `deinit`.
///
/// Threading: immutable after `init`; OpenSSL's reference counting makes the
/// pointers safe to share with contexts on any thread.
public final class TLSCertificate: @unchecked Sendable {
    // @unchecked Sendable: immutable after init (see type comment).
    let chain: [OpaquePointer]  // X509*, leaf first
    let key: OpaquePointer  // EVP_PKEY*
    public let certificateFile: String
    public let keyFile: String
    /// The subjectAltName DNS names (lowercased), exact and `*.` wildcards: what SNI selects by.
    public let names: [String]
    /// Seconds since the epoch when the leaf expires.
    public let notAfter: Double
    /// "RSA-2048", "EC-P-256", … for logs and check-config.
    public let keyDescription: String

    /// A certificate the gateway presents as a client (mutual TLS to an upstream, the lookup
    /// hook, key fetches): checked as a server's, but it needs no DNS names (nothing selects
    /// it by SNI; a client certificate often has a CN only).
    public static func client(certificateFile: String, keyFile: String) throws(TLSFileError) -> TLSCertificate {
        try TLSCertificate(certificateFile: certificateFile, keyFile: keyFile, requireNames: false)
    }

    /// Loads and checks the pair; `now` decides expiry (seconds since the epoch).
    /// `requireNames`: a server certificate needs subjectAltName DNS names (SNI selects
    /// by them); a client certificate does not (use `client`).
    public init(certificateFile: String, keyFile: String, now: Double? = nil, requireNames: Bool = true) throws(TLSFileError) {
        self.certificateFile = certificateFile
        self.keyFile = keyFile
        ERR_clear_error()
        let chain = try Self.readCertificates(certificateFile)
        var keyOwned: OpaquePointer?
        do {
            keyOwned = try Self.readKey(keyFile)
        } catch {
            chain.forEach { X509_free($0) }
            throw error
        }
        self.chain = chain
        self.key = keyOwned!
        let leaf = chain[0]
        names = Self.dnsNames(leaf)
        notAfter = Self.asn1Time(X509_get0_notAfter(leaf))
        keyDescription = Self.describe(key)

        let moment = now ?? WallClock.nowSeconds()
        for (index, certificate) in chain.enumerated() {
            let what = index == 0 ? "the certificate" : "chain certificate \(index)"
            let expires = Self.asn1Time(X509_get0_notAfter(certificate))
            if expires <= moment {
                throw TLSFileError(file: certificateFile, reason: "\(what) expired at \(Self.format(expires))")
            }
            let starts = Self.asn1Time(X509_get0_notBefore(certificate))
            if starts > moment + 300 {
                throw TLSFileError(file: certificateFile, reason: "\(what) is not valid before \(Self.format(starts))")
            }
            if index + 1 < chain.count, X509_check_issued(chain[index + 1], certificate) != X509_V_OK {
                throw TLSFileError(file: certificateFile,
                                   reason: "chain out of order: certificate \(index + 1) did not issue \(index == 0 ? "the leaf" : "certificate \(index)") (list the leaf first, then each issuer)")
            }
        }
        guard X509_check_private_key(leaf, key) == 1 else {
            TLSError.discardQueue()
            throw TLSFileError(file: keyFile, reason: "the private key does not match the certificate in \(certificateFile)")
        }
        if names.isEmpty && requireNames {
            throw TLSFileError(file: certificateFile, reason: "the certificate has no DNS names in subjectAltName (SNI selects certificates by them)")
        }
    }

    deinit {
        chain.forEach { X509_free($0) }
        EVP_PKEY_free(key)
    }

    /// True when `serverName` (lowercased) is one of the names: exactly, or one
    /// label under a `*.` wildcard (RFC 6125 §6.4.3: the wildcard covers one label).
    public func matches(_ serverName: String) -> Bool {
        names.contains { Self.name($0, matches: serverName) }
    }

    static func name(_ pattern: String, matches host: String) -> Bool {
        if pattern == host { return true }
        guard pattern.hasPrefix("*."), let dot = host.firstIndex(of: ".") else { return false }
        return host[dot...] == pattern.dropFirst(1) && dot != host.startIndex
    }

    // MARK: Loading

    private static func readCertificates(_ path: String) throws(TLSFileError) -> [OpaquePointer] {
        guard let bio = BIO_new_file(path, "r") else {
            TLSError.discardQueue()
            throw TLSFileError(file: path, reason: "cannot read the file (\(String(cString: strerror(errno))))")
        }
        defer { BIO_free(bio) }
        var chain: [OpaquePointer] = []
        while let certificate = PEM_read_bio_X509(bio, nil, nil, nil) { chain.append(certificate) }
        // The loop ends with "no start line" at the end of the file; anything else is a broken file.
        let last = ERR_peek_last_error()
        if chain.isEmpty || (last != 0 && ERR_GET_REASON(last) != PEM_R_NO_START_LINE) {
            let reason = TLSError.drainQueue()
            chain.forEach { X509_free($0) }
            throw TLSFileError(file: path, reason: chain.isEmpty && last != 0 && ERR_GET_REASON(last) == PEM_R_NO_START_LINE
                ? "no PEM certificate in the file" : "not a valid PEM certificate chain (\(reason))")
        }
        ERR_clear_error()
        return chain
    }

    private static func readKey(_ path: String) throws(TLSFileError) -> OpaquePointer {
        guard let bio = BIO_new_file(path, "r") else {
            TLSError.discardQueue()
            throw TLSFileError(file: path, reason: "cannot read the file (\(String(cString: strerror(errno))))")
        }
        defer { BIO_free(bio) }
        guard let key = PEM_read_bio_PrivateKey(bio, nil, nil, nil) else {
            throw TLSFileError(file: path, reason: "not a valid PEM private key (\(TLSError.drainQueue()))")
        }
        return key
    }

    private static func dnsNames(_ x509: OpaquePointer) -> [String] {
        var names: [String] = []
        var buffer = [UInt8](repeating: 0, count: 256)
        var length: Int32 = 0
        let count = portcullis_x509_dns_name(x509, -1, &buffer, Int32(buffer.count), &length)
        for i in 0..<Int(count) {
            length = 0
            _ = portcullis_x509_dns_name(x509, Int32(i), &buffer, Int32(buffer.count), &length)
            names.append(String(decoding: buffer[0..<Int(length)], as: UTF8.self).lowercased())
        }
        return names
    }

    private static func asn1Time(_ asn1: UnsafePointer<ASN1_TIME>?) -> Double {
        var tm = Glibc.tm()
        guard let asn1, ASN1_TIME_to_tm(asn1, &tm) == 1 else { return 0 }
        return Double(timegm(&tm))
    }

    /// ISO 8601 UTC, for messages.
    public static func format(_ seconds: Double) -> String {
        var t = time_t(seconds)
        var tm = Glibc.tm()
        gmtime_r(&t, &tm)
        var buffer = [CChar](repeating: 0, count: 32)
        strftime(&buffer, buffer.count, "%Y-%m-%dT%H:%M:%SZ", &tm)
        return String(cString: buffer)
    }

    private static func describe(_ key: OpaquePointer) -> String {
        let bits = EVP_PKEY_get_bits(key)
        switch EVP_PKEY_get_base_id(key) {
        case EVP_PKEY_RSA: return "RSA-\(bits)"
        case EVP_PKEY_EC: return "EC-\(bits)"
        case EVP_PKEY_ED25519: return "Ed25519"
        default: return "key-\(bits)"
        }
    }
}

/// A client certificate to present (mutual TLS, to an upstream, a lookup hook or a trace
/// collector): the file of its PEM chain and the file of its private key.
public struct ClientCertificateFiles: Equatable, Sendable {
    public var certificate: String
    public var key: String

    public init(certificate: String, key: String) {
        self.certificate = certificate
        self.key = key
    }
}
