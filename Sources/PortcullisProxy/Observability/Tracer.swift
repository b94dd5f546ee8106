import Dispatch
import Logging
import PortcullisCore
import PortcullisIO
import PortcullisOutbound
import W3CTraceContext
#if canImport(Glibc)
import Glibc
#endif

/// The trace context of one request (see `Tracer`).
struct RequestTrace {
    var traceID: TraceID
    /// The gateway's span: the parent the upstream sees in its `traceparent`.
    var spanID: SpanID
    /// The client's span when its `traceparent` was accepted.
    var parentSpanID: SpanID?
    var sampled: Bool
    /// The client's `tracestate`, passed on unchanged with its accepted `traceparent`.
    var traceState: String?
    /// Wall-clock start (sampled spans only), seconds since the epoch.
    var wallStart: Double = 0
}

/// One finished server span, queued on its loop until the exporter takes it.
struct FinishedSpan: Sendable {
    var traceID: TraceID
    var spanID: SpanID
    var parentSpanID: SpanID?
    var startNanos: UInt64
    var endNanos: UInt64
    var method: String
    var path: String
    var route: String?
    var upstream: String
    var status: Int
    var transport: String
    var requestId: String
    var authDecision: String
    var authReason: String?
    var provider: String?
    /// OpenTelemetry HTTP server attributes: `url.scheme`, `server.address`, `client.address`,
    /// `user_agent.original` (empty: not known).
    var scheme: String = ""
    var serverAddress: String = ""
    var clientAddress: String = ""
    var userAgent: String = ""
    /// Set for a child span of a request (a wait for signing keys, a revocation store call);
    /// nil for the request's server span.
    var child: ChildSpan? = nil
}

/// A request's child span: what it waited on, beside the server span.
struct ChildSpan: Sendable {
    var name: String
    /// OTLP span kind: 1 internal, 3 client.
    var kind: Int
    var attributes: [(String, String)]
    var failed: Bool
}

/// Records child spans of one sampled request from anywhere (a store's completion runs on
/// the store's queue): the span is built and queued on the request's loop, like the server
/// span. Holds the tracer (which outlives reloads), never the exchange.
public struct ChildSpans: Sendable {
    let tracer: Tracer
    let loop: EventLoop
    let traceID: TraceID
    let parentSpanID: SpanID
    let limit: Int

    /// One finished child span; times in wall-clock nanoseconds since the epoch.
    public func record(name: String, client: Bool, startNanos: UInt64, endNanos: UInt64,
                       attributes: [(String, String)], failed: Bool) {
        let child = ChildSpan(name: name, kind: client ? 3 : 1, attributes: attributes, failed: failed)
        let (tracer, loop, traceID, parent, limit) = (self.tracer, self.loop, self.traceID, self.parentSpanID, self.limit)
        loop.execute {
            let span = FinishedSpan(traceID: traceID, spanID: tracer.newSpanID(loopIndex: loop.index), parentSpanID: parent,
                                    startNanos: startNanos, endNanos: max(startNanos, endNanos), method: "", path: "",
                                    route: nil, upstream: "", status: 0, transport: "", requestId: "", authDecision: "",
                                    authReason: nil, provider: nil, child: child)
            tracer.record(span, loopIndex: loop.index, limit: limit)
        }
    }

    /// Wall-clock now, in nanoseconds since the epoch.
    public static var nowNanos: UInt64 { UInt64(max(0, WallClock.nowSeconds()) * 1e9) }
}

/// W3C Trace Context and the request spans (#26.3).
///
/// On the request path everything is per loop and lock-free: each loop has its own random
/// generator for ids (a xoshiro256** seeded from the system's generator, so an id costs no
/// system call) and its own bounded queue of finished spans; a request that is not sampled
/// costs two ids and the `traceparent` line it forwards. The exporter (its own queue, never
/// a loop) takes each loop's spans every `export_interval` with a block queued on that loop,
/// as a metrics scrape does, and sends them to the collector as OTLP/HTTP JSON (gzip) in
/// batches of `batchSize`, one POST at a time through the gateway's outbound client
/// (non-blocking, on the last loop; `timeout` per POST). A full queue drops the new span and
/// counts it (`portcullis_trace_spans_total{result="dropped"}`); a POST that fails or is
/// answered 429/502/503/504 keeps its batch for a retry with backoff; one the collector
/// refuses (another status) drops it, counted as `failed`. Logged once per change of state.
public final class Tracer: @unchecked Sendable {
    // @unchecked Sendable: each `LoopState` is confined to its loop; `totals`, `settings`
    // and `client` are behind `lock`; `pending`, `exporting` and the retry state are
    // confined to `queue`.

    final class LoopState: @unchecked Sendable {
        // @unchecked Sendable: confined to its loop's queue.
        var random: Xoshiro
        var spans: [FinishedSpan] = []
        var dropped = 0
        init() { random = Xoshiro() }
    }

    public struct Totals: Sendable, Equatable {
        public var exported = 0
        public var dropped = 0
        public var failed = 0
    }

    let loops: [LoopState]
    private let eventLoops: [EventLoop]
    private let logger: Logger
    private let lock = Lock()
    private var settings: TracingSettings?
    private var totalsValue = Totals()
    private var timer: DispatchSourceTimer?
    private let queue = DispatchQueue(label: "portcullis.tracing.export")
    private var pending: [FinishedSpan] = []
    private var failing = false
    /// After a failed POST the batch is kept (bounded by `maxQueuedSpans` per loop) and sent
    /// again no sooner than this (monotonic ns), the wait doubling from 1 s to 32 s.
    private var retryAt: UInt64 = 0
    private var retryDelay: Double = 0
    /// A POST is out (one at a time, in order); its answer arrives on `queue`.
    private var exporting = false
    /// The outbound client for the settings serving (behind `lock`; remade when they change).
    private var client: HTTPGetClient?

    public init(loops: [EventLoop], logger: Logger) {
        eventLoops = loops
        self.loops = loops.map { _ in LoopState() }
        self.logger = logger
    }

    /// Spans exported, dropped (queue full) and failed (collector unreachable) since start.
    public var totals: Totals { lock.withLock { totalsValue } }

    /// The settings of the configuration serving now (nil: tracing off, the exporter stops
    /// once it sent what was queued).
    public func configure(_ next: TracingSettings?) {
        let (start, stop) = lock.withLock { () -> (Bool, DispatchSourceTimer?) in
            let old = settings
            settings = next
            if let next, client == nil || old?.caFile != next.caFile || old?.timeout != next.timeout {
                client = Self.client(for: next)
            }
            if next == nil, let timer { self.timer = nil; return (false, timer) }
            return (next != nil && (old == nil || timer == nil), nil)
        }
        stop?.cancel()
        if start, let interval = next?.exportInterval {
            let timer = DispatchSource.makeTimerSource(queue: queue)
            timer.schedule(deadline: .now() + interval, repeating: interval, leeway: .milliseconds(50))
            timer.setEventHandler { [weak self] in self?.collect() }
            lock.withLock { self.timer = timer }
            timer.resume()
        }
    }

    // MARK: On the loops

    /// A new id pair for a request on `loopIndex` (its queue). Built from the generator's
    /// words directly: the package's generic `random(using:)` is not inlinable here, and a
    /// call through the generator's witness table per id showed in the 1 % sampling row.
    func newIDs(loopIndex: Int) -> (TraceID, SpanID) {
        let state = loops[loopIndex]
        let words = (state.random.next().bigEndian, state.random.next().bigEndian)
        let span = state.random.next().bigEndian
        return (TraceID(bytes: unsafeBitCast(words, to: TraceID.Bytes.self)),
                SpanID(bytes: unsafeBitCast(span == 0 ? 1 : span, to: SpanID.Bytes.self)))
    }

    func newSpanID(loopIndex: Int) -> SpanID {
        let span = loops[loopIndex].random.next().bigEndian
        return SpanID(bytes: unsafeBitCast(span == 0 ? 1 : span, to: SpanID.Bytes.self))
    }

    /// Whether a new trace is sampled at `ratio`.
    func sample(loopIndex: Int, ratio: Double) -> Bool {
        if ratio >= 1 { return true }
        if ratio <= 0 { return false }
        return Double(loops[loopIndex].random.next() >> 11) * 0x1p-53 < ratio
    }

    /// Queues a finished span (on `loopIndex`'s queue); dropped and counted when full.
    func record(_ span: FinishedSpan, loopIndex: Int, limit: Int) {
        let state = loops[loopIndex]
        if state.spans.count >= limit {
            state.dropped &+= 1
            return
        }
        state.spans.append(span)
    }

    // MARK: Exporting (on `queue`)

    /// Takes every loop's spans (a block on each loop in turn), then sends them.
    private func collect() {
        @Sendable func visit(_ index: Int, _ spans: [FinishedSpan], _ dropped: Int) {
            guard index < eventLoops.count else {
                queue.async { [self] in
                    pending += spans
                    lock.withLock { totalsValue.dropped += dropped }
                    send()
                }
                return
            }
            let state = loops[index]
            eventLoops[index].execute {
                var taken: [FinishedSpan] = []
                swap(&taken, &state.spans)
                let lost = state.dropped
                state.dropped = 0
                visit(index + 1, spans + taken, dropped + lost)
            }
        }
        visit(0, [], 0)
    }

    /// The one outbound HTTP client (keys and the lookup hook use it too): http or https,
    /// `HTTPS_PROXY`/`NO_PROXY`, a host name resolved on each export.
    static func client(for settings: TracingSettings) -> HTTPGetClient {
        var options = HTTPFetchOptions.call(timeout: settings.timeout, userAgent: "portcullis-otlp/1", caFile: settings.caFile)
        options.clientCertificate = settings.clientCertificate
        return HTTPGetClient(options: options)
    }

    /// Sends the oldest batch (one POST at a time); its answer continues in `exported`.
    private func send() {
        guard !exporting else { return }
        guard let (settings, client) = lock.withLock({ settings.flatMap { s in client.map { (s, $0) } } }) else {
            pending.removeAll()
            return
        }
        // Kept while the collector fails, bounded: past the bound the oldest are dropped, counted as failed.
        let bound = settings.maxQueuedSpans * max(1, eventLoops.count)
        if pending.count > bound {
            let lost = pending.count - bound
            pending.removeFirst(lost)
            lock.withLock { totalsValue.failed += lost }
        }
        guard !pending.isEmpty, MonotonicClock.nowNanoseconds() >= retryAt else { return }  // nothing, or backing off
        let batch = min(pending.count, settings.batchSize)
        var body = OTLPJSON.encode(Array(pending.prefix(batch)), serviceName: settings.serviceName)
        var headers = settings.headers.map { (name: $0.name, value: $0.value) }
        if settings.compression == .gzip, let compressed = Gzip.compress(body) {
            body = compressed
            headers.append((name: "Content-Encoding", value: "gzip"))
        }
        exporting = true
        let loop = eventLoops[eventLoops.count - 1]
        client.post(settings.endpoint, body: body, headers: headers, on: loop) { [self] result in
            let outcome: ExportOutcome
            switch result {
            case .success(let response) where (200..<300).contains(response.status): outcome = .exported
            // Retryable answers (OTLP/HTTP specification): throttled or the collector unavailable.
            case .success(let response) where [429, 502, 503, 504].contains(response.status): outcome = .retry("answered \(response.status)")
            case .success(let response): outcome = .rejected("answered \(response.status)")
            case .failure(let error): outcome = .retry("\(error)")
            }
            queue.async { [self] in exported(batch, outcome, settings) }
        }
    }

    enum ExportOutcome {
        case exported
        /// Kept and sent again after the backoff.
        case retry(String)
        /// The collector refused the batch itself (400…): dropped, counted as failed, never resent.
        case rejected(String)
    }

    /// A POST's answer, on `queue`: the batch leaves the queue (exported or refused) or stays
    /// for the retry; the failing state is logged once per change.
    private func exported(_ batch: Int, _ outcome: ExportOutcome, _ settings: TracingSettings) {
        exporting = false
        var reason: String?
        switch outcome {
        case .exported:
            pending.removeFirst(min(batch, pending.count))
            lock.withLock { totalsValue.exported += batch }
        case .rejected(let why):
            pending.removeFirst(min(batch, pending.count))
            lock.withLock { totalsValue.failed += batch }
            reason = why
        case .retry(let why):
            reason = why
        }
        switch (reason, failing) {
        case (let reason?, false):
            failing = true
            let what = if case .retry = outcome {
                "trace export failing; spans are kept and sent again with backoff (1 s doubling to 32 s)"
            } else {
                "trace export failing: the collector refused a batch (dropped, counted as failed)"
            }
            logger.error("\(what)", metadata: ["endpoint": "\(settings.endpoint)", "reason": "\(reason)"])
        case (nil, true):
            failing = false
            logger.notice("trace export works again", metadata: ["endpoint": "\(settings.endpoint)"])
        default:
            break
        }
        if case .retry = outcome {
            // Retried later with the rest; the wait doubles (1 s … 32 s) until one POST works.
            retryDelay = min(32, max(1, retryDelay * 2))
            retryAt = MonotonicClock.nowNanoseconds() &+ UInt64(retryDelay * 1e9)
            return
        }
        retryDelay = 0
        retryAt = 0
        send()  // the rest, if any
    }
}

/// xoshiro256** (Blackman and Vigna): fast ids that need to be unique, not secret.
struct Xoshiro: RandomNumberGenerator {
    private var s: (UInt64, UInt64, UInt64, UInt64)
    init() {
        var system = SystemRandomNumberGenerator()
        s = (system.next(), system.next(), system.next(), system.next())
        if s == (0, 0, 0, 0) { s.0 = 1 }
    }
    mutating func next() -> UInt64 {
        let result = ((s.1 &* 5) << 7 | (s.1 &* 5) >> 57) &* 9
        let t = s.1 << 17
        s.2 ^= s.0
        s.3 ^= s.1
        s.1 ^= s.2
        s.0 ^= s.3
        s.2 ^= t
        s.3 = s.3 << 45 | s.3 >> 19
        return result
    }
}

extension ByteBuffer {
    /// Lower-case hex of a trace or span id (at most 16 bytes), without allocating.
    mutating func appendHexID<T>(_ id: T) {
        var scratch: (UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0)
        withUnsafeBytes(of: id) { bytes in
            withUnsafeMutableBytes(of: &scratch) { out in
                var i = 0
                for byte in bytes.prefix(16) {
                    out[i] = HexText.digits[Int(byte >> 4)]
                    out[i + 1] = HexText.digits[Int(byte & 0xF)]
                    i += 2
                }
                append(UnsafeRawBufferPointer(rebasing: out[0..<i]))
            }
        }
    }
}

enum HexText {
    static let digits: [UInt8] = Array("0123456789abcdef".utf8)
    static func string<T>(of value: T) -> String {
        withUnsafeBytes(of: value) { raw in
            var out = [UInt8]()
            out.reserveCapacity(raw.count * 2)
            for byte in raw {
                out.append(digits[Int(byte >> 4)])
                out.append(digits[Int(byte & 0xF)])
            }
            return String(decoding: out, as: UTF8.self)
        }
    }
}

/// OTLP/HTTP JSON (opentelemetry-proto's JSON mapping: ids in hex, times as decimal strings).
enum OTLPJSON {
    static func encode(_ spans: [FinishedSpan], serviceName: String) -> [UInt8] {
        var out = "{\"resourceSpans\":[{\"resource\":{\"attributes\":[{\"key\":\"service.name\",\"value\":{\"stringValue\":"
        out += JSONText.quoted(serviceName)
        out += "}}]},\"scopeSpans\":[{\"scope\":{\"name\":\"portcullis\"},\"spans\":["
        for (index, span) in spans.enumerated() {
            if index > 0 { out += "," }
            out += "{\"traceId\":\"\(HexText.string(of: span.traceID.bytes))\",\"spanId\":\"\(HexText.string(of: span.spanID.bytes))\""
            if let parent = span.parentSpanID { out += ",\"parentSpanId\":\"\(HexText.string(of: parent.bytes))\"" }
            if let child = span.child {
                out += ",\"name\":\(JSONText.quoted(child.name)),\"kind\":\(child.kind)"
                out += ",\"startTimeUnixNano\":\"\(span.startNanos)\",\"endTimeUnixNano\":\"\(span.endNanos)\",\"attributes\":["
                out += child.attributes.map { "{\"key\":\(JSONText.quoted($0.0)),\"value\":{\"stringValue\":\(JSONText.quoted($0.1))}}" }
                    .joined(separator: ",")
                out += "],\"status\":{\"code\":\(child.failed ? 2 : 0)}}"
                continue
            }
            // OpenTelemetry's HTTP server span name: "{method} {http.route}", the method alone
            // when no route matched.
            out += ",\"name\":\(JSONText.quoted(span.route.map { "\(span.method) \($0)" } ?? span.method))"
            out += ",\"kind\":2,\"startTimeUnixNano\":\"\(span.startNanos)\",\"endTimeUnixNano\":\"\(span.endNanos)\",\"attributes\":["
            var attributes: [String] = []
            func string(_ key: String, _ value: String) {
                attributes.append("{\"key\":\(JSONText.quoted(key)),\"value\":{\"stringValue\":\(JSONText.quoted(value))}}")
            }
            string("http.request.method", span.method)
            string("url.path", span.path)
            if let route = span.route { string("http.route", route) }
            attributes.append("{\"key\":\"http.response.status_code\",\"value\":{\"intValue\":\"\(span.status)\"}}")
            string("network.protocol.name", "http")
            string("network.protocol.version", Self.protocolVersion(span.transport))
            string("portcullis.transport", span.transport)
            if !span.scheme.isEmpty { string("url.scheme", span.scheme) }
            if !span.serverAddress.isEmpty { string("server.address", span.serverAddress) }
            if !span.clientAddress.isEmpty { string("client.address", span.clientAddress) }
            if !span.userAgent.isEmpty { string("user_agent.original", span.userAgent) }
            if span.status >= 500 { string("error.type", String(span.status)) }
            string("portcullis.request_id", span.requestId)
            string("portcullis.auth.decision", span.authDecision)
            if let reason = span.authReason { string("portcullis.auth.reason", reason) }
            if let provider = span.provider { string("portcullis.auth.provider", provider) }
            if !span.upstream.isEmpty { string("portcullis.upstream", span.upstream) }
            out += attributes.joined(separator: ",")
            out += "],\"status\":{\"code\":\(span.status >= 500 ? 2 : 0)}}"
        }
        out += "]}]}]}"
        return Array(out.utf8)
    }

    /// `network.protocol.version` of a transport name (`http/1.1` → `1.1`, `h2`/`h2c` → `2`).
    static func protocolVersion(_ transport: String) -> String {
        if transport.hasPrefix("h2") { return "2" }
        if transport.hasPrefix("http/") { return String(transport.dropFirst(5)) }
        return transport
    }
}
