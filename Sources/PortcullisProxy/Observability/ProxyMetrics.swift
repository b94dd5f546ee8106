import CoreMetrics
import PortcullisCore
import PortcullisIO
import PortcullisTLS

/// What the proxy counts for `/metrics`, kept so that the request path pays
/// no atomics and takes no locks for counters:
///
/// - requests by route and status code: plain integers in one table per loop,
///   written only on that loop's queue and read there at scrape time
///   (`ProxyServer.snapshot`), as HAProxy keeps per-thread counters;
/// - upstream response latency (request forwarded → response head) per
///   upstream: a swift-metrics `Timer` made once per upstream by `factory`
///   (one short lock per record in the Prometheus backend);
/// - pool usage: read from the per-loop pools at scrape time.
public final class ProxyMetrics: @unchecked Sendable {
    // @unchecked Sendable: `labels` is under its lock; each `LoopCounts` is confined to its loop.
    /// Status codes 100...599 each have a slot.
    static let statusSlots = 500
    /// `portcullis_request_duration_seconds` buckets (upper bounds, seconds): from 5 ms to past
    /// the longest default timeout (the upstream response timeout, 60 s; `+Inf` after).
    public static let durationBuckets: [Double] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300]
    static let durationBucketNanos: [UInt64] = durationBuckets.map { UInt64($0 * 1e9) }
    /// Cells per route and status class: the buckets and `+Inf`.
    static let durationCells = durationBuckets.count + 1
    /// Status classes 1xx…5xx.
    static let statusClasses = 5

    /// One loop's request counts: `requests[routeSlot * statusSlots + status - 100]`,
    /// route slot 0 = no route matched (404, or refused before routing).
    final class LoopCounts: @unchecked Sendable {
        // @unchecked Sendable: written and read only on its loop's queue.
        var requests: [Int]
        /// Requests by the protocol they came on (`RequestProtocol.slot`).
        var protocols = [Int](repeating: 0, count: RequestProtocol.allCases.count)
        /// HTTP/2 connections ended for abuse, by `HTTP2Abuse.rawValue`.
        var http2Abuse = [Int](repeating: 0, count: HTTP2Abuse.allCases.count)
        /// Events an exchange ignored because its phase did not expect them.
        var outOfPhaseEvents = 0
        /// HTTP/2 streams refused past SETTINGS_MAX_CONCURRENT_STREAMS.
        var http2RefusedStreams = 0
        /// Edge request durations: `durations[(routeSlot * 5 + class) * durationCells + bucket]`
        /// (not cumulative here), and their sums in nanoseconds by `routeSlot * 5 + class`.
        var durations: [Int]
        var durationSums: [Int]
        init(routeSlots: Int) {
            requests = [Int](repeating: 0, count: routeSlots * ProxyMetrics.statusSlots)
            durations = [Int](repeating: 0, count: routeSlots * ProxyMetrics.statusClasses * ProxyMetrics.durationCells)
            durationSums = [Int](repeating: 0, count: routeSlots * ProxyMetrics.statusClasses)
        }
        func grow(to routeSlots: Int) {
            let cells = routeSlots * ProxyMetrics.statusSlots
            if requests.count < cells { requests += repeatElement(0, count: cells - requests.count) }
            let classes = routeSlots * ProxyMetrics.statusClasses
            if durationSums.count < classes {
                durationSums += repeatElement(0, count: classes - durationSums.count)
                durations += repeatElement(0, count: classes * ProxyMetrics.durationCells - durations.count)
            }
        }
    }

    /// Every loop's counts added up (read on each loop in turn at scrape time).
    struct Totals: Sendable {
        var requests: [Int] = []
        var protocols: [Int] = []
        var http2Abuse: [Int] = []
        var outOfPhaseEvents = 0
        var http2RefusedStreams = 0
        var durations: [Int] = []
        var durationSums: [Int] = []

        /// Adds one loop's counts. On that loop's queue.
        mutating func add(_ loop: LoopCounts) {
            Self.add(loop.requests, into: &requests)
            Self.add(loop.durations, into: &durations)
            Self.add(loop.durationSums, into: &durationSums)
            Self.add(loop.protocols, into: &protocols)
            Self.add(loop.http2Abuse, into: &http2Abuse)
            outOfPhaseEvents &+= loop.outOfPhaseEvents
            http2RefusedStreams &+= loop.http2RefusedStreams
        }

        private static func add(_ counts: [Int], into total: inout [Int]) {
            if total.isEmpty { total = counts; return }
            // A reload that added routes grows each loop's table on that loop: tables read
            // during one may differ in length.
            if total.count < counts.count { total += repeatElement(0, count: counts.count - total.count) }
            for i in counts.indices { total[i] &+= counts[i] }
        }
    }

    let loops: [LoopCounts]
    let factory: any MetricsFactory
    /// Route labels by slot - 1 (`host` + path prefix), and the upstream latency timers by
    /// name. Both only grow: a reload keeps a label's slot, so its counts go on.
    private let labels: LockedValue<(routes: [String], timers: [String: CoreMetrics.Timer])>

    /// Route labels by slot - 1 (slot 0 = no route matched).
    public var routeLabels: [String] { labels.withLock { $0.routes } }

    /// - Parameters:
    ///   - factory: makes the latency timers (`portcullis_upstream_response_seconds{upstream}`).
    public init(loopCount: Int, configuration: ProxyConfiguration, factory: any MetricsFactory) {
        self.factory = factory
        labels = LockedValue(([], [:]))
        loops = (0..<loopCount).map { _ in LoopCounts(routeSlots: 1) }
        let slots = routeSlots(for: configuration)
        for counts in loops { counts.grow(to: slots.count + 1) }
    }

    /// Each route's slot, labels added as needed (reloads: a route that stays keeps its slot).
    /// Each loop's table must be grown (`grow(loopIndex:)`, on that loop) before the slots are used.
    func routeSlots(for configuration: ProxyConfiguration) -> [Int] {
        labels.withLock { labels in
            configuration.routes.map { route in
                let label = (route.host ?? "") + route.pathPrefix
                if let index = labels.routes.firstIndex(of: label) { return index + 1 }
                labels.routes.append(label)
                return labels.routes.count
            }
        }
    }

    /// Makes room for every slot handed out so far. On `loopIndex`'s queue.
    func grow(loopIndex: Int) {
        loops[loopIndex].grow(to: labels.withLock { $0.routes.count } + 1)
    }

    /// The latency timer of the upstream called `name` (one per name, kept across reloads).
    func latencyTimer(upstream name: String) -> CoreMetrics.Timer {
        labels.withLock { labels in
            if let timer = labels.timers[name] { return timer }
            let timer = CoreMetrics.Timer(label: "portcullis_upstream_response_seconds", dimensions: [("upstream", name)], factory: factory)
            labels.timers[name] = timer
            return timer
        }
    }

    /// Counts one finished request. On `loopIndex`'s queue.
    /// `nanoseconds`: from the request's head to its answer, as the gateway saw it.
    @inline(__always)
    func countRequest(loopIndex: Int, routeSlot: Int, status: Int, transport: RequestProtocol, nanoseconds: UInt64) {
        guard status >= 100, status < 600 else { return }
        let counts = loops[loopIndex]
        counts.requests[routeSlot &* Self.statusSlots &+ status &- 100] &+= 1
        counts.protocols[transport.slot] &+= 1
        let row = routeSlot &* Self.statusClasses &+ status / 100 &- 1
        let bucket = HistogramBucket.index(of: nanoseconds, in: Self.durationBucketNanos)
        counts.durations[row &* Self.durationCells &+ bucket] &+= 1
        counts.durationSums[row] &+= Int(truncatingIfNeeded: nanoseconds)
    }

    /// Counts an HTTP/2 connection ended for `abuse`. On `loopIndex`'s queue.
    func countHTTP2Abuse(_ abuse: HTTP2Abuse, loopIndex: Int) {
        loops[loopIndex].http2Abuse[abuse.rawValue] &+= 1
    }

    /// Counts an HTTP/2 stream refused past the advertised limit. On `loopIndex`'s queue.
    func countHTTP2RefusedStream(loopIndex: Int) {
        loops[loopIndex].http2RefusedStreams &+= 1
    }

    /// Counts an event an exchange ignored (see `Exchange.outOfPhase`). On `loopIndex`'s queue.
    func countOutOfPhaseEvent(loopIndex: Int) {
        loops[loopIndex].outOfPhaseEvents &+= 1
    }
}

/// Counters and pool usage gathered from every loop by `ProxyServer.snapshot`.
public struct ProxySnapshot: Sendable {
    /// Requests since start: route (nil: no route matched), status code, count. Only non-zero rows.
    public var requests: [(route: String?, status: Int, count: Int)] = []
    /// Per upstream (configuration order), summed over the loops.
    public var pools: [UpstreamPoolUsage] = []
    /// Requests since start by protocol name (`http/1.0`, `http/1.1`, `h2`, `h2c`).
    public var protocols: [(name: String, count: Int)] = []
    /// HTTP/2 connections ended with ENHANCE_YOUR_CALM since start, by `HTTP2Abuse.name`.
    public var http2Abuse: [(kind: String, count: Int)] = []
    /// Events exchanges ignored since start because their phase did not expect them.
    public var outOfPhaseEvents = 0
    /// HTTP/2 streams refused (REFUSED_STREAM) past SETTINGS_MAX_CONCURRENT_STREAMS since start.
    public var http2RefusedStreams = 0
    /// Edge request durations by route (nil: none matched) and status class ("2xx"…): counts
    /// per bucket of `ProxyMetrics.durationBuckets` and `+Inf` (not cumulative), and the sum
    /// in seconds. Only rows that saw a request.
    public var durations: [(route: String?, statusClass: String, buckets: [Int], sum: Double)] = []
    /// Client connections now, by listener address and protocol (`handshake`: TLS not done
    /// yet; `http1`; `h2`: HTTP/2 and h2c; `websocket`: upgraded tunnels), every protocol of
    /// every listener serving (or still draining after a reload removed it).
    public var connections: [(listener: String, protocol: String, count: Int)] = []
    /// Client TLS handshakes that did not complete since start, by listener address and
    /// `TLSHandshakeFailure.name`. Only non-zero rows.
    public var tlsHandshakeFailures: [(listener: String, reason: String, count: Int)] = []
}

/// One upstream's connections now, summed over the loops' pools.
public struct UpstreamPoolUsage: Sendable, Equatable {
    public var upstream: String
    /// Open connections (connecting and in use included).
    public var open = 0
    public var idle = 0
    /// Requests queued for a connection.
    public var waiting = 0
    /// Connection cap across loops.
    public var maxConnections = 0
    /// Requests answered 503 because the pool and its queue were full (since start).
    public var exhausted = 0
    /// Connections closed because the upstream sent bytes no request asked for (since start).
    public var unexpectedBytes = 0
}

/// Client connections and failed TLS handshakes per listener, summed over the loops at
/// scrape time (each loop's `ListenerContext` read on its own queue).
struct ListenerConnectionTotals: Sendable {
    static let protocols = ["handshake", "http1", "h2", "websocket"]
    /// By listener label: connections by `protocols` index, handshake failures by reason.
    private var rows: [String: (connections: [Int], failures: [Int])] = [:]

    /// Adds one loop's context of `listener`. On that context's loop queue.
    mutating func add(_ context: ListenerContext, listener: String) {
        var row = rows[listener] ?? ([0, 0, 0, 0], [Int](repeating: 0, count: TLSHandshakeFailure.allCases.count))
        let h2 = context.http2Connections.count, tunnels = context.tunnels.count
        row.connections[0] += context.handshaking
        row.connections[1] += max(0, context.openConnections - context.handshaking - h2 - tunnels)
        row.connections[2] += h2
        row.connections[3] += tunnels
        for (reason, count) in context.handshakeFailures.enumerated() { row.failures[reason] += count }
        rows[listener] = row
    }

    func publish(into snapshot: inout ProxySnapshot) {
        for (listener, row) in rows.sorted(by: { $0.key < $1.key }) {
            for (index, count) in row.connections.enumerated() {
                snapshot.connections.append((listener, Self.protocols[index], count))
            }
            for reason in TLSHandshakeFailure.allCases where row.failures[reason.rawValue] > 0 {
                snapshot.tlsHandshakeFailures.append((listener, reason.name, row.failures[reason.rawValue]))
            }
        }
    }
}
