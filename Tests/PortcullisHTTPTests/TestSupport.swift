@testable import PortcullisHTTP

/// Bytes of a test message; "\r\n" must be written explicitly so bare-LF cases stay visible.
func bytes(_ s: String) -> [UInt8] { Array(s.utf8) }

/// The text at `range` of `buffer`.
func text(_ buffer: [UInt8], _ range: Range<Int>?) -> String? {
    guard let range else { return nil }
    return String(decoding: buffer[range], as: UTF8.self)
}

/// Parses a whole request head in one call.
func parseRequest(_ buffer: [UInt8], limits: HTTPLimits = .default) -> (ParseStatus, RequestHead) {
    var parser = RequestHeadParser(limits: limits)
    var head = RequestHead()
    let status = buffer.withUnsafeBytes { parser.parse($0, into: &head) }
    return (status, head)
}

/// Parses a request head feeding a growing buffer one byte at a time, as a slow client would.
func parseRequestByteByByte(_ buffer: [UInt8], limits: HTTPLimits = .default) -> (ParseStatus, RequestHead) {
    var parser = RequestHeadParser(limits: limits)
    var head = RequestHead()
    var status = ParseStatus.incomplete
    for end in 1...buffer.count {
        status = buffer[0..<end].withUnsafeBytes { parser.parse($0, into: &head) }
        if status != .incomplete { break }
    }
    return (status, head)
}

/// Parses a response head in one call.
func parseResponse(_ s: String, method: HTTPMethod = .get) -> (ParseStatus, ResponseHead, [UInt8]) {
    let buffer = bytes(s)
    var parser = ResponseHeadParser()
    var head = ResponseHead()
    let status = buffer.withUnsafeBytes { parser.parse($0, requestMethod: method, into: &head) }
    return (status, head, buffer)
}

/// Decodes a chunked body fed in pieces of `piece` bytes; returns the result, the data and the bytes consumed.
func decodeChunked(
    _ buffer: [UInt8], piece: Int = Int.max, limits: HTTPLimits = .default
) -> (ChunkedDecoder.Result, [UInt8], Int) {
    var decoder = ChunkedDecoder(limits: limits)
    var data: [UInt8] = []
    var offset = 0
    var result = ChunkedDecoder.Result.needMore
    while offset < buffer.count {
        let end = min(buffer.count, offset + piece)
        var consumed = 0
        result = buffer[offset..<end].withUnsafeBytes { chunk in
            decoder.decode(chunk, consumed: &consumed) { data.append(contentsOf: $0) }
        }
        offset += consumed
        if result != .needMore { break }
    }
    return (result, data, offset)
}

/// The status a request (head plus any chunked body) earns: the failure status, 0 when accepted,
/// -1 when the parser still waits for bytes.
func statusFor(_ raw: String, limits: HTTPLimits = .default) -> Int {
    let buffer = bytes(raw)
    let (status, head) = parseRequest(buffer, limits: limits)
    switch status {
    case .incomplete: return -1
    case .failure(let e): return e.status
    case .complete:
        guard head.framing == .chunked else { return 0 }
        let (result, _, _) = decodeChunked(Array(buffer[head.headLength...]), limits: limits)
        switch result {
        case .done: return 0
        case .needMore: return -1
        case .failure(let e): return e.status
        }
    }
}
