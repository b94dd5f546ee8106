import PortcullisIO
import PortcullisTLS

/// `tracing:` — W3C Trace Context in and out, one server span per request exported over
/// OTLP/HTTP (JSON, gzip) to a collector, through the gateway's one outbound HTTP client
/// (`HTTPGetClient`: http or https, `HTTPS_PROXY`/`NO_PROXY`). Off when the section is absent.
public struct TracingSettings: Sendable, Equatable {
    /// Whose `traceparent` the gateway continues (`accept_parent`).
    public enum ParentPolicy: String, Sendable, CaseIterable {
        /// Every client's: its trace id and sampling decision are kept.
        case always
        /// Only a trusted proxy's (`trusted_proxies`); anyone else starts a new trace. The
        /// default: an anonymous client cannot choose the trace id the apps log, nor force
        /// every one of its requests to be sampled.
        case trustedProxies = "trusted_proxies"
        /// Never: every request starts a new trace.
        case never
    }

    /// The collector's OTLP/HTTP traces endpoint (`endpoint`): `http://` or `https://`, a
    /// host name or an address (resolved on every export), default path `/v1/traces`.
    public var endpoint: String
    /// Request bodies gzip-compressed (`compression: gzip`, the default) or not (`none`).
    public var compression: Compression = .gzip
    public enum Compression: String, Sendable, CaseIterable { case gzip, none }
    /// Trusted roots for an `https://` collector (`ca_file`; nil: the system store).
    public var caFile: String?
    /// The certificate (PEM chain) and key the gateway presents to an `https://` collector
    /// that asks for one (mutual TLS: `client_certificate`/`client_private_key`, or
    /// `OTEL_EXPORTER_OTLP_[TRACES_]CLIENT_CERTIFICATE`/`_CLIENT_KEY`).
    public var clientCertificate: ClientCertificateFiles?
    /// Seconds one export may take, connect included (`timeout`, default 10 s).
    public var timeout: Double = 10
    /// Probability that a request starting a new trace is sampled (`sample_ratio`, 0...1).
    /// A continued trace follows its parent's sampled flag (parent-based sampling).
    public var sampleRatio: Double = 1
    public var acceptParent: ParentPolicy = .trustedProxies
    /// `service.name` of the exported resource.
    public var serviceName = "portcullis"
    /// Extra header fields of every POST to the collector (`headers`, or
    /// `OTEL_EXPORTER_OTLP_HEADERS`): an API key, a tenant.
    public var headers: [SecretHeader] = []
    /// Spans waiting for export per loop (`max_queued_spans`); past it new spans are dropped
    /// and counted, never blocking a request.
    public var maxQueuedSpans = 2048
    /// How often queued spans are sent (`export_interval`), in seconds.
    public var exportInterval: Double = 1
    /// Spans per OTLP request at most.
    public var batchSize = 512

    public init(endpoint: String) {
        self.endpoint = endpoint
    }
}
