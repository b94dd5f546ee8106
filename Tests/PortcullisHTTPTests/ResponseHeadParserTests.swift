import Testing
@testable import PortcullisHTTP

@Suite("Response head parser")
struct ResponseHeadParserTests {
    @Test func statusLineWithReason() {
        let (status, head, raw) = parseResponse("HTTP/1.1 200 OK\r\nContent-Length: 12\r\n\r\n")
        #expect(status == .complete)
        #expect(head.status == 200)
        #expect(head.version == .http11)
        #expect(text(raw, head.reasonRange) == "OK")
        #expect(head.framing == .contentLength(12))
        #expect(head.keepAlive)
        #expect(head.headLength == raw.count)
    }

    @Test func statusLineWithoutReason() {
        #expect(parseResponse("HTTP/1.1 204 \r\n\r\n").1.status == 204)
        #expect(parseResponse("HTTP/1.1 204\r\n\r\n").0 == .complete)
    }

    @Test func reasonWithSpaces() {
        let (_, head, raw) = parseResponse("HTTP/1.0 404 Not Found Here\r\n\r\n")
        #expect(text(raw, head.reasonRange) == "Not Found Here")
        #expect(head.version == .http10)
        #expect(!head.keepAlive)
    }

    @Test(arguments: [
        ("HTTP/1.1 204 No Content\r\nContent-Length: 10\r\n\r\n", HTTPMethod.get),
        ("HTTP/1.1 304 Not Modified\r\nTransfer-Encoding: chunked\r\n\r\n", .get),
        ("HTTP/1.1 100 Continue\r\n\r\n", .post),
        ("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n", .get),
        ("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n", .head),
        ("HTTP/1.1 200 Connection established\r\n\r\n", .connect),
    ])
    func responsesWithoutBody(_ raw: String, _ method: HTTPMethod) {
        let (status, head, _) = parseResponse(raw, method: method)
        #expect(status == .complete)
        #expect(head.framing == .none)
    }

    @Test func chunkedResponse() {
        let (status, head, _) = parseResponse("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n")
        #expect(status == .complete)
        #expect(head.framing == .chunked)
        #expect(head.keepAlive)
    }

    @Test func transferEncodingNotEndingInChunkedReadsUntilClose() {
        let (status, head, _) = parseResponse("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n")
        #expect(status == .complete)
        #expect(head.framing == .untilClose)
        #expect(!head.keepAlive)
    }

    @Test func noLengthReadsUntilClose() {
        let (status, head, _) = parseResponse("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n")
        #expect(status == .complete)
        #expect(head.framing == .untilClose)
        #expect(!head.keepAlive)
    }

    @Test func connectionCloseFromUpstream() {
        #expect(!parseResponse("HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n").1.keepAlive)
    }

    @Test(arguments: [
        "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: abc\r\n\r\n",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, chunked\r\n\r\n",
        "HTTP/1.1 2000 OK\r\n\r\n",
        "HTTP/1.1 20 OK\r\n\r\n",
        "HTTP/1.1 099 Low\r\n\r\n",
        "HTTP/1.1 600 High\r\n\r\n",
        "HTTP/1.1 2x0 OK\r\n\r\n",
        "HTTP/1.1 200OK\r\n\r\n",
        "HTTP/2.0 200 OK\r\n\r\n",
        "http/1.1 200 OK\r\n\r\n",
        "HTTP/1.1  200 OK\r\n\r\n",
        "HTTP/1.1 200 OK\nContent-Length: 0\n\n",
        "HTTP/1.1 200 OK\r\nX: a\u{00}b\r\n\r\n",
        "HTTP/1.1 200 OK\r\nX: 1\r\n folded\r\n\r\n",
        "HTTP/1.1 200 O\u{01}K\r\n\r\n",
    ])
    func upstreamErrorsAre502(_ raw: String) {
        let (status, _, _) = parseResponse(raw)
        guard case .failure(let error) = status else { Issue.record("accepted: \(status)"); return }
        #expect(error.status == 502)
    }

    @Test func responseFedByteByByte() {
        let raw = bytes("HTTP/1.1 200 OK\r\nContent-Length: 3\r\nServer: x\r\n\r\n")
        var parser = ResponseHeadParser()
        var head = ResponseHead()
        var status = ParseStatus.incomplete
        for end in 1...raw.count where status == .incomplete {
            status = raw[0..<end].withUnsafeBytes { parser.parse($0, requestMethod: .get, into: &head) }
        }
        #expect(status == .complete)
        #expect(head.headLength == raw.count)
        #expect(head.fields.count == 2)
    }
}
