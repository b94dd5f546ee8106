import CNGHTTP2
import PortcullisCore
import PortcullisHTTP
import PortcullisIO

/// One HTTP/2 request stream: it collects the decoded fields into one buffer (split
/// `cookie` fields joined with "; ", RFC 9113 §8.2.3), hands the request to its `Exchange`
/// as a `RequestView` (the same routing, auth and forwarding as HTTP/1.1), streams the
/// request body to it as the upstream takes bytes, and is the exchange's responder:
/// the response head becomes a HEADERS frame, the body DATA frames.
///
/// Flow control both ways: request bytes are acknowledged to the client (WINDOW_UPDATE)
/// only when the exchange took them; response bytes wait here while the client's window
/// is closed, and past 64 KiB the upstream is paused until they left.
///
/// Streams are reused by their connection (a few spares), so a request allocates nothing
/// once its buffers have grown. Threading: the connection's loop queue.
///
/// Ownership: the connection holds its open and spare streams; a stream holds its
/// connection and its exchange, and the exchange holds the stream. When the connection
/// lets go of a stream for good it calls `discard()`, which breaks the stream–exchange
/// cycle; the stream–connection one ends with the connection's collections.
final class HTTP2Stream: ExchangeResponder, @unchecked Sendable {
    // @unchecked Sendable: confined to the loop queue (see type comment).

    let connection: HTTP2ServerConnection
    private(set) var id: Int32 = 0
    private var exchange: Exchange!

    // The request's fields: names and values back to back; ranges are offsets into `head`.
    private var head = ByteBuffer()
    private var fields: [HTTPHeaderField] = []
    private var method: Range<Int>?
    private var path: Range<Int>?
    private var authority: Range<Int>?
    private var hostField: Range<Int>?
    private var contentLength: Int?
    private var cookies = ByteBuffer()
    private var headerListSize = 0
    private var headersTooLarge = false

    // The request body.
    private var endStreamReceived = false
    private var bodyFlowing = false
    private var bodyEndSignalled = false
    /// Request body bytes received so far (against `max_body_bytes`, whatever the framing).
    private var bodyReceived = 0
    /// Request body bytes handed to the exchange.
    private var bodyDelivered = 0
    private var inBody = ByteBuffer()
    /// `content-length: 0` without END_STREAM: the head waits for END_STREAM (see
    /// `headersComplete`).
    private var headWaitsForEndStream = false

    // The response.
    private var responseSubmitted = false
    private var responseEnded = false
    private var outBody = ByteBuffer()
    private var dataDeferred = false
    private var upstreamPaused = false

    // After a response that came before the whole request body: the rest is read and dropped
    // (bounded) instead of resetting the stream at once (see `responseSent`).
    /// When reading the rest gives up with RST_STREAM NO_ERROR (0: not reading it).
    private var drainUntil: UInt64 = 0
    private var drained = 0
    private static let drainLimit = 256 * 1024
    private static let drainTime: UInt64 = 2_000_000_000

    // Deadlines (see `deadline`).
    private var lastBodyAt: UInt64 = 0
    private var lastSentAt: UInt64 = 0

    /// Response bytes held past this pause the upstream.
    private static let highWater = 64 * 1024

    init(connection: HTTP2ServerConnection) {
        self.connection = connection
        exchange = Exchange(context: connection.context, responder: self, peer: connection.peer, transport: connection.transport,
                            secure: connection.socket.security != nil)
    }

    private var loop: EventLoop { connection.context.loop }
    private var session: OpaquePointer? { connection.session }

    func open(id: Int32) {
        self.id = id
        head.clear()
        fields.removeAll(keepingCapacity: true)
        method = nil
        path = nil
        authority = nil
        hostField = nil
        contentLength = nil
        cookies.clear()
        headerListSize = 0
        headersTooLarge = false
        endStreamReceived = false
        bodyFlowing = false
        bodyEndSignalled = false
        bodyReceived = 0
        bodyDelivered = 0
        headWaitsForEndStream = false
        inBody.clear()
        responseSubmitted = false
        responseEnded = false
        outBody.clear()
        dataDeferred = false
        upstreamPaused = false
        drainUntil = 0
        drained = 0
        lastBodyAt = loop.lastNow
        lastSentAt = 0
    }

    // MARK: The request head

    /// One decoded field. Returns 0, or an nghttp2 error code that ends the connection.
    func field(_ name: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer, trailer: Bool) -> Int32 {
        if trailer { return 0 }  // request trailers never reach an upstream (as on HTTP/1.1)
        headerListSize += name.count + value.count + 32
        let limit = connection.settings.maxHeaderListSize
        if headerListSize > limit {
            if headerListSize > 4 * limit {
                // Far past what was advertised: an HPACK bomb or a header flood.
                connection.abused(.oversizedHeaders)
                return HTTP2Callbacks.callbackFailure
            }
            headersTooLarge = true
            return 0
        }
        if headersTooLarge { return 0 }
        if name.first == UInt8(ascii: ":") {
            let range = append(value)
            switch name.count {
            case 5 where HTTPBytes.equals(name, ":path"): path = range
            case 7 where HTTPBytes.equals(name, ":method"): method = range
            case 10 where HTTPBytes.equals(name, ":authority"): authority = range
            default: break  // :scheme (the listener decides X-Forwarded-Proto)
            }
            return 0
        }
        if name.count == 6 && HTTPBytes.equals(name, "cookie") {
            if !cookies.isEmpty { cookies.append("; ") }
            cookies.append(value)
            return 0
        }
        let nameRange = append(name)
        let valueRange = append(value)
        fields.append(HTTPHeaderField(name: nameRange, value: valueRange))
        if name.count == 4 && HTTPBytes.equals(name, "host") { hostField = valueRange }
        if name.count == 14 && HTTPBytes.equals(name, "content-length") { contentLength = Self.decimal(value) }
        return 0
    }

    private func append(_ bytes: UnsafeRawBufferPointer) -> Range<Int> {
        let start = head.readableBytes
        head.append(bytes)
        return start..<head.readableBytes
    }

    /// nghttp2 checked the value is digits only (and matches the DATA it will count).
    private static func decimal(_ bytes: UnsafeRawBufferPointer) -> Int? {
        guard !bytes.isEmpty, bytes.count <= 18 else { return nil }
        var n = 0
        for byte in bytes {
            guard byte >= 48 && byte <= 57 else { return nil }
            n = n * 10 + Int(byte - 48)
        }
        return n
    }

    /// The header block ended: the request goes to its exchange.
    ///
    /// A request's `content-length` is believed only once END_STREAM confirms it (RFC 9113
    /// §8.1.1: DATA that contradicts it makes the request malformed, a stream error nghttp2
    /// raises): with `content-length: 0` and no END_STREAM the head waits here for it, and
    /// with a longer body the last byte waits (`deliverableBodyBytes`), so an upstream never
    /// holds a complete request the client then contradicts.
    func headersComplete(endStream: Bool) {
        if endStream { endStreamReceived = true }
        if contentLength == 0 && !endStreamReceived {
            headWaitsForEndStream = true
            lastBodyAt = loop.lastNow
            return
        }
        if !cookies.isEmpty {
            let name = append(UnsafeRawBufferPointer(start: Self.cookieName.utf8Start, count: 6))
            let value = append(cookies.readable)
            fields.append(HTTPHeaderField(name: name, value: value))
        }
        let bytes = head.readable
        if let method, HTTPMethod.recognise(bytes, method) == .connect {
            // CONNECT carries no :path (RFC 9113 §8.5): refused as on HTTP/1.1, before the
            // checks that need one.
            exchange.begin(method: .connect, methodBytes: UnsafeRawBufferPointer(rebasing: bytes[method]),
                           transport: connection.transport)
            exchange.reject(.error(405, "CONNECT is not supported"))
            return
        }
        guard let method, let path else {
            // nghttp2 requires both for every method but CONNECT (refused above); the
            // exchange opens itself for an answer to what never became a request.
            exchange.reject(.error(headersTooLarge ? 431 : 400,
                                   headersTooLarge ? "request header fields too large" : "request without :method or :path"))
            return
        }
        // `:authority` and `host` are read as HTTP/1.1's Host is (`Authority`); an invalid one,
        // or two that name different hosts (RFC 9113 §8.3.1), make the request malformed: a
        // stream error, never routed by one while the upstream reads the other.
        if !Self.authorityIsSound(bytes, authority, hostField) {
            guard connection.allow(.protocolErrors) else { return }
            connection.resetStream(id, NGHTTP2_PROTOCOL_ERROR.rawValue)
            connection.outputQueued()
            return
        }
        let methodBytes = UnsafeRawBufferPointer(rebasing: bytes[method])
        let httpMethod = HTTPMethod.recognise(bytes, method)
        exchange.begin(method: httpMethod, methodBytes: methodBytes, transport: connection.transport)
        if headersTooLarge {
            guard connection.allow(.oversizedHeaders) else { return }
            exchange.reject(.error(431, "request header fields too large"))
            return
        }
        let target = UnsafeRawBufferPointer(rebasing: bytes[path])
        if target.count == 1 && target[0] == UInt8(ascii: "*") {
            exchange.reject(.error(400, "asterisk-form target is not routable"))
            return
        }
        let normalized: NormalizedTarget
        switch TargetNormalizer.normalize(target, form: .origin) {
        case .success(let n): normalized = n
        case .failure(let error):
            exchange.reject(.error(error.status, error.reason))
            return
        }
        let framing: BodyFraming
        if let contentLength { framing = .contentLength(contentLength) }
        else if endStreamReceived { framing = .none }
        else { framing = .chunked }  // a body of unknown length: chunked to the upstream
        if case .contentLength(let n) = framing, n > exchange.serving.configuration.limits.maxBodyBytes {
            exchange.reject(.error(413, "request body too large"))
            return
        }
        let view = RequestView(bytes: bytes, method: httpMethod, methodRange: method, target: path,
                               authority: authority ?? hostField, fields: fields, framing: framing,
                               webSocketUpgrade: false, transport: connection.transport,
                               path: normalized.path, query: normalized.query, peer: connection.peer, loop: loop)
        exchange.start(view)
    }

    private static let cookieName: StaticString = "cookie"

    private static func authorityIsSound(_ bytes: UnsafeRawBufferPointer, _ authority: Range<Int>?, _ host: Range<Int>?) -> Bool {
        var first: Authority.Parts?
        if let authority {
            guard let parts = Authority.scan(bytes, authority) else { return false }
            first = parts
        }
        if let host {
            guard let parts = Authority.scan(bytes, host) else { return false }
            if let first, !Authority.same(bytes, first, bytes, parts) { return false }
        }
        return true
    }

    // MARK: The request body

    func receiveBody(_ bytes: UnsafeRawBufferPointer) {
        lastBodyAt = loop.lastNow
        guard exchange.isActive, !responseEnded else {
            consume(bytes.count)  // nobody wants it: the window reopens at once
            if drainUntil != 0 {
                drained += bytes.count
                if drained > Self.drainLimit { stopDraining() }
            }
            return
        }
        bodyReceived += bytes.count
        if bodyReceived > exchange.serving.configuration.limits.maxBodyBytes {
            consume(bytes.count)
            exchange.reject(.error(413, "request body too large"))
            return
        }
        if bodyFlowing && inBody.isEmpty && exchange.canTakeRequestBody && deliverableBodyBytes(bytes.count) == bytes.count {
            exchange.requestBody(bytes)
            bodyDelivered += bytes.count
            consume(bytes.count)
        } else {
            inBody.append(bytes)  // bounded by the stream's window: not acknowledged yet
        }
    }

    /// END_STREAM arrived (on DATA, on HEADERS, or on trailers).
    func requestEnded() {
        endStreamReceived = true
        drainUntil = 0  // both sides are done: the stream closes by itself
        if headWaitsForEndStream {
            headWaitsForEndStream = false
            headersComplete(endStream: true)
            return
        }
        if bodyFlowing { deliverBody() }
    }

    /// How many of `available` buffered body bytes may go to the exchange now: all, except
    /// that the byte completing a declared `content-length` waits for END_STREAM.
    private func deliverableBodyBytes(_ available: Int) -> Int {
        guard let contentLength, !endStreamReceived else { return available }
        return max(0, min(available, contentLength - 1 - bodyDelivered))
    }

    private func deliverBody() {
        while !inBody.isEmpty && exchange.isActive && exchange.canTakeRequestBody {
            let buffered = inBody.readableBytes
            let n = deliverableBodyBytes(buffered)
            if n == 0 { break }
            exchange.requestBody(UnsafeRawBufferPointer(rebasing: inBody.readable[0..<n]))
            guard inBody.readableBytes == buffered else { break }  // the stream ended meanwhile: nothing left to take
            inBody.consume(n)
            bodyDelivered += n
            consume(n)
        }
        if inBody.isEmpty { inBody.releaseIfEmpty() }
        if endStreamReceived && inBody.isEmpty && bodyFlowing && !bodyEndSignalled && exchange.isActive {
            bodyEndSignalled = true
            exchange.requestBodyEnded()  // a decision on the body may wait for keys (the exchange's deadline)
        }
        connection.outputQueued()  // WINDOW_UPDATEs
    }

    /// Acknowledges `count` request bytes (WINDOW_UPDATE once enough accumulated).
    private func consume(_ count: Int) {
        guard let session, count > 0 else { return }
        if nghttp2_session_consume(session, id, count) != 0 {
            _ = nghttp2_session_consume_connection(session, count)
        }
    }

    // MARK: ExchangeResponder: the request side

    func forwardingStarts(_ exchange: Exchange) {
        bodyFlowing = true
        deliverBody()
    }

    func localBodyStarts(_ exchange: Exchange) {
        bodyFlowing = true
        deliverBody()
    }

    func requestBodyCanContinue() {
        if bodyFlowing { deliverBody() }
    }

    // MARK: ExchangeResponder: the response side

    func sendResponseHead(_ bytes: UnsafeRawBufferPointer, _ response: ResponseHead, decodeChunked: Bool) {
        let bodyless = exchange.method == .head || response.status == 204 || response.status == 304
            || response.framing == .none || response.framing == .contentLength(0)
        var builder = HTTP2HeaderBlock(connection: connection)
        builder.status(response.status)
        // Connection-specific fields have no place in HTTP/2 (RFC 9113 §8.2.2).
        for field in response.fields where HeaderPolicy.responseField(bytes, field.name) == .endToEnd {
            builder.field(lowercasing: UnsafeRawBufferPointer(rebasing: bytes[field.name]),
                          UnsafeRawBufferPointer(rebasing: bytes[field.value]))
        }
        submit(builder, hasBody: !bodyless)
        if bodyless { responseEnded = true }
    }

    func sendResponseBody(_ bytes: UnsafeRawBufferPointer) {
        // A response that ended on its HEADERS (HEAD, 204, 304) takes no body.
        guard responseSubmitted, !responseEnded, !bytes.isEmpty else { return }
        if outBody.isEmpty { lastSentAt = loop.lastNow }
        outBody.append(bytes)
        resumeData()
        if outBody.readableBytes >= Self.highWater && !upstreamPaused {
            upstreamPaused = true
            exchange.pauseResponse()
        }
        connection.outputQueued()
    }

    func sendLocalResponse(_ response: LocalResponse, requestId: UnsafeRawBufferPointer) {
        let hasBody = !response.body.isEmpty && exchange.method != .head
        var builder = HTTP2HeaderBlock(connection: connection)
        builder.status(response.status)
        builder.field("content-type", response.contentType)
        builder.field("content-length", String(response.body.count))
        for (name, value) in response.headers { builder.field(name.lowercased(), value) }
        if !requestId.isEmpty {
            builder.field(lowercasing: UnsafeRawBufferPointer(start: Self.requestIdName.utf8Start, count: 12), requestId)
        }
        if hasBody {
            response.body.withUnsafeBytes { outBody.append($0) }
            lastSentAt = loop.lastNow
        }
        submit(builder, hasBody: hasBody)
        responseEnded = true
    }
    private static let requestIdName: StaticString = "x-request-id"

    private func submit(_ builder: consuming HTTP2HeaderBlock, hasBody: Bool) {
        guard let session, !responseSubmitted else { return }
        responseSubmitted = true
        let rv: Int32 = builder.withFields { nva, count in
            if hasBody {
                var provider = nghttp2_data_provider(source: nghttp2_data_source(ptr: nil), read_callback: HTTP2Callbacks.readBody)
                return nghttp2_submit_response(session, id, nva, count, &provider)
            }
            return nghttp2_submit_response(session, id, nva, count, nil)
        }
        if rv != 0 { connection.resetStream(id, NGHTTP2_INTERNAL_ERROR.rawValue) }
        connection.outputQueued()
    }

    private func resumeData() {
        guard dataDeferred, let session else { return }
        dataDeferred = false
        _ = nghttp2_session_resume_data(session, id)
    }

    /// nghttp2 asks for the next DATA frame's bytes.
    func readBody(into buffer: UnsafeMutableRawBufferPointer, flags: UnsafeMutablePointer<UInt32>) -> Int {
        let n = min(buffer.count, outBody.readableBytes)
        if n > 0 {
            buffer.copyMemory(from: UnsafeRawBufferPointer(rebasing: outBody.readable[0..<n]))
            outBody.consume(n)
            lastSentAt = loop.lastNow
        }
        if outBody.isEmpty {
            outBody.releaseIfEmpty(keepingUpTo: 16 * 1024)
            if responseEnded {
                flags.pointee |= NGHTTP2_DATA_FLAG_EOF.rawValue
            } else if n == 0 {
                dataDeferred = true
                return Int(NGHTTP2_ERR_DEFERRED.rawValue)
            }
            if upstreamPaused {
                upstreamPaused = false
                if exchange.isActive { exchange.resumeResponse() }
            }
        }
        return n
    }

    func exchangeFinished() {
        responseEnded = true
        resumeData()
        connection.outputQueued()
    }

    /// The response's last frame left while the request body is still coming. RFC 9113 §8.1
    /// allows RST_STREAM NO_ERROR now, but clients that read the reset before the response
    /// lose it (curl with nghttp2 1.52 exits 92 without the 401 in most tries, and iOS apps
    /// act on that 401). So the rest of the body is read and dropped, its window kept open,
    /// up to `drainLimit` bytes and `drainTime`; past either, the stream is reset NO_ERROR.
    func responseSent() {
        guard !endStreamReceived else { return }
        drainUntil = loop.lastNow &+ Self.drainTime
        drained = 0
    }

    private func stopDraining() {
        drainUntil = 0
        connection.resetStream(id, NGHTTP2_NO_ERROR.rawValue)
        connection.outputQueued()
    }

    func abortExchange() { reset(NGHTTP2_INTERNAL_ERROR.rawValue) }

    func tunnelEnded() { reset(NGHTTP2_INTERNAL_ERROR.rawValue) }

    private func reset(_ code: UInt32) {
        outBody.clear()
        connection.resetStream(id, code)
        connection.outputQueued()
    }

    var decodesChunkedResponses: Bool { true }
    var isBackedUp: Bool { outBody.readableBytes >= Self.highWater }
    // Output already leaves once per loop pass (`HTTP2ServerConnection.outputQueued`),
    // which covers an upstream read pass: nothing to gather here.
    func corkOutput() {}
    func uncorkOutput() {}

    // MARK: Deadlines (checked by the connection, which the loop's ticker visits)

    /// The exchange's wait (an authentication, a pooled connection) while there is one;
    /// else the stream's own: the client's window (send timeout) or its body (body timeout).
    var deadline: UInt64 {
        let sendTimeout = UInt64(connection.settings.sendTimeout * 1e9)
        if headWaitsForEndStream { return lastBodyAt &+ UInt64(exchange.serving.configuration.timeouts.body * 1e9) }
        guard exchange.isActive else {
            let sending = outBody.isEmpty ? 0 : lastSentAt &+ sendTimeout
            return drainUntil != 0 && (sending == 0 || drainUntil < sending) ? drainUntil : sending
        }
        let waiting = exchange.deadline
        if waiting != 0 { return waiting }
        if !outBody.isEmpty { return lastSentAt &+ sendTimeout }
        if bodyFlowing && !endStreamReceived && inBody.isEmpty {
            return lastBodyAt &+ UInt64(exchange.serving.configuration.timeouts.body * 1e9)
        }
        return 0
    }

    func deadlineExpired(now: UInt64) {
        if headWaitsForEndStream {
            // `content-length: 0` and END_STREAM never came within the body timeout.
            headWaitsForEndStream = false
            reset(NGHTTP2_CANCEL.rawValue)
            return
        }
        if drainUntil != 0 && drainUntil <= now {
            stopDraining()
            return
        }
        let waiting = exchange.deadline
        if waiting != 0 {
            if waiting <= now { exchange.deadlineExpired(now: now) }
            return
        }
        if !outBody.isEmpty {
            // The client left this stream's window (or the connection's) closed for
            // `send_timeout`: the stream is reset, the connection too when its window is shut.
            if let session, nghttp2_session_get_remote_window_size(session) <= 0 {
                connection.abused(.stalledWindow)
                return
            }
            exchange.cancel()
            reset(NGHTTP2_CANCEL.rawValue)
            return
        }
        if exchange.isActive && bodyFlowing && !endStreamReceived {
            exchange.reject(.error(408, "request body not received in time"))
        }
    }

    /// The connection lets go of this stream for good (closed, or a spare it trims): the
    /// exchange ends and lets go of the stream.
    func discard() {
        closed()
        exchange.responderClosed()
    }

    /// nghttp2 closed the stream (both sides done, or a reset either way).
    func closed() {
        if exchange.isActive { exchange.cancel() }
        drainUntil = 0
        id = 0
        // A stream object serves the connection's next streams: small buffers are kept for
        // them (a response body's first 1 KiB buffer was allocated and freed per stream).
        head.clear()
        head.releaseIfEmpty(keepingUpTo: 2048)
        inBody.clear()
        inBody.releaseIfEmpty()
        outBody.clear()
        outBody.releaseIfEmpty(keepingUpTo: 2048)
        cookies.clear()
        cookies.releaseIfEmpty(keepingUpTo: 1024)
    }
}

/// A HEADERS block being built for nghttp2: the bytes in the loop's head scratch,
/// lower-cased names, then the `nghttp2_nv` array over them (nghttp2 copies both when
/// the response is submitted).
struct HTTP2HeaderBlock: ~Copyable {
    private var bytes = ByteBuffer()
    private var ranges: [(name: Range<Int>, value: Range<Int>)] = []
    private let connection: HTTP2ServerConnection

    init(connection: HTTP2ServerConnection) {
        self.connection = connection
        swap(&bytes, &connection.context.loop.headScratch)
        bytes.clear()
        swap(&ranges, &connection.rangeScratch)
        ranges.removeAll(keepingCapacity: true)
    }

    mutating func status(_ code: Int) {
        let name = bytes.readableBytes
        bytes.append(":status")
        let value = bytes.readableBytes
        bytes.appendDecimal(code)
        ranges.append((name..<value, value..<bytes.readableBytes))
    }

    mutating func field(lowercasing name: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer) {
        let start = bytes.readableBytes
        bytes.appendLowercased(name)
        let valueStart = bytes.readableBytes
        bytes.append(value)
        ranges.append((start..<valueStart, valueStart..<bytes.readableBytes))
    }

    mutating func field(_ name: String, _ value: String) {
        let start = bytes.readableBytes
        bytes.append(name)
        let valueStart = bytes.readableBytes
        bytes.append(value)
        ranges.append((start..<valueStart, valueStart..<bytes.readableBytes))
    }

    /// Calls `body` with the fields as `nghttp2_nv`s (nghttp2 copies them), then gives the
    /// scratch storage back to the loop and the connection.
    consuming func withFields(_ body: (UnsafePointer<nghttp2_nv>, Int) -> Int32) -> Int32 {
        let connection = self.connection  // a local: no access to `self` overlaps the swaps below
        var nva: [nghttp2_nv] = []
        swap(&nva, &connection.nvScratch)
        defer {
            nva.removeAll(keepingCapacity: true)
            swap(&nva, &connection.nvScratch)
            ranges.removeAll(keepingCapacity: true)
            swap(&ranges, &connection.rangeScratch)
            bytes.clear()
            swap(&bytes, &connection.context.loop.headScratch)
        }
        let base = UnsafeMutablePointer(mutating: bytes.readable.baseAddress!.assumingMemoryBound(to: UInt8.self))
        for range in ranges {
            nva.append(nghttp2_nv(name: base + range.name.lowerBound, value: base + range.value.lowerBound,
                                  namelen: range.name.count, valuelen: range.value.count, flags: UInt8(NGHTTP2_NV_FLAG_NONE.rawValue)))
        }
        return nva.withUnsafeBufferPointer { body($0.baseAddress!, $0.count) }
    }
}
