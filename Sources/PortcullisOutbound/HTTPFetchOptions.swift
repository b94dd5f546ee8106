import PortcullisTLS

/// Limits for one outbound GET.
public struct HTTPFetchOptions: Sendable, Equatable {
    /// Seconds allowed for the TCP connect (per address tried).
    public var connectTimeout: Double
    /// Seconds allowed for the whole exchange, resolution and connect included.
    public var totalTimeout: Double
    /// Largest body accepted; a larger one fails with `bodyTooLarge`.
    public var maxBodyBytes: Int
    /// Sent as `User-Agent`.
    public var userAgent: String
    /// PEM file of trusted root certificates for `https://`; nil → the system store.
    public var caFile: String?
    /// A client certificate (PEM chain) and its key to present over `https://` (mutual TLS).
    public var clientCertificate: ClientCertificateFiles?
    /// `HTTPS_PROXY` / `HTTP_PROXY` / `NO_PROXY` (see `EgressProxy`): the process's by default.
    public var proxies: EgressProxy.Settings = .process

    /// Defaults: 2 s connect, 10 s total, 1 MiB body.
    public init(connectTimeout: Double = 2, totalTimeout: Double = 10, maxBodyBytes: Int = 1 << 20,
                userAgent: String = "portcullis-keys/1", caFile: String? = nil) {
        self.caFile = caFile
        self.connectTimeout = connectTimeout
        self.totalTimeout = totalTimeout
        self.maxBodyBytes = maxBodyBytes
        self.userAgent = userAgent
    }
}

extension HTTPFetchOptions {
    /// For a call the gateway makes on someone's behalf (the lookup hook, a trace export):
    /// `timeout` for the whole call, at most 2 s of it to connect, a 64 KiB answer.
    public static func call(timeout: Double, userAgent: String, caFile: String?) -> HTTPFetchOptions {
        HTTPFetchOptions(connectTimeout: min(2, timeout), totalTimeout: timeout, maxBodyBytes: 64 * 1024,
                         userAgent: userAgent, caFile: caFile)
    }
}
