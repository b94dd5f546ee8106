import Testing
@testable import PortcullisHTTP

/// One hostile or confusing request and the exact status the gateway must answer.
struct SmugglingCase: Sendable, CustomTestStringConvertible {
    var name: String
    var request: String
    var status: Int
    var limits: HTTPLimits = .default
    var testDescription: String { "\(name) → \(status)" }
}

private let h = "Host: a\r\n"
private let small = HTTPLimits(maxRequestLineBytes: 64, maxHeaderBytes: 256, maxHeaderCount: 4, maxBodyBytes: 100)

/// The request-smuggling and confusion table (issue 3, item 3).
let smugglingCases: [SmugglingCase] = [
    // Framing conflicts.
    .init(name: "Content-Length with Transfer-Encoding", request: "POST / HTTP/1.1\r\n\(h)Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n", status: 400),
    .init(name: "Transfer-Encoding chunked with Content-Length 0", request: "POST / HTTP/1.1\r\n\(h)Transfer-Encoding: chunked\r\nContent-Length: 0\r\n\r\n", status: 400),
    .init(name: "two differing Content-Length fields", request: "POST / HTTP/1.1\r\n\(h)Content-Length: 5\r\nContent-Length: 6\r\n\r\n", status: 400),
    .init(name: "differing Content-Length list", request: "POST / HTTP/1.1\r\n\(h)Content-Length: 5, 6\r\n\r\n", status: 400),
    .init(name: "Content-Length with plus sign", request: "POST / HTTP/1.1\r\n\(h)Content-Length: +5\r\n\r\n", status: 400),
    .init(name: "negative Content-Length", request: "POST / HTTP/1.1\r\n\(h)Content-Length: -1\r\n\r\n", status: 400),
    .init(name: "Content-Length with inner space", request: "POST / HTTP/1.1\r\n\(h)Content-Length: 1 2\r\n\r\n", status: 400),
    .init(name: "hex Content-Length", request: "POST / HTTP/1.1\r\n\(h)Content-Length: 0x10\r\n\r\n", status: 400),
    .init(name: "overflowing Content-Length", request: "POST / HTTP/1.1\r\n\(h)Content-Length: 99999999999999999999\r\n\r\n", status: 400),
    .init(name: "empty Content-Length", request: "POST / HTTP/1.1\r\n\(h)Content-Length: \r\n\r\n", status: 400),
    .init(name: "Content-Length list with empty element", request: "POST / HTTP/1.1\r\n\(h)Content-Length: 5,\r\n\r\n", status: 400),
    .init(name: "Content-Length above maxBodyBytes", request: "POST / HTTP/1.1\r\n\(h)Content-Length: 101\r\n\r\n", status: 413, limits: small),
    .init(name: "chunked then identity", request: "POST / HTTP/1.1\r\n\(h)Transfer-Encoding: chunked, identity\r\n\r\n", status: 400),
    .init(name: "xchunked", request: "POST / HTTP/1.1\r\n\(h)Transfer-Encoding: xchunked\r\n\r\n", status: 400),
    .init(name: "chunked twice in one field", request: "POST / HTTP/1.1\r\n\(h)Transfer-Encoding: chunked, chunked\r\n\r\n", status: 400),
    .init(name: "chunked in two fields", request: "POST / HTTP/1.1\r\n\(h)Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", status: 400),
    .init(name: "chunked not last across fields", request: "POST / HTTP/1.1\r\n\(h)Transfer-Encoding: chunked\r\nTransfer-Encoding: gzip\r\n\r\n", status: 400),
    .init(name: "gzip then chunked is unsupported", request: "POST / HTTP/1.1\r\n\(h)Transfer-Encoding: gzip, chunked\r\n\r\n", status: 501),
    .init(name: "gzip, chunked without Host is a 400 first", request: "POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", status: 400),
    .init(name: "oversized Content-Length without Host is a 400 first", request: "POST / HTTP/1.1\r\nContent-Length: 101\r\n\r\n", status: 400, limits: small),
    .init(name: "identity alone", request: "POST / HTTP/1.1\r\n\(h)Transfer-Encoding: identity\r\n\r\n", status: 400),
    .init(name: "empty Transfer-Encoding", request: "POST / HTTP/1.1\r\n\(h)Transfer-Encoding: \r\n\r\n", status: 400),
    .init(name: "chunked with a parameter", request: "POST / HTTP/1.1\r\n\(h)Transfer-Encoding: chunked;x=1\r\n\r\n", status: 400),
    .init(name: "Transfer-Encoding with vertical tab", request: "POST / HTTP/1.1\r\n\(h)Transfer-Encoding: \u{0B}chunked\r\n\r\n", status: 400),
    .init(name: "Transfer-Encoding in HTTP/1.0", request: "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", status: 400),
    .init(name: "Transfer-Encoding name with leading space", request: "POST / HTTP/1.1\r\n\(h) Transfer-Encoding: chunked\r\n\r\n", status: 400),
    .init(name: "space before colon", request: "POST / HTTP/1.1\r\n\(h)Transfer-Encoding : chunked\r\n\r\n", status: 400),
    .init(name: "tab before colon", request: "POST / HTTP/1.1\r\n\(h)Content-Length\t: 5\r\n\r\n", status: 400),
    // Line structure.
    .init(name: "obs-fold", request: "GET / HTTP/1.1\r\n\(h)X-A: 1\r\n 2\r\n\r\n", status: 400),
    .init(name: "obs-fold with tab", request: "GET / HTTP/1.1\r\n\(h)X-A: 1\r\n\t2\r\n\r\n", status: 400),
    .init(name: "bare CR in value", request: "GET / HTTP/1.1\r\n\(h)X-A: 1\r2\r\n\r\n", status: 400),
    .init(name: "bare CR in request line", request: "GET /\r HTTP/1.1\r\n\(h)\r\n", status: 400),
    .init(name: "bare LF line endings", request: "GET / HTTP/1.1\nHost: a\n\n", status: 400),
    .init(name: "bare LF in header block", request: "GET / HTTP/1.1\r\n\(h)X-A: 1\n\r\n", status: 400),
    .init(name: "NUL in value", request: "GET / HTTP/1.1\r\n\(h)X-A: a\u{00}b\r\n\r\n", status: 400),
    .init(name: "CTL in value", request: "GET / HTTP/1.1\r\n\(h)X-A: a\u{01}b\r\n\r\n", status: 400),
    .init(name: "DEL in value", request: "GET / HTTP/1.1\r\n\(h)X-A: a\u{7F}b\r\n\r\n", status: 400),
    .init(name: "parenthesis in field name", request: "GET / HTTP/1.1\r\n\(h)X(Y): 1\r\n\r\n", status: 400),
    .init(name: "space in field name", request: "GET / HTTP/1.1\r\n\(h)X Y: 1\r\n\r\n", status: 400),
    .init(name: "empty field name", request: "GET / HTTP/1.1\r\n\(h): x\r\n\r\n", status: 400),
    .init(name: "field line without colon", request: "GET / HTTP/1.1\r\n\(h)X-A\r\n\r\n", status: 400),
    .init(name: "three leading empty lines", request: "\r\n\r\n\r\nGET / HTTP/1.1\r\n\(h)\r\n", status: 400),
    // Host.
    .init(name: "missing Host in HTTP/1.1", request: "GET / HTTP/1.1\r\n\r\n", status: 400),
    .init(name: "two Host fields", request: "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", status: 400),
    .init(name: "two identical Host fields", request: "GET / HTTP/1.1\r\nHost: a\r\nHost: a\r\n\r\n", status: 400),
    .init(name: "empty Host", request: "GET / HTTP/1.1\r\nHost: \r\n\r\n", status: 400),
    .init(name: "Host with userinfo", request: "GET / HTTP/1.1\r\nHost: evil@a\r\n\r\n", status: 400),
    .init(name: "Host with slash", request: "GET / HTTP/1.1\r\nHost: a/b\r\n\r\n", status: 400),
    .init(name: "Host list", request: "GET / HTTP/1.1\r\nHost: a, b\r\n\r\n", status: 400),
    .init(name: "Host with non-numeric port", request: "GET / HTTP/1.1\r\nHost: a:80x\r\n\r\n", status: 400),
    // Request line.
    .init(name: "HTTP/1.2", request: "GET / HTTP/1.2\r\n\(h)\r\n", status: 505),
    .init(name: "HTTP/2.0", request: "GET / HTTP/2.0\r\n\(h)\r\n", status: 505),
    .init(name: "HTTP/0.9 style request line", request: "GET /\r\n\r\n", status: 400),
    .init(name: "double space after method", request: "GET  / HTTP/1.1\r\n\(h)\r\n", status: 400),
    .init(name: "lowercase http version", request: "GET / http/1.1\r\n\(h)\r\n", status: 400),
    .init(name: "trailing space after version", request: "GET / HTTP/1.1 \r\n\(h)\r\n", status: 400),
    .init(name: "space inside target", request: "GET /a b HTTP/1.1\r\n\(h)\r\n", status: 400),
    .init(name: "tab inside target", request: "GET /a\tb HTTP/1.1\r\n\(h)\r\n", status: 400),
    .init(name: "CTL inside target", request: "GET /a\u{01}b HTTP/1.1\r\n\(h)\r\n", status: 400),
    .init(name: "non-ASCII in target", request: "GET /caf\u{E9} HTTP/1.1\r\n\(h)\r\n", status: 400),
    .init(name: "target not starting with slash", request: "GET a/b HTTP/1.1\r\n\(h)\r\n", status: 400),
    .init(name: "fragment in target", request: "GET /a#frag HTTP/1.1\r\n\(h)\r\n", status: 400),
    .init(name: "asterisk with GET", request: "GET * HTTP/1.1\r\n\(h)\r\n", status: 400),
    .init(name: "unsupported scheme in absolute-form", request: "GET ftp://a/ HTTP/1.1\r\n\(h)\r\n", status: 400),
    .init(name: "absolute-form with userinfo", request: "GET http://user@a/ HTTP/1.1\r\n\(h)\r\n", status: 400),
    .init(name: "absolute-form with empty authority", request: "GET http:///x HTTP/1.1\r\n\(h)\r\n", status: 400),
    .init(name: "CONNECT without port", request: "CONNECT example.com HTTP/1.1\r\n\(h)\r\n", status: 400),
    .init(name: "CONNECT with origin-form", request: "CONNECT / HTTP/1.1\r\n\(h)\r\n", status: 400),
    .init(name: "invalid method token", request: "G(T / HTTP/1.1\r\n\(h)\r\n", status: 400),
    .init(name: "too-long request line", request: "GET /\(String(repeating: "a", count: 80)) HTTP/1.1\r\n\(h)\r\n", status: 414, limits: small),
    .init(name: "too-long request line, unterminated", request: "GET /\(String(repeating: "a", count: 80))", status: 414, limits: small),
    .init(name: "too-long request line ending in bare LF", request: "GET /\(String(repeating: "a", count: 80))\n", status: 414, limits: small),
    .init(name: "too-large head", request: "GET / HTTP/1.1\r\n\(h)X-A: \(String(repeating: "b", count: 300))\r\n\r\n", status: 431, limits: small),
    .init(name: "too-large head, unterminated", request: "GET / HTTP/1.1\r\n\(h)X-A: \(String(repeating: "b", count: 300))", status: 431, limits: small),
    .init(name: "too many fields", request: "GET / HTTP/1.1\r\n\(h)A: 1\r\nB: 2\r\nC: 3\r\nD: 4\r\n\r\n", status: 431, limits: small),
    .init(name: "unknown Expect", request: "POST / HTTP/1.1\r\n\(h)Expect: 200-ok\r\nContent-Length: 1\r\n\r\n", status: 417),
    // Chunked bodies.
    .init(name: "chunk size overflow", request: "POST / HTTP/1.1\r\n\(h)Transfer-Encoding: chunked\r\n\r\nfffffffffffffffff\r\n", status: 400),
    .init(name: "non-hex chunk size", request: "POST / HTTP/1.1\r\n\(h)Transfer-Encoding: chunked\r\n\r\nzz\r\n", status: 400),
    .init(name: "negative chunk size", request: "POST / HTTP/1.1\r\n\(h)Transfer-Encoding: chunked\r\n\r\n-1\r\n", status: 400),
    .init(name: "0x-prefixed chunk size", request: "POST / HTTP/1.1\r\n\(h)Transfer-Encoding: chunked\r\n\r\n0x5\r\nhello\r\n0\r\n\r\n", status: 400),
    .init(name: "empty chunk size", request: "POST / HTTP/1.1\r\n\(h)Transfer-Encoding: chunked\r\n\r\n\r\n", status: 400),
    .init(name: "missing CRLF after chunk data", request: "POST / HTTP/1.1\r\n\(h)Transfer-Encoding: chunked\r\n\r\n3\r\nabcdef\r\n0\r\n\r\n", status: 400),
    .init(name: "bare LF after chunk size", request: "POST / HTTP/1.1\r\n\(h)Transfer-Encoding: chunked\r\n\r\n3\nabc\r\n0\r\n\r\n", status: 400),
    .init(name: "space after chunk size without extension", request: "POST / HTTP/1.1\r\n\(h)Transfer-Encoding: chunked\r\n\r\n3 \r\nabc\r\n0\r\n\r\n", status: 400),
    .init(name: "chunked body above maxBodyBytes", request: "POST / HTTP/1.1\r\n\(h)Transfer-Encoding: chunked\r\n\r\n65\r\n", status: 413, limits: small),
    .init(name: "obs-fold in trailer", request: "POST / HTTP/1.1\r\n\(h)Transfer-Encoding: chunked\r\n\r\n0\r\nX: 1\r\n 2\r\n\r\n", status: 400),
    .init(name: "NUL in trailer", request: "POST / HTTP/1.1\r\n\(h)Transfer-Encoding: chunked\r\n\r\n0\r\nX: \u{00}\r\n\r\n", status: 400),
    // Accepted for contrast: the strict parser must not reject the ordinary forms.
    .init(name: "plain chunked body", request: "POST / HTTP/1.1\r\n\(h)Transfer-Encoding: chunked\r\n\r\n3;ext=\"v\"\r\nabc\r\n0\r\nX-T: 1\r\n\r\n", status: 0),
    .init(name: "CONNECT authority-form", request: "CONNECT a.example:443 HTTP/1.1\r\nHost: a.example:443\r\n\r\n", status: 0),
    .init(name: "IPv6 Host", request: "GET / HTTP/1.1\r\nHost: [::1]:8080\r\n\r\n", status: 0),
]

@Suite("Request smuggling and confusion table")
struct SmugglingTableTests {
    @Test(arguments: smugglingCases)
    func getsExactStatus(_ c: SmugglingCase) {
        #expect(statusFor(c.request, limits: c.limits) == c.status)
    }

    /// A head rejected as a whole is rejected the same way when it trickles in byte by byte.
    @Test(arguments: smugglingCases)
    func byteAtATimeGetsTheSameHeadStatus(_ c: SmugglingCase) {
        let whole = parseRequest(bytes(c.request), limits: c.limits).0
        guard case .failure = whole else { return }
        #expect(parseRequestByteByByte(bytes(c.request), limits: c.limits).0 == whole)
    }

    @Test func tableIsLargeEnough() {
        #expect(smugglingCases.count >= 35)
    }
}
