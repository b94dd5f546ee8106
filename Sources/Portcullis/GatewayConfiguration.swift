import Logging
import PortcullisHTTP
import PortcullisIO
import PortcullisProxy

/// The whole gateway configuration, validated. Built by `ConfigurationLoader`
/// from YAML; see `Config/portcullis.yaml` for every key with its default.
public struct GatewayConfiguration: Sendable {
    public struct Listen: Sendable {
        public var address: SocketAddress
    }
    public struct Admin: Sendable {
        public var address: SocketAddress
        /// Bearer token for admin endpoints other than /healthz and /readyz (nil: none required).
        public var token: String?
    }
    public enum AccessLogTarget: Sendable, Equatable {
        case off, stdout, stderr, file(String)
    }

    public var file: String
    public var listen: [Listen]
    public var admin: Admin?
    /// Event loops (serial queues); 0 in the file means one per core.
    public var workers: Int
    public var logLevel: Logger.Level
    public var accessLog: AccessLogTarget
    public var shutdownGrace: Double
    public var proxy: ProxyConfiguration
}
