#if canImport(Glibc)
import Glibc
#endif
import Dispatch
import PortcullisCore
import PortcullisIO
import W3CTraceContext

/// The access log's fields, in the order a line carries them (`access_log: {fields: […]}`
/// selects; the default is all). Names are the JSON members'.
public struct AccessLogFields: OptionSet, Sendable, Equatable {
    public let rawValue: UInt32
    public init(rawValue: UInt32) { self.rawValue = rawValue }

    public static let names = ["time", "request_id", "trace_id", "client", "method", "protocol", "host", "path", "route",
                               "status", "edge", "auth", "auth_reason", "user", "provider", "upstream", "upstream_address",
                               "upstream_status", "bytes", "duration_ms", "user_agent"]
    public static let all = AccessLogFields(rawValue: (1 << UInt32(names.count)) - 1)

    /// The field called `name`, nil for an unknown name.
    public init?(named name: String) {
        guard let index = Self.names.firstIndex(of: name) else { return nil }
        self.init(rawValue: 1 << UInt32(index))
    }

    static let time = AccessLogFields(named: "time")!, requestID = AccessLogFields(named: "request_id")!
    static let traceID = AccessLogFields(named: "trace_id")!, client = AccessLogFields(named: "client")!
    static let method = AccessLogFields(named: "method")!, transport = AccessLogFields(named: "protocol")!
    static let host = AccessLogFields(named: "host")!, path = AccessLogFields(named: "path")!
    static let route = AccessLogFields(named: "route")!, status = AccessLogFields(named: "status")!
    static let edge = AccessLogFields(named: "edge")!, auth = AccessLogFields(named: "auth")!
    static let authReason = AccessLogFields(named: "auth_reason")!, user = AccessLogFields(named: "user")!
    static let provider = AccessLogFields(named: "provider")!, upstream = AccessLogFields(named: "upstream")!
    static let upstreamAddress = AccessLogFields(named: "upstream_address")!, upstreamStatus = AccessLogFields(named: "upstream_status")!
    static let bytes = AccessLogFields(named: "bytes")!, duration = AccessLogFields(named: "duration_ms")!
    static let userAgent = AccessLogFields(named: "user_agent")!
}

/// One finished request, as the access log writes it. Paths are logged without the query
/// string, and no header value but the Host and the User-Agent is logged, so tokens never
/// reach logs (a user id is the verified one the app receives, never a credential).
struct AccessRecord {
    /// What authentication decided: `none` (no route: refused before it), `anonymous`
    /// (forwarded without identity), `verified`, `refused`.
    enum Decision: String { case none, anonymous, verified, refused }

    var time: Double
    var requestId: UnsafeRawBufferPointer
    var method: String
    var path: String
    var status: Int
    var upstream: String
    var bytes: Int
    var durationNanoseconds: UInt64
    var client: String
    var transport: RequestProtocol
    /// With `tracing:` on: the request's trace id (also when it was not sampled).
    var traceID: TraceID? = nil
    var host: UnsafeRawBufferPointer = UnsafeRawBufferPointer(start: nil, count: 0)
    var userAgent: UnsafeRawBufferPointer = UnsafeRawBufferPointer(start: nil, count: 0)
    /// The matched route's path prefix ("" before routing).
    var route: String = ""
    /// True when the gateway answered (a refusal, a 404, a 502…), false when the app did.
    var edge: Bool = true
    var decision: Decision = .none
    var reason: String? = nil
    var user: String? = nil
    var provider: String? = nil
    var upstreamAddress: String? = nil
}

/// A per-loop JSON-lines access log. Lines are gathered in a buffer and written
/// with one `write(2)` after the current burst of events (a block queued behind
/// them on the loop), so a busy loop makes one system call for many requests.
///
/// Threading: one instance per loop, used only on that loop's queue.
public final class AccessLog: @unchecked Sendable {
    // @unchecked Sendable: confined to `loop.queue`.
    private let fd: Int32
    private let loop: EventLoop
    private var buffer = ByteBuffer()
    private var flushScheduled = false
    private var cachedSecond: Int = -1
    private var cachedStamp = ""

    var loopQueue: DispatchQueue { loop.queue }

    public init(fd: Int32, loop: EventLoop) {
        self.fd = fd
        self.loop = loop
    }

    func record(_ r: AccessRecord, fields: AccessLogFields = .all) {
        // Every string is escaped, also those that are checked on arrival (request ids) or
        // made here (the client's address): a log line is one JSON object, whatever came in.
        var first = true
        func member(_ field: AccessLogFields, _ name: StaticString) -> Bool {
            guard fields.contains(field) else { return false }
            buffer.append(first ? "{\"" : ",\"")
            first = false
            buffer.append(name)
            buffer.append("\":")
            return true
        }
        if member(.time, "time") {
            buffer.append("\"")
            appendTimestamp(r.time)
            buffer.append("\"")
        }
        if member(.requestID, "request_id") { appendQuoted(r.requestId) }
        if let traceID = r.traceID, member(.traceID, "trace_id") {
            buffer.append("\"")
            buffer.appendHexID(traceID.bytes)
            buffer.append("\"")
        }
        if member(.client, "client") { appendQuoted(r.client) }
        if member(.method, "method") { appendQuoted(r.method) }
        if member(.transport, "protocol") {
            buffer.append("\"")
            buffer.append(r.transport.name)
            buffer.append("\"")
        }
        if member(.host, "host") { appendQuoted(r.host) }
        if member(.path, "path") { appendQuoted(r.path) }
        if member(.route, "route") { appendOptional(r.route.isEmpty ? nil : r.route) }
        if member(.status, "status") { buffer.appendDecimal(r.status) }
        if member(.edge, "edge") { buffer.append(r.edge ? "true" : "false") }
        if member(.auth, "auth") {
            buffer.append("\"")
            buffer.append(r.decision.rawValue)
            buffer.append("\"")
        }
        if member(.authReason, "auth_reason") { appendOptional(r.reason) }
        if member(.user, "user") { appendOptional(r.user) }
        if member(.provider, "provider") { appendOptional(r.provider) }
        if member(.upstream, "upstream") { appendQuoted(r.upstream) }
        if member(.upstreamAddress, "upstream_address") { appendOptional(r.upstreamAddress) }
        if member(.upstreamStatus, "upstream_status") {
            if r.edge { buffer.append("null") } else { buffer.appendDecimal(r.status) }
        }
        if member(.bytes, "bytes") { buffer.appendDecimal(r.bytes) }
        if member(.duration, "duration_ms") {
            let micros = Int(r.durationNanoseconds / 1000)
            buffer.appendDecimal(micros / 1000)
            buffer.append(".")
            let frac = micros % 1000
            if frac < 100 { buffer.append("0") }
            if frac < 10 { buffer.append("0") }
            buffer.appendDecimal(frac)
        }
        if member(.userAgent, "user_agent") { r.userAgent.count > 0 ? appendQuoted(r.userAgent) : buffer.append("null") }
        buffer.append(first ? "{}\n" : "}\n")
        if buffer.readableBytes > 32 * 1024 {
            flush()
        } else if !flushScheduled {
            flushScheduled = true
            loop.queue.async { [self] in flush() }
        }
    }

    /// A JSON string, or null.
    private func appendOptional(_ text: String?) {
        if let text { appendQuoted(text) } else { buffer.append("null") }
    }

    /// `text` as a JSON string, escaped straight into the buffer (no String made per field).
    private func appendQuoted(_ text: String) {
        var text = text
        text.withUTF8 { appendQuoted(UnsafeRawBufferPointer($0), raw: false) }
    }

    /// `bytes` as a JSON string: quotes, backslashes and control bytes escaped.
    /// `raw`: bytes a client sent (a request id, the Host, the User-Agent), which need not be
    /// UTF-8: a byte past ASCII is written as `\u00XX`, so the line stays valid JSON.
    private func appendQuoted(_ bytes: UnsafeRawBufferPointer, raw: Bool = true) {
        buffer.append(UInt8(ascii: "\""))
        for b in bytes {
            switch b {
            case UInt8(ascii: "\""), UInt8(ascii: "\\"):
                buffer.append(UInt8(ascii: "\\"))
                buffer.append(b)
            case 0x80...0xFF where raw:
                buffer.append("\\u00")
                buffer.append(Self.hex[Int(b >> 4)])
                buffer.append(Self.hex[Int(b & 15)])
            case 0..<0x20, 0x7F:
                buffer.append("\\u00")
                buffer.append(Self.hex[Int(b >> 4)])
                buffer.append(Self.hex[Int(b & 15)])
            default:
                buffer.append(b)
            }
        }
        buffer.append(UInt8(ascii: "\""))
    }
    private static let hex = Array("0123456789abcdef".utf8)

    private func appendTimestamp(_ time: Double) {
        let seconds = Int(time)
        if seconds != cachedSecond {
            var t = time_t(seconds)
            var parts = tm()
            gmtime_r(&t, &parts)
            func two(_ v: Int32) -> String { v < 10 ? "0\(v)" : "\(v)" }
            cachedStamp = "\(parts.tm_year + 1900)-\(two(parts.tm_mon + 1))-\(two(parts.tm_mday))T\(two(parts.tm_hour)):\(two(parts.tm_min)):\(two(parts.tm_sec))"
            cachedSecond = seconds
        }
        buffer.append(cachedStamp)
        let millis = Int((time - Double(seconds)) * 1000)
        buffer.append(".")
        if millis < 100 { buffer.append("0") }
        if millis < 10 { buffer.append("0") }
        buffer.appendDecimal(max(0, millis))
        buffer.append("Z")
    }

    func flush() {
        flushScheduled = false
        while !buffer.isEmpty {
            let r = buffer.readable
            let n = Glibc.write(fd, r.baseAddress, r.count)
            if n <= 0 { buffer.clear(); break }  // a broken log must not stall traffic
            buffer.consume(n)
        }
        buffer.releaseIfEmpty(keepingUpTo: 64 * 1024)
    }
}
