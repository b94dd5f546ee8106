import PortcullisIO
import PortcullisTLS

/// `listen[]`: an address, optionally TLS (`tls:`) or a redirect to https (`redirect_https:`).
///
/// ```yaml
/// listen:
///   - address: "0.0.0.0:443"
///     tls:
///       certificates:                 # first = default (no SNI, unknown SNI)
///         - {certificate: /etc/portcullis/api.pem, private_key: /etc/portcullis/api.key}
///       min_version: "1.2"            # "1.2" | "1.3"
///       alpn: [http/1.1]
///       handshake_timeout: 10s
///   - {address: "0.0.0.0:80", redirect_https: true}
/// ```
/// Every certificate is loaded and checked here (pair, validity, chain order,
/// subjectAltName names), so `check-config` and start-up fail naming the file.
extension ConfigurationLoader {
    static func listener(_ item: ConfigNode) throws(ConfigurationError) -> GatewayConfiguration.Listen {
        var item = item
        let address = try socketAddress(try item.required("address"))
        var listen = GatewayConfiguration.Listen(address: address)
        if let node = try item.optional("tls") { listen.tls = try tlsSettings(node) }
        if let node = try item.optional("redirect_https") { listen.redirectHTTPS = try node.bool() }
        if listen.redirectHTTPS && listen.tls != nil {
            throw item.error("a TLS listener cannot also redirect to https (redirect_https belongs on the plain listener)",
                             key: "redirect_https")
        }
        try item.finish()
        return listen
    }

    static func tlsSettings(_ node: ConfigNode) throws(ConfigurationError) -> TLSServerSettings {
        var node = node
        let list = try node.required("certificates")
        var files: [TLSServerSettings.CertificateFiles] = []
        for entry in try list.sequence() {
            var entry = entry
            let certificateNode = try entry.required("certificate")
            let keyNode = try entry.required("private_key")
            let pair = TLSServerSettings.CertificateFiles(certificate: try certificateNode.string(), privateKey: try keyNode.string())
            try entry.finish()
            do {
                _ = try TLSCertificate(certificateFile: pair.certificate, keyFile: pair.privateKey)
            } catch {
                let culprit = error.file == pair.privateKey ? keyNode : certificateNode
                throw culprit.error(error.description)
            }
            files.append(pair)
        }
        if files.isEmpty { throw list.error("needs at least one certificate") }
        var settings = TLSServerSettings(certificates: files)
        if let n = try node.optional("min_version") {
            let text = try n.string()
            guard let version = TLSVersion(rawValue: text) else { throw n.error("expected \"1.2\" or \"1.3\", got '\(text)'") }
            settings.minimumVersion = version
        }
        if let n = try node.optional("alpn") {
            let protocols = try n.stringList()
            for name in protocols where name != "http/1.1" {
                throw n.error("unsupported protocol '\(name)' (supported: http/1.1)")
            }
            if protocols.isEmpty { throw n.error("needs at least one protocol") }
            settings.alpn = protocols
        }
        if let n = try node.optional("handshake_timeout") { settings.handshakeTimeout = try positiveDuration(n) }
        try node.finish()
        return settings
    }
}
