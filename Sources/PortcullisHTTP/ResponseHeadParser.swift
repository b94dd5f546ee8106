/// Parses an upstream's response head (RFC 9112 §4) with the same strict field rules as requests.
/// Every failure is reported with status 502: the gateway answers the client Bad Gateway and
/// drops the upstream connection. Same feeding contract and threading as ``RequestHeadParser``.
public struct ResponseHeadParser: Sendable {
    public let limits: HTTPLimits
    private var scanner = HeadScanner()

    public init(limits: HTTPLimits = .default) {
        self.limits = limits
    }

    /// Forgets the scan position; call it before parsing the next response on a connection.
    /// (The parser also resets itself after `.complete` and `.failure`.)
    public mutating func reset() {
        scanner.reset()
    }

    /// Parses `bytes` (starting at the response's first byte) into `head`. `requestMethod` is the
    /// method of the request this answers (HEAD and CONNECT change the framing). A 1xx head is
    /// returned like any other; the caller then parses the next head after `headLength`.
    public mutating func parse(
        _ bytes: UnsafeRawBufferPointer, requestMethod: HTTPMethod, into head: inout ResponseHead
    ) -> ParseStatus {
        switch scanner.scan(bytes, limits: limits) {
        case .incomplete:
            return .incomplete
        case .failure(let error):
            return .failure(error.asUpstreamError)
        case .complete(let scanned):
            do {
                try Self.interpret(bytes, scanned, requestMethod, into: &head)
                return .complete
            } catch {
                return .failure(error.asUpstreamError)
            }
        }
    }

    private static func interpret(
        _ p: UnsafeRawBufferPointer, _ scanned: HeadScanner.Head, _ method: HTTPMethod, into head: inout ResponseHead
    ) throws(HTTPParseError) {
        try parseStatusLine(p, scanned.startLine, into: &head)
        head.headLength = scanned.headLength
        head.fields.removeAll(keepingCapacity: true)

        var contentLength = -1
        var codings = TransferCodings()
        var close = false, keepAliveToken = false
        var line = scanned.fieldLines.lowerBound
        let fieldsEnd = scanned.fieldLines.upperBound
        while line < fieldsEnd {
            let (field, lineEnd) = try FieldLine.parse(p, line, fieldsEnd)
            line = lineEnd &+ 2
            head.fields.append(field)
            let name = field.name, value = field.value
            switch name.count {
            case 10 where HTTPBytes.equalsCaseInsensitive(p, name, "connection"):
                HTTPBytes.forEachToken(p, value) { token in
                    if HTTPBytes.equalsCaseInsensitive(p, token, "close") { close = true }
                    else if HTTPBytes.equalsCaseInsensitive(p, token, "keep-alive") { keepAliveToken = true }
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

        head.keepAlive = head.version == .http11 ? !close : (keepAliveToken && !close)
        // Even when the status means "no body", ambiguous framing says the upstream is confused: refuse it.
        if codings.present {
            if contentLength >= 0 { throw .bad("Content-Length and Transfer-Encoding together") }
            if codings.malformed || codings.chunkedCount > 1 { throw .bad("malformed Transfer-Encoding") }
        }
        let status = head.status
        if method == .head || status < 200 || status == 204 || status == 304
            || (method == .connect && status < 300) {
            head.framing = .none
        } else if codings.present {
            head.framing = codings.finalIsChunked ? .chunked : .untilClose
        } else if contentLength >= 0 {
            head.framing = .contentLength(contentLength)
        } else {
            head.framing = .untilClose
        }
        if head.framing == .untilClose { head.keepAlive = false }
    }

    /// `HTTP-version SP 3DIGIT SP reason-phrase`; the SP before an empty reason may be missing
    /// (a common upstream shortcut that is harmless to accept).
    private static func parseStatusLine(
        _ p: UnsafeRawBufferPointer, _ line: Range<Int>, into head: inout ResponseHead
    ) throws(HTTPParseError) {
        let s = line.lowerBound, end = line.upperBound
        guard line.count >= 12, p[s &+ 8] == ByteClass.sp else { throw .bad("malformed status line") }
        head.version = try RequestLine.parseVersion(p, s..<(s &+ 8))
        var status = 0
        for i in (s &+ 9)..<(s &+ 12) {
            guard ByteClass.isDigit(p[i]) else { throw .bad("invalid status code") }
            status = status &* 10 &+ Int(p[i] &- 0x30)
        }
        guard status >= 100 && status <= 599 else { throw .bad("invalid status code") }
        head.status = status
        var i = s &+ 12
        if i < end {
            guard p[i] == ByteClass.sp else { throw .bad("invalid status code") }
            i &+= 1
        }
        head.reasonRange = i..<end
        while i < end {
            guard ByteClass.isFieldValueByte(p[i]) else { throw .bad("control character in reason phrase") }
            i &+= 1
        }
    }
}
