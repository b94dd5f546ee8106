import Foundation
import PortcullisTestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// A local OTLP/HTTP receiver (Fixtures/otlp_receiver.py): what the gateway exports.
final class OTLPReceiver {
    let port: UInt16
    let output: String
    let process = Process()

    let secure: Bool

    /// - Parameters:
    ///   - tls: a certificate and key: the receiver serves https.
    ///   - clientCA: with `tls`, only clients with a certificate from this CA are served.
    init(tls: TestPKI.Leaf? = nil, clientCA: String? = nil) throws {
        port = Loopback.freePort()
        output = RedisProcess.makeDirectory() + "/spans.jsonl"
        secure = tls != nil
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", E2E.packageRoot.appendingPathComponent("Tests/PortcullisEndToEndTests/Fixtures/otlp_receiver.py").path,
                             "\(port)", output] + (tls.map { [$0.certificate, $0.key] } ?? []) + (clientCA.map { [$0] } ?? [])
        process.standardOutput = FileHandle.nullDevice
        try process.run()
        guard Loopback.waitForPort(port) else { throw TestFailure("the OTLP receiver did not start") }
    }

    var endpoint: String { "\(secure ? "https" : "http")://127.0.0.1:\(port)/v1/traces" }

    /// The header fields of every request taken, one line each.
    var headers: String { (try? String(contentsOfFile: output + ".headers", encoding: .utf8)) ?? "" }

    /// Every span received so far (flattened out of the OTLP requests).
    func spans() -> [[String: Any]] {
        let text = (try? String(contentsOfFile: output, encoding: .utf8)) ?? ""
        var spans: [[String: Any]] = []
        for line in text.split(separator: "\n") {
            guard let request = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any] else { continue }
            for resource in request["resourceSpans"] as? [[String: Any]] ?? [] {
                for scope in resource["scopeSpans"] as? [[String: Any]] ?? [] {
                    spans += scope["spans"] as? [[String: Any]] ?? []
                }
            }
        }
        return spans
    }

    /// The resource's `service.name` of the first request.
    func serviceName() -> String? {
        let text = (try? String(contentsOfFile: output, encoding: .utf8)) ?? ""
        guard let line = text.split(separator: "\n").first,
              let request = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any],
              let resource = (request["resourceSpans"] as? [[String: Any]])?.first?["resource"] as? [String: Any],
              let attributes = resource["attributes"] as? [[String: Any]] else { return nil }
        return attributes.first { $0["key"] as? String == "service.name" }.flatMap { ($0["value"] as? [String: Any])?["stringValue"] as? String }
    }

    /// Answers `status` from now on (200: taken again).
    func answer(_ status: Int) throws {
        try "\(status)".write(toFile: output + ".status", atomically: true, encoding: .utf8)
    }

    deinit { E2E.stop(process, signal: SIGKILL) }
}

/// Traces (#26.3), through the real binary: W3C `traceparent`/`tracestate` in and out, the
/// request span exported over OTLP/HTTP with its parent, attributes and the trace id the
/// upstream received, the `accept_parent` policies, sampling, and a collector that fails.
@Suite(.serialized) struct TracingEndToEndTests {
    static let token = "tracing-admin-token-0123456789abcdef"
    static let clientTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
    static let clientSpan = "00f067aa0ba902b7"

    static func config(_ upstream: EchoUpstream, _ receiver: OTLPReceiver, tracing: String) -> String {
        """
        tracing: {endpoint: "\(receiver.endpoint)", export_interval: 100ms\(tracing.isEmpty ? "" : ", \(tracing)")}
        providers:
          - {name: app, type: hs256, secret: "tracing-test-secret-0123456789abcdef0123"}
        upstreams:
          app: {url: "http://127.0.0.1:\(upstream.port)"}
        routes:
          - {path: /secure, upstream: app, auth: required}
          - {path: /, upstream: app, auth: none}
        """
    }

    /// The `traceparent` the upstream received: (trace id, parent span id, flags).
    static func upstreamParent(_ body: String) -> (trace: String, span: String, flags: String)? {
        guard let echo = try? Echo(body) else { return nil }
        let values = echo.values("traceparent")
        guard values.count == 1 else { return nil }
        let parts = values[0].split(separator: "-").map(String.init)
        guard parts.count == 4, parts[0] == "00" else { return nil }
        return (parts[1], parts[2], parts[3])
    }

    static func attribute(_ span: [String: Any], _ key: String) -> String? {
        guard let attributes = span["attributes"] as? [[String: Any]],
              let value = attributes.first(where: { $0["key"] as? String == key })?["value"] as? [String: Any] else { return nil }
        return (value["stringValue"] as? String) ?? (value["intValue"] as? String)
    }

    static func span(_ receiver: OTLPReceiver, id: String) -> [String: Any]? {
        var found: [String: Any]?
        _ = waitUntil(5) {
            found = receiver.spans().first { $0["spanId"] as? String == id }
            return found != nil
        }
        return found
    }

    @Test func aContinuedTraceReachesTheUpstreamAndTheCollectorWithTheGatewaysSpanBetween() throws {
        let upstream = try EchoUpstream()
        let receiver = try OTLPReceiver()
        let g = try GatewayProcess(Self.config(upstream, receiver, tracing: "accept_parent: always, service_name: edge-test"),
                                   adminToken: Self.token)
        let parent = "00-\(Self.clientTrace)-\(Self.clientSpan)-01"
        let (status, body) = E2E.curl(["-H", "traceparent: \(parent)", "-H", "tracestate: vendor=abc,other=1",
                                        "\(g.url)/open/page?q=secret"])
        #expect(status == 200)
        let seen = try #require(Self.upstreamParent(body), "\(body)")
        #expect(seen.trace == Self.clientTrace, "the client's trace goes on")
        #expect(seen.span != Self.clientSpan && seen.span.count == 16, "the upstream's parent is the gateway's span")
        #expect(seen.flags == "01")
        let state = try Echo(body).values("tracestate")
        #expect(state == ["vendor=abc, other=1"] || state == ["vendor=abc,other=1"], "tracestate is passed on: \(state)")

        let span = try #require(Self.span(receiver, id: seen.span), "exported: \(receiver.spans())")
        #expect(span["traceId"] as? String == Self.clientTrace)
        #expect(span["parentSpanId"] as? String == Self.clientSpan)
        #expect(span["kind"] as? Int == 2, "a server span")
        #expect(Self.attribute(span, "http.route") == "/")
        #expect(Self.attribute(span, "url.path") == "/open/page", "the path, never the query")
        #expect(Self.attribute(span, "http.request.method") == "GET")
        #expect(Self.attribute(span, "http.response.status_code") == "200")
        #expect(Self.attribute(span, "portcullis.upstream") == "app")
        #expect(Self.attribute(span, "portcullis.auth.decision") == "anonymous")
        let start = UInt64(span["startTimeUnixNano"] as? String ?? "") ?? 0
        let end = UInt64(span["endTimeUnixNano"] as? String ?? "") ?? 0
        #expect(start > 1_700_000_000_000_000_000 && end >= start, "\(start) \(end)")
        #expect(receiver.serviceName() == "edge-test")
        #expect(!receiver.spans().description.contains("secret"), "no query string in spans")

        // The access log line carries the trace id.
        #expect(waitUntil(5) { g.log.contains("\"trace_id\":\"\(Self.clientTrace)\"") }, "\(g.log.suffix(600))")

        // Auth decisions: verified with the provider, refused with the reason.
        let minted = try g.mint(["--provider", "app", "--sub", "u1"])
        let verified = E2E.curl(["-H", minted, "-H", "traceparent: \(parent)", "\(g.url)/secure/x"])
        #expect(verified.status == 200)
        let verifiedSpan = try #require(Self.upstreamParent(verified.body).flatMap { Self.span(receiver, id: $0.span) })
        #expect(Self.attribute(verifiedSpan, "portcullis.auth.decision") == "verified")
        #expect(Self.attribute(verifiedSpan, "portcullis.auth.provider") == "app")
        #expect(Self.attribute(verifiedSpan, "http.route") == "/secure")
        let refused = E2E.curl(["-H", "authorization: Bearer not-a-token", "-H", "traceparent: 00-\(Self.clientTrace)-1111111111111111-01",
                                "\(g.url)/secure/x"])
        #expect(refused.status == 401)
        #expect(waitUntil(5) {
            receiver.spans().contains { $0["parentSpanId"] as? String == "1111111111111111"
                && Self.attribute($0, "portcullis.auth.decision") == "refused"
                && (Self.attribute($0, "portcullis.auth.reason") ?? "").contains("invalid") }
        }, "\(receiver.spans().suffix(1))")
        #expect(!receiver.spans().description.contains("not-a-token"), "no credential in spans")

        let metrics = E2E.curl(["-H", "authorization: Bearer \(Self.token)", "http://127.0.0.1:\(g.adminPort)/metrics"]).body
        #expect(metrics.contains("portcullis_trace_spans_total{result=\"exported\"}"), "\(metrics)")
    }

    /// Child spans (#26.3): a request that waits for signing keys (an unknown kid, refetched)
    /// has a `signing keys fetch` child with the decision; a logout's revocation is a
    /// `revocation store write` child (client kind) acknowledged by the store. Both are
    /// children of the request's server span, in its trace.
    @Test func keyFetchWaitsAndStoreWritesAreChildSpans() throws {
        let upstream = try EchoUpstream()
        let receiver = try OTLPReceiver()
        let host = try KeyHost(kids: ["k1", "k2"])
        try host.publish(["k1"])
        let g = try GatewayProcess("""
        tracing: {endpoint: "\(receiver.endpoint)", export_interval: 100ms}
        keys: {min_refetch_interval: 1s}
        providers:
          - {name: corp, type: oidc, issuer: "https://id.example.test", audiences: ["api"], jwks_url: "http://127.0.0.1:\(host.port)/jwks"}
        upstreams:
          app: {url: "http://127.0.0.1:\(upstream.port)"}
        routes:
          - {path: /logout, upstream: app, auth: required, revoke_on_success: true}
          - {path: /, upstream: app, auth: required}
        """)
        #expect(waitUntil(10) { E2E.curl(["http://127.0.0.1:\(g.adminPort)/readyz"]).status == 200 })
        sleep(1)  // past min_refetch_interval: an unknown kid refetches at once
        try host.publish(["k1", "k2"])
        let token = try KeysAndRevocationEndToEndTests.mint(g, key: host.keyPath("k2"), kid: "k2")
        let waited = E2E.curl(["-H", token, "-H", "traceparent: 00-\(Self.clientTrace)-2222222222222222-01", "\(g.url)/a"])
        #expect(waited.status == 200, "\(waited)")
        let server = try #require(Self.upstreamParent(waited.body).flatMap { Self.span(receiver, id: $0.span) })
        let serverID = try #require(server["spanId"] as? String)
        var keys: [String: Any]?
        #expect(waitUntil(5) {
            keys = receiver.spans().first { $0["parentSpanId"] as? String == serverID && $0["name"] as? String == "signing keys fetch" }
            return keys != nil
        }, "\(receiver.spans())")
        if let keys {
            #expect(keys["traceId"] as? String == server["traceId"] as? String, "the request's trace")
            #expect(keys["kind"] as? Int == 1)
            #expect(Self.attribute(keys, "portcullis.auth.decision") == "verified")
            let start = UInt64(keys["startTimeUnixNano"] as? String ?? "") ?? 0
            let end = UInt64(keys["endTimeUnixNano"] as? String ?? "") ?? 0
            let serverStart = UInt64(server["startTimeUnixNano"] as? String ?? "") ?? 0
            #expect(start >= serverStart && end >= start, "inside the request: \(serverStart) \(start) \(end)")
        }
        // A verified request that did not wait has no such child.
        let quick = E2E.curl(["-H", token, "-H", "traceparent: 00-\(Self.clientTrace)-3333333333333333-01", "\(g.url)/b"])
        let quickID = try #require(Self.upstreamParent(quick.body)?.span)
        _ = Self.span(receiver, id: quickID)
        #expect(!receiver.spans().contains { $0["parentSpanId"] as? String == quickID })

        // The logout's revocation: a client span under the logout request.
        let logout = E2E.curl(["-X", "POST", "-H", token, "-H", "traceparent: 00-\(Self.clientTrace)-4444444444444444-01", "\(g.url)/logout"])
        #expect(logout.status == 200)
        let logoutID = try #require(Self.upstreamParent(logout.body)?.span)
        var store: [String: Any]?
        #expect(waitUntil(5) {
            store = receiver.spans().first { $0["parentSpanId"] as? String == logoutID && $0["name"] as? String == "revocation store write" }
            return store != nil
        }, "\(receiver.spans())")
        if let store {
            #expect(store["kind"] as? Int == 3)
            #expect(Self.attribute(store, "portcullis.store.result") == "acknowledged")
            #expect(Self.attribute(store, "portcullis.auth.provider") == "corp")
        }
        #expect(E2E.curl(["-H", token, "\(g.url)/a"]).status == 401, "the logout revoked the token")
        #expect(!receiver.spans().description.contains(String(token.dropFirst("Authorization: Bearer ".count))), "no credential in spans")
    }

    @Test func parentPoliciesSamplingAndMalformedParents() throws {
        let upstream = try EchoUpstream()
        let receiver = try OTLPReceiver()
        // The default: trusted_proxies, with none trusted: a client's traceparent is not continued.
        let g = try GatewayProcess(Self.config(upstream, receiver, tracing: ""), adminToken: Self.token)
        let parent = "00-\(Self.clientTrace)-\(Self.clientSpan)-01"
        let fresh = try #require(Self.upstreamParent(E2E.curl(["-H", "traceparent: \(parent)", "-H", "tracestate: a=b", "\(g.url)/a"]).body))
        #expect(fresh.trace != Self.clientTrace && fresh.trace.count == 32)
        #expect(fresh.flags == "01", "sample_ratio defaults to 1")
        let freshSpan = try #require(Self.span(receiver, id: fresh.span))
        #expect(freshSpan["parentSpanId"] == nil, "a new trace has no parent")
        #expect(freshSpan["traceId"] as? String == fresh.trace)

        // Malformed or repeated traceparents start a new trace, also under `always`.
        let original = try String(contentsOfFile: g.configPath, encoding: .utf8)
        try original.replacingOccurrences(of: "export_interval: 100ms}", with: "export_interval: 100ms, accept_parent: always}")
            .write(toFile: g.configPath, atomically: true, encoding: .utf8)
        #expect(E2E.curl(["-X", "POST", "-H", "authorization: Bearer \(Self.token)", "http://127.0.0.1:\(g.adminPort)/reload"]).status == 200)
        for headers in [["traceparent: 00-\(Self.clientTrace)-\(Self.clientSpan)"],
                        ["traceparent: 00-00000000000000000000000000000000-\(Self.clientSpan)-01"],
                        ["traceparent: zz-\(Self.clientTrace)-\(Self.clientSpan)-01"],
                        ["traceparent: \(parent)", "traceparent: \(parent)"]] {
            let seen = try #require(Self.upstreamParent(E2E.curl(headers.flatMap { ["-H", $0] } + ["\(g.url)/m"]).body))
            #expect(seen.trace != Self.clientTrace && seen.trace != String(repeating: "0", count: 32), "\(headers)")
        }
        // An unsampled parent is followed: propagated with flags 00, no span exported.
        let unsampled = try #require(Self.upstreamParent(E2E.curl(["-H", "traceparent: 00-\(Self.clientTrace)-2222222222222222-00", "\(g.url)/u"]).body))
        #expect(unsampled.trace == Self.clientTrace && unsampled.flags == "00")

        // sample_ratio 0: new traces are propagated unsampled and never exported.
        try original.replacingOccurrences(of: "export_interval: 100ms}", with: "export_interval: 100ms, sample_ratio: 0, accept_parent: never}")
            .write(toFile: g.configPath, atomically: true, encoding: .utf8)
        #expect(E2E.curl(["-X", "POST", "-H", "authorization: Bearer \(Self.token)", "http://127.0.0.1:\(g.adminPort)/reload"]).status == 200)
        var unsampledSpans: [String] = [unsampled.span]
        for _ in 0..<20 {
            let seen = try #require(Self.upstreamParent(E2E.curl(["-H", "traceparent: \(parent)", "\(g.url)/z"]).body))
            #expect(seen.trace != Self.clientTrace, "never: the client's trace is not continued")
            #expect(seen.flags == "00")
            unsampledSpans.append(seen.span)
        }
        usleep(500_000)
        let exported = Set(receiver.spans().compactMap { $0["spanId"] as? String })
        #expect(exported.isDisjoint(with: unsampledSpans), "unsampled requests are not exported")

        // Tracing off: the client's trace context passes through untouched, as any header.
        try original.replacingOccurrences(of: #"tracing: {endpoint: "\#(receiver.endpoint)", export_interval: 100ms}"#, with: "")
            .write(toFile: g.configPath, atomically: true, encoding: .utf8)
        #expect(E2E.curl(["-X", "POST", "-H", "authorization: Bearer \(Self.token)", "http://127.0.0.1:\(g.adminPort)/reload"]).status == 200)
        let off = E2E.curl(["-H", "traceparent: \(parent)", "\(g.url)/off"]).body
        #expect(try Echo(off).values("traceparent") == [parent])
    }

    @Test func aFailingCollectorCostsRequestsNothingAndIsLoggedOnce() throws {
        let upstream = try EchoUpstream()
        let receiver = try OTLPReceiver()
        try receiver.answer(503)
        let g = try GatewayProcess(Self.config(upstream, receiver, tracing: ""), adminToken: Self.token)
        for i in 0..<30 { #expect(E2E.curl(["\(g.url)/r\(i)"]).status == 200) }
        #expect(waitUntil(5) { g.log.contains("trace export failing") }, "\(g.log.suffix(800))")
        sleep(1)
        #expect(g.log.components(separatedBy: "trace export failing").count == 2, "logged once")
        let metrics = { E2E.curl(["-H", "authorization: Bearer \(Self.token)", "http://127.0.0.1:\(g.adminPort)/metrics"]).body }
        #expect(metrics().contains("portcullis_trace_spans_total{result=\"failed\"}"))
        try receiver.answer(200)
        #expect(E2E.curl(["\(g.url)/again"]).status == 200)
        #expect(waitUntil(5) { g.log.contains("trace export works again") })
        #expect(waitUntil(5) { receiver.spans().contains { Self.attribute($0, "url.path") == "/again" } })
        // A collector that is gone (nothing listens): requests still answered at once.
        receiver.process.terminate()
        for i in 0..<10 { #expect(E2E.curl(["\(g.url)/gone\(i)"]).status == 200) }
    }

    /// Tracing as collectors expect (#35.6): the OpenTelemetry SDK variables fill what the file
    /// leaves out (endpoint, headers, service name), spans carry the HTTP semantic-convention
    /// attributes and are named `GET /route` (`GET` when no route matched), and spans the
    /// collector refused are kept and sent again once it answers.
    @Test func otelVariablesSemanticConventionsAndRetry() throws {
        let upstream = try EchoUpstream()
        let receiver = try OTLPReceiver()
        try receiver.answer(503)
        let g = try GatewayProcess("""
        tracing: {export_interval: 100ms}
        providers:
          - {name: app, type: hs256, secret: "tracing-test-secret-0123456789abcdef0123"}
        upstreams:
          app: {url: "http://127.0.0.1:\(upstream.port)"}
        routes:
          - {path: /api, upstream: app, auth: none}
        """, adminToken: Self.token, environment: [
            "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:\(receiver.port)",
            "OTEL_EXPORTER_OTLP_HEADERS": "x-api-key=k%20123,x-tenant=edge",
            "OTEL_SERVICE_NAME": "edge-from-env",
        ])
        #expect(E2E.curl(["-A", "SemConv/1.0", "\(g.url)/api/visits"]).status == 200)
        #expect(E2E.curl(["\(g.url)/nowhere"]).status == 404)
        #expect(waitUntil(5) { g.log.contains("trace export failing") }, "\(g.log.suffix(600))")
        try receiver.answer(200)
        // Kept while the collector refused them, sent once it answers (backoff 1 s, 2 s, …).
        #expect(waitUntil(15) { receiver.spans().count >= 2 }, "\(g.log.suffix(600))")
        let spans = receiver.spans()
        let api = try #require(spans.first { Self.attribute($0, "url.path") == "/api/visits" })
        let lost = try #require(spans.first { Self.attribute($0, "url.path") == "/nowhere" })
        #expect(api["name"] as? String == "GET /api" && lost["name"] as? String == "GET", "\(api["name"] ?? "") \(lost["name"] ?? "")")
        for (key, value) in [("url.scheme", "http"), ("network.protocol.name", "http"), ("network.protocol.version", "1.1"),
                             ("server.address", "127.0.0.1"), ("client.address", "127.0.0.1"), ("user_agent.original", "SemConv/1.0"),
                             ("http.request.method", "GET"), ("http.route", "/api")] {
            #expect(Self.attribute(api, key) == value, "\(key): \(Self.attribute(api, key) ?? "-")")
        }
        #expect(receiver.serviceName() == "edge-from-env")
        let headers = (try? String(contentsOfFile: receiver.output + ".headers", encoding: .utf8)) ?? ""
        #expect(headers.contains("('x-api-key', 'k 123')") && headers.contains("('x-tenant', 'edge')"), "\(headers)")
    }

    /// OTLP over https (#35.6), through the gateway's one outbound client: the collector's
    /// certificate checked against `ca_file` (a collector it does not vouch for gets nothing),
    /// bodies gzip-compressed by default (`Content-Encoding: gzip`, decoded by the receiver),
    /// `compression: none` sends them plain; a batch the collector refuses (400) is dropped
    /// and counted, never sent again; a host name is resolved at export.
    @Test func httpsCollectorGzipAndRefusedBatches() throws {
        let pki = try TestPKI()
        let leaf = try pki.leaf(["localhost"])
        let upstream = try EchoUpstream()
        let receiver = try OTLPReceiver(tls: leaf)
        let endpoint = "https://localhost:\(receiver.port)/v1/traces"
        let g = try GatewayProcess(Self.config(upstream, receiver, tracing: "ca_file: \"\(pki.caCertificate)\"")
            .replacingOccurrences(of: receiver.endpoint, with: endpoint), adminToken: Self.token)
        #expect(E2E.curl(["\(g.url)/over-https"]).status == 200)
        #expect(waitUntil(10) { receiver.spans().contains { Self.attribute($0, "url.path") == "/over-https" } }, "\(g.log.suffix(600))")
        #expect(receiver.headers.contains("('content-encoding', 'gzip')"), "\(receiver.headers)")
        #expect(!g.log.contains("trace export failing"))

        // A collector whose certificate the gateway's trust store does not vouch for.
        let stranger = try TestPKI()
        let other = try OTLPReceiver(tls: try stranger.leaf(["localhost"]))
        let h = try GatewayProcess(Self.config(upstream, other, tracing: "ca_file: \"\(pki.caCertificate)\", compression: none")
            .replacingOccurrences(of: other.endpoint, with: "https://localhost:\(other.port)/v1/traces"), adminToken: Self.token)
        #expect(E2E.curl(["\(h.url)/untrusted"]).status == 200)
        #expect(waitUntil(10) { h.log.contains("trace export failing") }, "\(h.log.suffix(600))")
        #expect(h.log.contains("certificate"), "the reason names the certificate: \(h.log.suffix(600))")
        #expect(other.spans().isEmpty)

        // Plain http with compression: none; then a collector that refuses batches outright.
        let plain = try OTLPReceiver()
        let p = try GatewayProcess(Self.config(upstream, plain, tracing: "compression: none"), adminToken: Self.token)
        #expect(E2E.curl(["\(p.url)/plain"]).status == 200)
        #expect(waitUntil(10) { plain.spans().contains { Self.attribute($0, "url.path") == "/plain" } })
        #expect(!plain.headers.contains("content-encoding"), "\(plain.headers)")
        try plain.answer(400)
        #expect(E2E.curl(["\(p.url)/refused"]).status == 200)
        #expect(waitUntil(10) { p.log.contains("the collector refused a batch") }, "\(p.log.suffix(600))")
        let metrics = { E2E.curl(["-H", "authorization: Bearer \(Self.token)", "http://127.0.0.1:\(p.adminPort)/metrics"]).body }
        #expect(waitUntil(5) { MetricsEndToEndTests.parse(metrics())["portcullis_trace_spans_total{result=\"failed\"}"] == 1 })
        try plain.answer(200)
        #expect(E2E.curl(["\(p.url)/after"]).status == 200)
        #expect(waitUntil(10) { plain.spans().contains { Self.attribute($0, "url.path") == "/after" } })
        #expect(!plain.spans().contains { Self.attribute($0, "url.path") == "/refused" }, "a refused batch is never resent")
    }

    /// A collector that demands a client certificate (mutual TLS): the gateway presents the
    /// configured one (`client_certificate`/`client_private_key`, or the OpenTelemetry
    /// variables `OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE`/`_KEY`) and its spans arrive;
    /// without one the handshake fails, the export failure is logged and nothing arrives.
    @Test func aCollectorThatDemandsAClientCertificateGetsTheConfiguredOne() throws {
        let pki = try TestPKI()
        let client = try pki.leaf(["portcullis-gateway"], clientAuth: true)
        let upstream = try EchoUpstream()
        let receiver = try OTLPReceiver(tls: try pki.leaf(["localhost"]), clientCA: pki.caCertificate)
        let https = "https://localhost:\(receiver.port)/v1/traces"
        func config(_ extra: String) -> String {
            Self.config(upstream, receiver, tracing: "ca_file: \"\(pki.caCertificate)\"\(extra)")
                .replacingOccurrences(of: receiver.endpoint, with: https)
        }
        let withFile = try GatewayProcess(config(", client_certificate: \"\(client.certificate)\", client_private_key: \"\(client.key)\""),
                                          adminToken: Self.token)
        #expect(E2E.curl(["\(withFile.url)/mtls-file"]).status == 200)
        #expect(waitUntil(10) { receiver.spans().contains { Self.attribute($0, "url.path") == "/mtls-file" } }, "\(withFile.log.suffix(600))")

        let withEnv = try GatewayProcess(config(""), adminToken: Self.token,
                                         environment: ["OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE": client.certificate,
                                                       "OTEL_EXPORTER_OTLP_CLIENT_KEY": client.key])
        #expect(E2E.curl(["\(withEnv.url)/mtls-env"]).status == 200)
        #expect(waitUntil(10) { receiver.spans().contains { Self.attribute($0, "url.path") == "/mtls-env" } }, "\(withEnv.log.suffix(600))")

        let without = try GatewayProcess(config(""), adminToken: Self.token)
        #expect(E2E.curl(["\(without.url)/no-certificate"]).status == 200)
        #expect(waitUntil(10) { without.log.contains("trace export failing") }, "\(without.log.suffix(600))")
        #expect(!receiver.spans().contains { Self.attribute($0, "url.path") == "/no-certificate" })
    }

    @Test func checkConfigNamesBadTracingSettings() throws {
        let cases: [(String, String)] = [
            ("tracing: {endpoint: \"ftp://127.0.0.1:4318/v1/traces\"}", "tracing.endpoint"),
            ("tracing: {endpoint: \"http://127.0.0.1:4318\", compression: brotli}", "expected gzip or none"),
            ("tracing: {endpoint: \"http://127.0.0.1:4318\", ca_file: /etc/hostname}", "tracing.ca_file"),
            ("tracing: {endpoint: \"https://127.0.0.1:4318\", ca_file: /nonexistent/ca.pem}", "tracing.ca_file"),
            ("tracing: {endpoint: \"http://127.0.0.1:4318\", sample_ratio: 2}", "tracing.sample_ratio"),
            ("tracing: {endpoint: \"http://127.0.0.1:4318\", accept_parent: sometimes}", "expected always, trusted_proxies or never"),
            ("tracing: {sample_ratio: 0.5}", "tracing.endpoint"),
            ("tracing: {endpoint: \"http://127.0.0.1:4318\", headers: {host: x}}", "tracing.headers.host"),
            ("tracing: {endpoint: \"http://127.0.0.1:4318\", sampling: 0.5}", "unknown key"),
            ("tracing: {endpoint: \"https://127.0.0.1:4318\", client_certificate: /etc/hostname}", "tracing.client_private_key"),
            ("tracing: {endpoint: \"https://127.0.0.1:4318\", client_certificate: /nonexistent.pem, client_private_key: /nonexistent.key}",
             "tracing.client_certificate"),
            ("tracing: {endpoint: \"http://127.0.0.1:4318\", client_certificate: CERT, client_private_key: KEY}", "is for an https:// endpoint"),
        ]
        for (section, expected) in cases {
            let errors = E2E.configErrors("""
            \(section)
            upstreams:
              app: {url: "http://127.0.0.1:9"}
            routes:
              - {path: /, upstream: app, auth: none}
            """)
            #expect(errors.contains(expected), "\(section): \(errors)")
        }
    }
}
