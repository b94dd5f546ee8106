#if canImport(Glibc)
import Glibc
#endif
import Dispatch
import PortcullisCore
import PortcullisIO
import W3CTraceContext

/// One finished request, as the access log writes it. Paths are logged without
/// the query string, and no header value is logged, so tokens never reach logs.
struct AccessRecord {
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

    func record(_ r: AccessRecord) {
        buffer.append("{\"time\":\"")
        appendTimestamp(r.time)
        // Every string is escaped, also those that are checked on arrival (request ids) or
        // made here (the client's address): a log line is one JSON object, whatever came in.
        buffer.append("\",\"request_id\":")
        appendQuoted(r.requestId)
        if let traceID = r.traceID {
            buffer.append(",\"trace_id\":\"")
            buffer.appendHexID(traceID.bytes)
            buffer.append("\"")
        }
        buffer.append(",\"client\":")
        buffer.append(JSONText.quoted(r.client))
        buffer.append(",\"method\":")
        buffer.append(JSONText.quoted(r.method))
        buffer.append(",\"protocol\":\"")
        buffer.append(r.transport.name)
        buffer.append("\",\"path\":")
        buffer.append(JSONText.quoted(r.path))
        buffer.append(",\"status\":")
        buffer.appendDecimal(r.status)
        buffer.append(",\"upstream\":")
        buffer.append(JSONText.quoted(r.upstream))
        buffer.append(",\"bytes\":")
        buffer.appendDecimal(r.bytes)
        buffer.append(",\"duration_ms\":")
        let micros = Int(r.durationNanoseconds / 1000)
        buffer.appendDecimal(micros / 1000)
        buffer.append(".")
        let frac = micros % 1000
        if frac < 100 { buffer.append("0") }
        if frac < 10 { buffer.append("0") }
        buffer.appendDecimal(frac)
        buffer.append("}\n")
        if buffer.readableBytes > 32 * 1024 {
            flush()
        } else if !flushScheduled {
            flushScheduled = true
            loop.queue.async { [self] in flush() }
        }
    }

    /// `bytes` as a JSON string: quotes, backslashes and control bytes escaped.
    private func appendQuoted(_ bytes: UnsafeRawBufferPointer) {
        buffer.append(UInt8(ascii: "\""))
        for b in bytes {
            switch b {
            case UInt8(ascii: "\""), UInt8(ascii: "\\"):
                buffer.append(UInt8(ascii: "\\"))
                buffer.append(b)
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
