/// Parses one request head strictly (RFC 9110 / RFC 9112), rejecting everything that could make
/// this gateway and an upstream disagree about where a request ends.
///
/// Feed it the connection's buffer from the first byte of the request each time more bytes arrive;
/// it remembers how far it scanned, so a head arriving byte by byte costs linear time. No allocation
/// happens once `head.fields` has grown to its working capacity; no `String` is created.
/// A value belongs to one connection and is used from that connection's queue only.
public struct RequestHeadParser: Sendable {
    public let limits: HTTPLimits
    private var scanner = HeadScanner()

    public init(limits: HTTPLimits = .default) {
        self.limits = limits
    }

    /// Forgets the scan position; call it before parsing the next request of a connection.
    /// (The parser also resets itself after `.complete` and `.failure`.)
    public mutating func reset() {
        scanner.reset()
    }

    /// Parses `bytes` (starting at the request's first byte) into `head`, reusing its storage.
    /// On `.complete` the head occupies `bytes[0..<head.headLength]`.
    public mutating func parse(_ bytes: UnsafeRawBufferPointer, into head: inout RequestHead) -> ParseStatus {
        switch scanner.scan(bytes, limits: limits) {
        case .incomplete:
            return .incomplete
        case .failure(let error):
            return .failure(error)
        case .complete(let scanned):
            do {
                try Self.interpret(bytes, scanned, limits, into: &head)
                return .complete
            } catch {
                return .failure(error)
            }
        }
    }

    /// Parses the request line and fields of a complete head and derives framing and connection semantics.
    private static func interpret(
        _ p: UnsafeRawBufferPointer, _ scanned: HeadScanner.Head, _ limits: HTTPLimits, into head: inout RequestHead
    ) throws(HTTPParseError) {
        try RequestLine.parse(p, scanned.startLine, into: &head)
        head.headLength = scanned.headLength
        head.fields.removeAll(keepingCapacity: true)
        head.host = nil

        var hostCount = 0
        var contentLength = -1
        var codings = TransferCodings()
        var close = false, keepAliveToken = false, upgradeToken = false, upgradeWebSocket = false
        var expectation: Range<Int>? = nil

        var line = scanned.fieldLines.lowerBound
        let fieldsEnd = scanned.fieldLines.upperBound
        while line < fieldsEnd {
            let (field, lineEnd) = try FieldLine.parse(p, line, fieldsEnd)
            line = lineEnd &+ 2
            head.fields.append(field)
            let name = field.name, value = field.value
            switch name.count {
            case 4 where HTTPBytes.equalsCaseInsensitive(p, name, "host"):
                hostCount &+= 1
                head.host = value
            case 6 where HTTPBytes.equalsCaseInsensitive(p, name, "expect"):
                if expectation == nil || !HTTPBytes.equalsCaseInsensitive(p, value, "100-continue") {
                    expectation = value
                }
            case 7 where HTTPBytes.equalsCaseInsensitive(p, name, "upgrade"):
                HTTPBytes.forEachToken(p, value) { token in
                    if HTTPBytes.equalsCaseInsensitive(p, token, "websocket") { upgradeWebSocket = true }
                }
            case 10 where HTTPBytes.equalsCaseInsensitive(p, name, "connection"):
                HTTPBytes.forEachToken(p, value) { token in
                    if HTTPBytes.equalsCaseInsensitive(p, token, "close") { close = true }
                    else if HTTPBytes.equalsCaseInsensitive(p, token, "keep-alive") { keepAliveToken = true }
                    else if HTTPBytes.equalsCaseInsensitive(p, token, "upgrade") { upgradeToken = true }
                }
            case 14 where HTTPBytes.equalsCaseInsensitive(p, name, "content-length"):
                let n = try ContentLengthValue.parse(p, value)
                if contentLength >= 0 && contentLength != n { throw .bad("differing Content-Length values") }
                contentLength = n
            case 17 where HTTPBytes.equalsCaseInsensitive(p, name, "transfer-encoding"):
                codings.add(p, value)
            default:
                break
            }
        }

        let http11 = head.version == .http11
        // Every 400 (framing first, then Host) before 501, 413 and 417, so the status does not depend
        // on which of several problems a request has.
        if codings.present {
            if !http11 { throw .bad("Transfer-Encoding in an HTTP/1.0 request") }
            if contentLength >= 0 { throw .bad("Content-Length and Transfer-Encoding together") }
            try codings.checkStructure()
        }
        // Host (RFC 9112 §3.2): exactly one on HTTP/1.1, at most one on HTTP/1.0, always valid.
        if hostCount > 1 { throw .bad("more than one Host field") }
        if let host = head.host {
            if !HostSyntax.isValid(p, host) { throw .bad("invalid Host") }
        } else if http11 {
            throw .bad("missing Host")
        }
        if codings.present {
            try codings.checkSupported()
            head.framing = .chunked
        } else if contentLength >= 0 {
            if contentLength > limits.maxBodyBytes { throw HTTPParseError(status: 413, reason: "request body too large") }
            head.framing = .contentLength(contentLength)
        } else {
            head.framing = .none
        }

        head.keepAlive = http11 ? !close : (keepAliveToken && !close)
        // The one decision on a request's kind that authentication and forwarding both follow:
        // only a WebSocket opening handshake (RFC 6455 §4.1: an HTTP/1.1 GET whose Connection
        // lists upgrade and whose Upgrade lists websocket) carrying no body is decided on its
        // head and may become a tunnel. Anything else with an Upgrade field (h2c, a POST, a
        // body) is a plain request: its Upgrade is dropped and a body credential is read.
        let bodiless = head.framing == .none || head.framing == .contentLength(0)
        head.webSocketUpgrade = http11 && head.method == .get && upgradeToken && upgradeWebSocket && bodiless
        head.expectContinue = false
        if let expectation {
            guard HTTPBytes.equalsCaseInsensitive(p, expectation, "100-continue") else {
                throw HTTPParseError(status: 417, reason: "unsupported expectation")
            }
            head.expectContinue = http11
        }
    }
}
