import Foundation
import PortcullisIO
import PortcullisOutbound
import PortcullisProxy
import PortcullisTLS

/// `tracing` (see `TracingSettings` and the README's Tracing section).
extension ConfigurationLoader {
    static func tracing(_ tracingNode: ConfigNode?) throws(ConfigurationError) -> TracingSettings? {
        guard var node = tracingNode else { return nil }
        // The OpenTelemetry SDK variables fill what the file leaves out (the file wins):
        // OTEL_EXPORTER_OTLP_TRACES_ENDPOINT (as is) or OTEL_EXPORTER_OTLP_ENDPOINT (+ /v1/traces),
        // OTEL_EXPORTER_OTLP_[TRACES_]HEADERS, OTEL_SERVICE_NAME.
        let environment = node.environment
        func env(_ name: String) -> String? { environment[name].flatMap { $0.isEmpty ? nil : $0 } }
        let endpointNode = try node.optional("endpoint")
        let text: String
        if let endpointNode { text = try endpointNode.string() } else if let traces = env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") {
            text = traces
        } else if let base = env("OTEL_EXPORTER_OTLP_ENDPOINT") {
            text = (base.hasSuffix("/") ? String(base.dropLast()) : base) + "/v1/traces"
        } else {
            throw node.error("is required (or OTEL_EXPORTER_OTLP_ENDPOINT / OTEL_EXPORTER_OTLP_TRACES_ENDPOINT)", key: "endpoint")
        }
        let endpointNode2 = endpointNode ?? node
        // The path goes into the request line to the collector as written: no space, control
        // byte or non-ASCII byte (raw or percent-encoded) may reach it.
        guard !text.utf8.contains(where: { $0 <= 0x20 || $0 >= 0x7F }) else {
            throw endpointNode2.error("must not contain spaces, control characters or non-ASCII bytes")
        }
        guard let components = URLComponents(string: text), let scheme = components.scheme?.lowercased(),
              scheme == "http" || scheme == "https", let host = components.host, !host.isEmpty,
              components.user == nil, components.query == nil, components.fragment == nil,
              !components.path.utf8.contains(where: { $0 <= 0x20 || $0 >= 0x7F }) else {
            throw endpointNode2.error("expected http(s)://host:port/path (an OTLP/HTTP traces endpoint), got '\(text)'")
        }
        if let port = components.port, !(1...65535).contains(port) { throw endpointNode2.error("invalid port in '\(text)'") }
        // OTLP/HTTP's default port (4318) when none is written; the traces path when none is.
        var normalized = components
        if components.port == nil { normalized.port = 4318 }
        if components.path.isEmpty { normalized.path = "/v1/traces" }
        let endpoint = normalized.string ?? text
        do { _ = try FetchURL(parsing: endpoint) } catch { throw endpointNode2.error("\(error)") }
        var settings = TracingSettings(endpoint: endpoint)
        if let n = try node.optional("compression") {
            let value = try n.string()
            guard let compression = TracingSettings.Compression(rawValue: value) else {
                throw n.error("expected gzip or none, got '\(value)'")
            }
            settings.compression = compression
        } else if let value = env("OTEL_EXPORTER_OTLP_TRACES_COMPRESSION") ?? env("OTEL_EXPORTER_OTLP_COMPRESSION") {
            guard let compression = TracingSettings.Compression(rawValue: value.lowercased()) else {
                throw node.error("OTEL_EXPORTER_OTLP_COMPRESSION: expected gzip or none, got '\(value)'", key: "compression")
            }
            settings.compression = compression
        }
        if let n = try node.optional("ca_file") {
            settings.caFile = try n.caFile()
        } else if let path = env("OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE") ?? env("OTEL_EXPORTER_OTLP_CERTIFICATE") {
            do { _ = try TLSClientContext(caFile: path) } catch {
                throw node.error("OTEL_EXPORTER_OTLP_CERTIFICATE: \(error)", key: "ca_file")
            }
            settings.caFile = path
        }
        if settings.caFile != nil && scheme != "https" {
            throw node.error("a CA file is for an https:// endpoint", key: "ca_file")
        }
        // Mutual TLS to the collector: both files from the file, else both from the
        // environment (the file wins, as everywhere here); checked at start like an upstream's.
        let fromFile = try clientCertificate(&node, secure: scheme == "https", insecure: "a client certificate is for an https:// endpoint")
        let certificateEnv = env("OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE") ?? env("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE")
        let keyEnv = env("OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY") ?? env("OTEL_EXPORTER_OTLP_CLIENT_KEY")
        // Mutual TLS asked for with a plain-text collector is refused, not silently sent in clear.
        if let fromFile {
            settings.clientCertificate = fromFile
        } else if scheme != "https", certificateEnv != nil || keyEnv != nil {
            throw node.error("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE/_KEY is for an https:// endpoint", key: "client_certificate")
        } else if certificateEnv != nil || keyEnv != nil {
            guard let certificateEnv, let keyEnv else {
                throw node.error("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE and OTEL_EXPORTER_OTLP_CLIENT_KEY go together",
                                 key: certificateEnv == nil ? "client_certificate" : "client_private_key")
            }
            do { _ = try TLSCertificate.client(certificateFile: certificateEnv, keyFile: keyEnv) } catch {
                throw node.error("OTEL_EXPORTER_OTLP_CLIENT_\(error.file == keyEnv ? "KEY" : "CERTIFICATE"): \(error)",
                                 key: error.file == keyEnv ? "client_private_key" : "client_certificate")
            }
            settings.clientCertificate = ClientCertificateFiles(certificate: certificateEnv, key: keyEnv)
        }
        if let n = try node.optional("timeout") {
            let seconds = try n.duration()
            guard seconds >= 0.1, seconds <= 60 else { throw n.error("expected 100ms to 60s") }
            settings.timeout = seconds
        } else if let value = env("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT") ?? env("OTEL_EXPORTER_OTLP_TIMEOUT") {
            // Milliseconds, as the OpenTelemetry specification writes it.
            guard let ms = Double(value), ms >= 100, ms <= 60_000 else {
                throw node.error("OTEL_EXPORTER_OTLP_TIMEOUT: expected milliseconds from 100 to 60000, got '\(value)'", key: "timeout")
            }
            settings.timeout = ms / 1000
        }
        if let n = try node.optional("sample_ratio") {
            guard let ratio = Double(try n.string()), ratio >= 0, ratio <= 1 else {
                throw n.error("expected a number from 0 to 1 (0.01 samples 1 % of new traces)")
            }
            settings.sampleRatio = ratio
        }
        if let n = try node.optional("accept_parent") {
            let value = try n.string()
            guard let policy = TracingSettings.ParentPolicy(rawValue: value) else {
                throw n.error("expected always, trusted_proxies or never, got '\(value)'")
            }
            settings.acceptParent = policy
        }
        if let n = try node.optional("service_name") {
            let name = try n.string()
            guard !name.isEmpty else { throw n.error("must not be empty") }
            settings.serviceName = name
        } else if let name = env("OTEL_SERVICE_NAME") {
            settings.serviceName = name
        }
        if let n = try node.optional("headers") {
            for (name, value) in try n.entries() {
                guard isHeaderName(name), !["host", "content-length", "content-type", "connection", "transfer-encoding"].contains(name.lowercased()) else {
                    throw value.error("'\(name)' is not a header the gateway lets you set")
                }
                settings.headers.append(.init(name: name, value: try value.secret(bare: true)))
            }
        } else if let list = env("OTEL_EXPORTER_OTLP_TRACES_HEADERS") ?? env("OTEL_EXPORTER_OTLP_HEADERS") {
            // "key1=value1,key2=value2", values percent-encoded (the OTLP exporter specification).
            for pair in list.split(separator: ",") {
                let parts = pair.split(separator: "=", maxSplits: 1)
                let name = parts.first.map { $0.trimmingCharacters(in: .whitespaces) } ?? ""
                guard parts.count == 2, isHeaderName(name) else {
                    throw node.error("OTEL_EXPORTER_OTLP_HEADERS: expected key=value pairs separated by commas", key: "headers")
                }
                let raw = parts[1].trimmingCharacters(in: .whitespaces)
                let value = raw.removingPercentEncoding ?? raw
                guard !value.utf8.contains(where: { $0 < 0x20 || $0 == 0x7F }) else {
                    throw node.error("OTEL_EXPORTER_OTLP_HEADERS: a value holds a control character", key: "headers")
                }
                settings.headers.append(.init(name: name, value: value))
            }
        }
        if let n = try node.optional("max_queued_spans") { settings.maxQueuedSpans = try n.int(min: 1, max: 1_000_000) }
        if let n = try node.optional("export_interval") {
            let seconds = try n.duration()
            guard seconds >= 0.05, seconds <= 60 else { throw n.error("expected 50ms to 60s") }
            settings.exportInterval = seconds
        }
        if let n = try node.optional("batch_size") { settings.batchSize = try n.int(min: 1, max: 100_000) }
        try node.finish()
        return settings
    }
}
