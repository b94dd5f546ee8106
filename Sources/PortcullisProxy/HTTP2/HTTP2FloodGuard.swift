/// What a client did that ends its HTTP/2 connection with GOAWAY ENHANCE_YOUR_CALM: the
/// known HTTP/2 attacks, each with its own budget (see `HTTP2FloodGuard`).
public enum HTTP2Abuse: Int, Sendable, CaseIterable {
    /// Streams opened and reset faster than the budget (rapid reset, CVE-2023-44487).
    case rapidReset
    /// A header block continued past nghttp2's CONTINUATION limit (CVE-2024-27316 class).
    case continuationFlood
    /// Header blocks past `max_header_list_size` (decoded size: HPACK bombs included).
    case oversizedHeaders
    case settingsFlood
    case pingFlood
    case priorityFlood
    case windowUpdateFlood
    case emptyDataFlood
    /// Protocol errors (invalid fields, frames, streams past the advertised limit) faster than the budget.
    case protocolErrors
    /// Control frames queued for a client that does not read them (nghttp2's outbound limit).
    case outboundFlood
    /// A response that could not make progress within `send_timeout` (the window left at zero).
    case stalledWindow
    /// Streams opened past SETTINGS_MAX_CONCURRENT_STREAMS (each refused with REFUSED_STREAM)
    /// faster than the budget.
    case excessStreams

    /// The `kind` label in `/metrics` and the log.
    public var name: String {
        switch self {
        case .rapidReset: return "rapid_reset"
        case .continuationFlood: return "continuation_flood"
        case .oversizedHeaders: return "oversized_headers"
        case .settingsFlood: return "settings_flood"
        case .pingFlood: return "ping_flood"
        case .priorityFlood: return "priority_flood"
        case .windowUpdateFlood: return "window_update_flood"
        case .emptyDataFlood: return "empty_data_flood"
        case .protocolErrors: return "protocol_errors"
        case .outboundFlood: return "outbound_flood"
        case .stalledWindow: return "stalled_window"
        case .excessStreams: return "excess_streams"
        }
    }
}

/// One token bucket: `capacity` events at once, refilled at `perSecond`.
struct TokenBucket {
    private var tokens: Double
    private let capacity: Double
    private let perNanosecond: Double
    private var last: UInt64

    init(capacity: Double, perSecond: Double, now: UInt64) {
        tokens = capacity
        self.capacity = capacity
        perNanosecond = perSecond / 1e9
        last = now
    }

    /// Takes one token; false when the bucket is empty (the budget is spent).
    @inline(__always)
    mutating func take(now: UInt64) -> Bool {
        if now > last {
            tokens = min(capacity, tokens + Double(now &- last) * perNanosecond)
            last = now
        }
        guard tokens >= 1 else { return false }
        tokens -= 1
        return true
    }
}

/// Per-connection budgets for the frames an attacker sends in floods. A well-behaved
/// client stays far inside each: browsers and URLSession reset a few streams per page,
/// send one SETTINGS and the odd PING, and a WINDOW_UPDATE per window's worth of data.
/// Budgets, as (burst, per second): stream resets (200, 100), SETTINGS (50, 10),
/// PING (50, 10), PRIORITY (500, 100), WINDOW_UPDATE (2000, 1000), DATA frames that are
/// empty without ending the stream (100, 10), protocol errors (100, 10), header blocks
/// past the limit (10, 1), streams past the advertised limit (1000, 100: a client's first
/// flight may precede our SETTINGS). These follow Envoy's and HAProxy's defaults in spirit:
/// generous to real clients, a hard stop for floods of frames that cost the gateway
/// work but carry no request.
struct HTTP2FloodGuard {
    private var resets: TokenBucket
    private var settings: TokenBucket
    private var pings: TokenBucket
    private var priorities: TokenBucket
    private var windowUpdates: TokenBucket
    private var emptyData: TokenBucket
    private var protocolErrors: TokenBucket
    private var oversized: TokenBucket
    private var excessStreams: TokenBucket

    init(now: UInt64) {
        resets = TokenBucket(capacity: 200, perSecond: 100, now: now)
        settings = TokenBucket(capacity: 50, perSecond: 10, now: now)
        pings = TokenBucket(capacity: 50, perSecond: 10, now: now)
        priorities = TokenBucket(capacity: 500, perSecond: 100, now: now)
        windowUpdates = TokenBucket(capacity: 2000, perSecond: 1000, now: now)
        emptyData = TokenBucket(capacity: 100, perSecond: 10, now: now)
        protocolErrors = TokenBucket(capacity: 100, perSecond: 10, now: now)
        oversized = TokenBucket(capacity: 10, perSecond: 1, now: now)
        excessStreams = TokenBucket(capacity: 1000, perSecond: 100, now: now)
    }

    /// Spends one unit of `abuse`'s budget; false when it is overspent.
    mutating func allow(_ abuse: HTTP2Abuse, now: UInt64) -> Bool {
        switch abuse {
        case .rapidReset: return resets.take(now: now)
        case .settingsFlood: return settings.take(now: now)
        case .pingFlood: return pings.take(now: now)
        case .priorityFlood: return priorities.take(now: now)
        case .windowUpdateFlood: return windowUpdates.take(now: now)
        case .emptyDataFlood: return emptyData.take(now: now)
        case .protocolErrors: return protocolErrors.take(now: now)
        case .oversizedHeaders: return oversized.take(now: now)
        case .excessStreams: return excessStreams.take(now: now)
        case .continuationFlood, .outboundFlood, .stalledWindow: return false
        }
    }
}
