import Testing
@testable import PortcullisHTTP

@Suite("Request head parser: valid requests")
struct RequestHeadParserTests {
    @Test func simpleGetWithHost() {
        let raw = bytes("GET /index.html?x=1 HTTP/1.1\r\nHost: example.com\r\nAccept: */*\r\n\r\n")
        let (status, head) = parseRequest(raw)
        #expect(status == .complete)
        #expect(head.method == .get)
        #expect(text(raw, head.methodRange) == "GET")
        #expect(text(raw, head.target) == "/index.html?x=1")
        #expect(head.targetForm == .origin)
        #expect(head.version == .http11)
        #expect(text(raw, head.host) == "example.com")
        #expect(head.fields.count == 2)
        #expect(text(raw, head.fields[1].name) == "Accept")
        #expect(text(raw, head.fields[1].value) == "*/*")
        #expect(head.headLength == raw.count)
        #expect(head.framing == .none)
        #expect(head.keepAlive)
        #expect(!head.expectContinue)
        #expect(!head.webSocketUpgrade)
    }

    @Test func fieldValueIsTrimmedOfOptionalWhitespace() {
        let raw = bytes("GET / HTTP/1.1\r\nHost:\t h \t\r\nX-Empty:\r\n\r\n")
        let (status, head) = parseRequest(raw)
        #expect(status == .complete)
        #expect(text(raw, head.host) == "h")
        #expect(head.fields[1].value.isEmpty)
    }

    @Test func http11DefaultsToKeepAlive() {
        #expect(parseRequest(bytes("GET / HTTP/1.1\r\nHost: a\r\n\r\n")).1.keepAlive)
    }

    @Test func http11ConnectionCloseDisablesKeepAlive() {
        #expect(!parseRequest(bytes("GET / HTTP/1.1\r\nHost: a\r\nConnection: Close\r\n\r\n")).1.keepAlive)
    }

    @Test func http10DefaultsToClose() {
        let (status, head) = parseRequest(bytes("GET / HTTP/1.0\r\n\r\n"))
        #expect(status == .complete)
        #expect(head.version == .http10)
        #expect(!head.keepAlive)
        #expect(head.host == nil)
    }

    @Test func http10KeepAliveWhenAsked() {
        #expect(parseRequest(bytes("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")).1.keepAlive)
    }

    @Test func pipelinedRequestsAreFoundThroughHeadLength() {
        let first = "GET /one HTTP/1.1\r\nHost: a\r\n\r\n"
        let second = "POST /two HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabc"
        let raw = bytes(first + second)
        var parser = RequestHeadParser()
        var head = RequestHead()
        #expect(raw.withUnsafeBytes { parser.parse($0, into: &head) } == .complete)
        #expect(head.headLength == first.utf8.count)
        parser.reset()
        let rest = Array(raw[head.headLength...])
        #expect(rest.withUnsafeBytes { parser.parse($0, into: &head) } == .complete)
        #expect(head.method == .post)
        #expect(text(rest, head.target) == "/two")
        #expect(head.framing == .contentLength(3))
        #expect(String(decoding: rest[head.headLength...], as: UTF8.self) == "abc")
    }

    @Test func byteAtATimeGivesTheSameResult() {
        let raw = bytes("\r\nPUT /x HTTP/1.1\r\nHost: h:8080\r\nContent-Length: 10\r\nX-A: b\r\n\r\n")
        let (whole, wholeHead) = parseRequest(raw)
        let (slow, slowHead) = parseRequestByteByByte(raw)
        #expect(whole == .complete)
        #expect(slow == .complete)
        #expect(slowHead.headLength == wholeHead.headLength)
        #expect(slowHead.headLength == raw.count)
        #expect(slowHead.fields == wholeHead.fields)
        #expect(slowHead.framing == .contentLength(10))
        #expect(slowHead.target == wholeHead.target)
    }

    @Test func incompleteHeadAsksForMore() {
        #expect(parseRequest(bytes("GET / HTTP/1.1\r\nHost: a\r\n")).0 == .incomplete)
        #expect(parseRequest(bytes("GET / HTTP/1.1\r\nHost: a\r\n\r")).0 == .incomplete)
    }

    @Test func absoluteFormAuthorityIsReported() {
        let raw = bytes("GET http://upstream.example:8080/a/b?q=1 HTTP/1.1\r\nHost: other\r\n\r\n")
        let (status, head) = parseRequest(raw)
        #expect(status == .complete)
        #expect(head.targetForm == .absolute)
        #expect(text(raw, head.absoluteAuthority) == "upstream.example:8080")
        #expect(text(raw, head.host) == "other")
    }

    @Test func absoluteFormWithoutPath() {
        let raw = bytes("GET HTTPS://h HTTP/1.1\r\nHost: h\r\n\r\n")
        let (status, head) = parseRequest(raw)
        #expect(status == .complete)
        #expect(text(raw, head.absoluteAuthority) == "h")
    }

    @Test func optionsAsterisk() {
        let (status, head) = parseRequest(bytes("OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n"))
        #expect(status == .complete)
        #expect(head.method == .options)
        #expect(head.targetForm == .asterisk)
    }

    @Test func connectIsReportedWithAuthorityForm() {
        let raw = bytes("CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n")
        let (status, head) = parseRequest(raw)
        #expect(status == .complete)
        #expect(head.method == .connect)
        #expect(head.targetForm == .authority)
        #expect(text(raw, head.target) == "example.com:443")
    }

    @Test func expectContinue() {
        let (status, head) = parseRequest(bytes("POST /u HTTP/1.1\r\nHost: a\r\nExpect: 100-Continue\r\nContent-Length: 5\r\n\r\n"))
        #expect(status == .complete)
        #expect(head.expectContinue)
        #expect(head.framing == .contentLength(5))
    }

    @Test func expectContinueIsIgnoredForHTTP10() {
        let (status, head) = parseRequest(bytes("POST /u HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n"))
        #expect(status == .complete)
        #expect(!head.expectContinue)
    }

    @Test func headRequest() {
        let (status, head) = parseRequest(bytes("HEAD /h HTTP/1.1\r\nHost: a\r\n\r\n"))
        #expect(status == .complete)
        #expect(head.method == .head)
        #expect(head.framing == .none)
    }

    @Test func websocketUpgrade() {
        let raw = "GET /ws HTTP/1.1\r\nHost: a\r\nConnection: keep-alive, Upgrade\r\nUpgrade: websocket\r\n"
            + "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
        let (status, head) = parseRequest(bytes(raw))
        #expect(status == .complete)
        #expect(head.webSocketUpgrade)
        #expect(head.keepAlive)
    }

    @Test func upgradeNeedsBothConnectionTokenAndField() {
        #expect(!parseRequest(bytes("GET / HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\n\r\n")).1.webSocketUpgrade)
        #expect(!parseRequest(bytes("GET / HTTP/1.1\r\nHost: a\r\nConnection: upgrade\r\n\r\n")).1.webSocketUpgrade)
    }

    /// Only a bodiless HTTP/1.1 GET asking for websocket is a handshake: every other Upgrade
    /// leaves a plain request, whose body a body-credential route reads.
    @Test(arguments: [
        ("POST /r HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nContent-Length: 2\r\n\r\n", false),
        ("POST /r HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\nContent-Length: 2\r\n\r\n", false),
        ("POST /r HTTP/1.1\r\nHost: a\r\nConnection: keep-alive, Upgrade\r\nUpgrade: h2c\r\nContent-Length: 2\r\n\r\n", false),
        ("POST /r HTTP/1.1\r\nHost: a\r\nconnection: UPGRADE\r\nupgrade: foo\r\nTransfer-Encoding: chunked\r\n\r\n", false),
        ("POST /r HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: WebSocket\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n", false),
        ("GET /r HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nContent-Length: 5\r\n\r\n", false),
        ("GET /r HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nTransfer-Encoding: chunked\r\n\r\n", false),
        ("GET /r HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n", false),
        ("GET /r HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: foo\r\n\r\n", false),
        ("PUT /r HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n", false),
        ("get /r HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n", false),
        ("GET /r HTTP/1.0\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n", false),
        ("GET /r HTTP/1.1\r\nHost: a\r\nConnection: keep-alive, Upgrade\r\nUpgrade: h2c, WebSocket\r\n\r\n", true),
        ("GET /r HTTP/1.1\r\nHost: a\r\nCONNECTION: upgrade\r\nUPGRADE: WEBSOCKET\r\nContent-Length: 0\r\n\r\n", true),
    ])
    func onlyABodilessGetForWebSocketIsAHandshake(raw: String, handshake: Bool) {
        let (status, head) = parseRequest(bytes(raw))
        #expect(status == .complete)
        #expect(head.webSocketUpgrade == handshake, "\(raw)")
    }

    @Test func contentLengthZero() {
        let (status, head) = parseRequest(bytes("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n"))
        #expect(status == .complete)
        #expect(head.framing == .contentLength(0))
    }

    @Test func identicalContentLengthsAreOneValue() {
        #expect(parseRequest(bytes("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5, 5\r\n\r\n")).1.framing == .contentLength(5))
        #expect(parseRequest(bytes("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 7\r\ncontent-length: 7\r\n\r\n")).1.framing == .contentLength(7))
    }

    @Test func chunkedFraming() {
        let (status, head) = parseRequest(bytes("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: Chunked\r\n\r\n"))
        #expect(status == .complete)
        #expect(head.framing == .chunked)
    }

    @Test func twoLeadingEmptyLinesAreTolerated() {
        let raw = bytes("\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n")
        let (status, head) = parseRequest(raw)
        #expect(status == .complete)
        #expect(head.headLength == raw.count)
        #expect(text(raw, head.target) == "/")
    }

    @Test func extensionMethodIsOther() {
        let raw = bytes("PROPFIND /d HTTP/1.1\r\nHost: a\r\n\r\n")
        let (status, head) = parseRequest(raw)
        #expect(status == .complete)
        #expect(head.method == .other)
        #expect(text(raw, head.methodRange) == "PROPFIND")
        #expect(parseRequest(bytes("get / HTTP/1.1\r\nHost: a\r\n\r\n")).1.method == .other)
    }

    @Test func obsTextInValueIsAccepted() {
        let raw: [UInt8] = bytes("GET / HTTP/1.1\r\nHost: a\r\nX-Name: caf") + [0xC3, 0xA9] + bytes("\r\n\r\n")
        #expect(parseRequest(raw).0 == .complete)
    }

    @Test func limitsAtTheirExactValueAreAccepted() {
        let line = "GET /" + String(repeating: "a", count: 100) + " HTTP/1.1"
        let raw = bytes(line + "\r\nHost: a\r\n\r\n")
        let limits = HTTPLimits(maxRequestLineBytes: line.utf8.count, maxHeaderBytes: raw.count, maxHeaderCount: 1)
        #expect(parseRequest(raw, limits: limits).0 == .complete)
        #expect(parseRequestByteByByte(raw, limits: limits).0 == .complete)
    }

    @Test func fieldsStorageIsReusedAcrossRequests() {
        let raw = bytes("GET / HTTP/1.1\r\nHost: a\r\nA: 1\r\nB: 2\r\n\r\n")
        var parser = RequestHeadParser()
        var head = RequestHead()
        _ = raw.withUnsafeBytes { parser.parse($0, into: &head) }
        let capacity = head.fields.capacity
        _ = raw.withUnsafeBytes { parser.parse($0, into: &head) }
        #expect(head.fields.count == 3)
        #expect(head.fields.capacity == capacity)
    }
}
