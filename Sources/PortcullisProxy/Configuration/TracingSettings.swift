import PortcullisIO

/// `tracing:` — W3C Trace Context in and out, one server span per request exported over
/// OTLP/HTTP (JSON) to a collector. Off when the section is absent.
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

    /// The collector's OTLP/HTTP traces endpoint (`endpoint`), `http://host:port/path`
    /// (default path `/v1/traces`).
    public var collectorHost: String
    public var collectorPort: UInt16
    public var collectorPath: String
    /// Resolved collector address (an IP literal or `localhost`; resolved at start).
    public var collectorAddress: SocketAddress
    /// Probability that a request starting a new trace is sampled (`sample_ratio`, 0...1).
    /// A continued trace follows its parent's sampled flag (parent-based sampling).
    public var sampleRatio: Double = 1
    public var acceptParent: ParentPolicy = .trustedProxies
    /// `service.name` of the exported resource.
    public var serviceName = "portcullis"
    /// Extra header fields of every POST to the collector (`headers`, or
    /// `OTEL_EXPORTER_OTLP_HEADERS`): an API key, a tenant.
    public var headers: [Header] = []
    public struct Header: Sendable, Equatable {
        public var name: String
        public var value: String
        public init(name: String, value: String) {
            self.name = name
            self.value = value
        }
    }
    /// Spans waiting for export per loop (`max_queued_spans`); past it new spans are dropped
    /// and counted, never blocking a request.
    public var maxQueuedSpans = 2048
    /// How often queued spans are sent (`export_interval`), in seconds.
    public var exportInterval: Double = 1
    /// Spans per OTLP request at most.
    public var batchSize = 512

    public init(collectorHost: String, collectorPort: UInt16, collectorPath: String, collectorAddress: SocketAddress) {
        self.collectorHost = collectorHost
        self.collectorPort = collectorPort
        self.collectorPath = collectorPath
        self.collectorAddress = collectorAddress
    }

    /// `endpoint` as configured, for logs.
    public var endpoint: String { "http://\(collectorHost):\(collectorPort)\(collectorPath)" }
}
