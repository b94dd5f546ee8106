import Testing
@testable import PortcullisHTTP

@Suite("Chunked body decoder")
struct ChunkedDecoderTests {
    static let body = "4;name=value;q=\"a b\"\r\nWiki\r\n5\r\npedia\r\nE\r\n in\r\n\r\nchunks.\r\n0\r\nExpires: never\r\nX-Trailer: 1\r\n\r\n"
    static let decoded = "Wikipedia in\r\n\r\nchunks."

    @Test func decodesWholeBody() {
        let (result, data, consumed) = decodeChunked(bytes(Self.body))
        #expect(result == .done)
        #expect(String(decoding: data, as: UTF8.self) == Self.decoded)
        #expect(consumed == Self.body.utf8.count)
    }

    @Test(arguments: [1, 2, 3, 7])
    func decodesBodyFedInTinyPieces(_ piece: Int) {
        let (result, data, consumed) = decodeChunked(bytes(Self.body), piece: piece)
        #expect(result == .done)
        #expect(String(decoding: data, as: UTF8.self) == Self.decoded)
        #expect(consumed == Self.body.utf8.count)
    }

    @Test func bytesAfterTheBodyAreLeftForTheNextMessage() {
        let raw = bytes("3\r\nabc\r\n0\r\n\r\nGET / HTTP/1.1\r\n")
        var decoder = ChunkedDecoder()
        var consumed = 0
        let result = raw.withUnsafeBytes { decoder.decode($0, consumed: &consumed) { _ in } }
        #expect(result == .done)
        #expect(consumed == 13)  // "3\r\nabc\r\n0\r\n\r\n"
    }

    @Test func needMoreConsumesEverything() {
        let raw = bytes("a;ext")
        var decoder = ChunkedDecoder()
        var consumed = 0
        #expect(raw.withUnsafeBytes { decoder.decode($0, consumed: &consumed) { _ in } } == .needMore)
        #expect(consumed == raw.count)
    }

    @Test func dataIsHandedOutWithoutWaitingForTheWholeChunk() {
        var decoder = ChunkedDecoder()
        var data: [UInt8] = []
        var consumed = 0
        let first = bytes("a\r\nhello")
        #expect(first.withUnsafeBytes { decoder.decode($0, consumed: &consumed) { data.append(contentsOf: $0) } } == .needMore)
        #expect(String(decoding: data, as: UTF8.self) == "hello")
    }

    @Test func resetStartsANewBody() {
        var decoder = ChunkedDecoder()
        var consumed = 0
        let raw = bytes("0\r\n\r\n")
        #expect(raw.withUnsafeBytes { decoder.decode($0, consumed: &consumed) { _ in } } == .done)
        decoder.reset()
        #expect(raw.withUnsafeBytes { decoder.decode($0, consumed: &consumed) { _ in } } == .done)
        #expect(consumed == raw.count)
    }

    @Test func uppercaseHexAndLeadingZerosAreAccepted() {
        let (result, data, _) = decodeChunked(bytes("000A\r\n0123456789\r\n0\r\n\r\n"))
        #expect(result == .done)
        #expect(data.count == 10)
    }

    @Test func chunkLineLongerThanLimitIsRejected() {
        let limits = HTTPLimits(maxChunkLineBytes: 16)
        let (result, _, _) = decodeChunked(bytes("1;" + String(repeating: "x", count: 20) + "\r\na\r\n0\r\n\r\n"), limits: limits)
        #expect(result == .failure(HTTPParseError(status: 400, reason: "chunk-size line too long")))
    }

    @Test func trailersLargerThanLimitAreRejected() {
        let limits = HTTPLimits(maxTrailerBytes: 16)
        let (result, _, _) = decodeChunked(bytes("0\r\nX: " + String(repeating: "y", count: 20) + "\r\n\r\n"), limits: limits)
        guard case .failure(let error) = result else { Issue.record("accepted"); return }
        #expect(error.status == 431)
    }

    @Test func totalAcrossChunksIsBounded() {
        let limits = HTTPLimits(maxBodyBytes: 8)
        let (result, _, _) = decodeChunked(bytes("5\r\nhello\r\n5\r\nworld\r\n0\r\n\r\n"), limits: limits)
        guard case .failure(let error) = result else { Issue.record("accepted"); return }
        #expect(error.status == 413)
    }

    @Test func failureIsSticky() {
        var decoder = ChunkedDecoder()
        var consumed = 0
        let bad = bytes("g\r\n")
        let good = bytes("0\r\n\r\n")
        guard case .failure = bad.withUnsafeBytes({ decoder.decode($0, consumed: &consumed) { _ in } }) else {
            Issue.record("accepted"); return
        }
        guard case .failure = good.withUnsafeBytes({ decoder.decode($0, consumed: &consumed) { _ in } }) else {
            Issue.record("recovered without reset"); return
        }
    }

    @Test(arguments: [
        "3;a\nabc\r\n0\r\n\r\n",          // bare LF ending an extension
        "3;a\u{01}\r\nabc\r\n0\r\n\r\n",     // CTL in an extension
        "3\r\nabc\r\n0\r\n\r\r\n",        // bare CR at the end
        "3\r\nabc\r\n0\r\nX : 1\r\n\r\n", // whitespace before colon in a trailer
        "3\r\nabc\r\n0\r\nX(Y): 1\r\n\r\n",
        "3\r\nabc\r\n0\r\n: 1\r\n\r\n",
        "3\r\nabc\n0\r\n\r\n",            // bare LF after data
        " 3\r\nabc\r\n0\r\n\r\n",         // leading whitespace
    ])
    func malformedBodiesAreRejectedWith400(_ body: String) {
        let (result, _, _) = decodeChunked(bytes(body))
        guard case .failure(let error) = result else { Issue.record("accepted"); return }
        #expect(error.status == 400)
    }
}
