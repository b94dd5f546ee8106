import Testing
@testable import PortcullisHTTP

/// How the proxy strings the pieces together: head, then body decoder, then the next head.
@Suite("Codec pieces used together")
struct IntegrationTests {
    @Test func chunkedRequestFollowedByPipelinedRequest() {
        let raw = bytes("POST /up HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
            + "5;x=y\r\nhello\r\n0\r\nX-Sum: 1\r\n\r\n"
            + "GET /next HTTP/1.1\r\nHost: a\r\n\r\n")
        var parser = RequestHeadParser()
        var head = RequestHead()
        #expect(raw.withUnsafeBytes { parser.parse($0, into: &head) } == .complete)
        #expect(head.framing == .chunked)
        var decoder = ChunkedDecoder()
        var body: [UInt8] = []
        var consumed = 0
        let bodyStart = head.headLength
        let result = raw[bodyStart...].withUnsafeBytes { decoder.decode($0, consumed: &consumed) { body.append(contentsOf: $0) } }
        #expect(result == .done)
        #expect(String(decoding: body, as: UTF8.self) == "hello")
        let next = Array(raw[(bodyStart + consumed)...])
        parser.reset()
        #expect(next.withUnsafeBytes { parser.parse($0, into: &head) } == .complete)
        #expect(text(next, head.target) == "/next")
        #expect(head.headLength == next.count)
    }

    @Test func parsedTargetIsNormalizedForRouting() {
        let raw = bytes("GET /public/%2e%2e//admin/./users?id=1 HTTP/1.1\r\nHost: a\r\n\r\n")
        let (status, head) = parseRequest(raw)
        #expect(status == .complete)
        let normalized = raw.withUnsafeBytes {
            TargetNormalizer.normalize(UnsafeRawBufferPointer(rebasing: $0[head.target]), form: head.targetForm)
        }
        #expect(normalized == .success(NormalizedTarget(path: "/admin/users", query: "id=1")))
    }

    @Test func interimResponseThenFinalResponse() {
        let raw = bytes("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok")
        var parser = ResponseHeadParser()
        var head = ResponseHead()
        #expect(raw.withUnsafeBytes { parser.parse($0, requestMethod: .post, into: &head) } == .complete)
        #expect(head.status == 100)
        #expect(head.framing == .none)
        let rest = Array(raw[head.headLength...])
        parser.reset()
        #expect(rest.withUnsafeBytes { parser.parse($0, requestMethod: .post, into: &head) } == .complete)
        #expect(head.status == 201)
        #expect(head.framing == .contentLength(2))
        #expect(String(decoding: rest[head.headLength...], as: UTF8.self) == "ok")
    }

    @Test func shorterBufferRestartsTheScan() {
        var parser = RequestHeadParser()
        var head = RequestHead()
        let long = bytes("GET /aaaaaaaaaaaaaaaaaaaa HTTP/1.1\r\nHost: a\r\nX: 1")
        #expect(long.withUnsafeBytes { parser.parse($0, into: &head) } == .incomplete)
        let other = bytes("GET / HTTP/1.1\r\nHost: b\r\n\r\n")
        #expect(other.withUnsafeBytes { parser.parse($0, into: &head) } == .complete)
        #expect(text(other, head.host) == "b")
    }

    @Test func upgradeIsIgnoredForHTTP10() {
        let (status, head) = parseRequest(bytes("GET / HTTP/1.0\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\r\n"))
        #expect(status == .complete)
        #expect(!head.webSocketUpgrade)
    }

    @Test func defaultLimits() {
        let d = HTTPLimits.default
        #expect(d.maxRequestLineBytes == 8192 && d.maxHeaderBytes == 32768 && d.maxHeaderCount == 100)
        #expect(d.maxBodyBytes == 10 * 1024 * 1024 && d.maxChunkLineBytes == 1024 && d.maxTrailerBytes == 8192)
    }

    @Test func errorReasonsNeverEchoInput() {
        let (status, _) = parseRequest(bytes("GET /<script> HTTP/1.1\r\nHost: a\r\nX: \u{01}<script>\r\n\r\n"))
        guard case .failure(let error) = status else { Issue.record("accepted"); return }
        #expect(!error.reason.contains("script"))
    }
}
