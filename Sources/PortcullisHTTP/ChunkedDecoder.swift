/// Incremental decoder of a `chunked` body (RFC 9112 §7.1). Chunk data is handed out as slices of the
/// input (no copy); chunk extensions are checked and skipped (bounded by `maxChunkLineBytes`); trailer
/// fields are validated like header fields and discarded (bounded by `maxTrailerBytes`).
///
/// It is a byte-level state machine, so it never buffers: a chunk-size line split across reads is
/// simply continued on the next call. A value belongs to one connection and is used from its queue only.
public struct ChunkedDecoder: Sendable {
    public enum Result: Sendable, Equatable {
        /// All of the input was used; call again with more.
        case needMore
        /// The body and its trailers are complete; bytes after `consumed` belong to the next message.
        case done
        /// The body is malformed; answer `status` and close the connection.
        case failure(HTTPParseError)
    }

    private enum State: UInt8 {
        case size, sizeWhitespace, extensions, sizeLF, data, dataCR, dataLF
        case trailerLineStart, trailerName, trailerValue, trailerLF, finalLF, done, failed
    }

    public let limits: HTTPLimits
    private var state = State.size
    private var chunkSize = 0
    private var sizeDigits = 0
    private var lineBytes = 0
    private var remaining = 0
    private var bodyBytes = 0
    private var trailerBytes = 0
    private var failure: HTTPParseError? = nil

    public init(limits: HTTPLimits = .default) {
        self.limits = limits
    }

    /// Prepares for the next chunked body.
    public mutating func reset() {
        self = ChunkedDecoder(limits: limits)
    }

    /// Decodes from `bytes`, calling `onData` with each run of body data (a slice of `bytes`).
    /// `consumed` is set to the number of bytes used: all of them on `.needMore`; up to the end of the
    /// body on `.done`; up to and including the offending byte on `.failure`.
    public mutating func decode(
        _ bytes: UnsafeRawBufferPointer, consumed: inout Int, onData: (UnsafeRawBufferPointer) -> Void
    ) -> Result {
        let n = bytes.count
        var i = 0
        defer { consumed = i }
        while i < n {
            if state == .data {
                let take = min(remaining, n &- i)
                onData(UnsafeRawBufferPointer(rebasing: bytes[i..<(i &+ take)]))
                remaining &-= take
                i &+= take
                if remaining == 0 { state = .dataCR }
                continue
            }
            let b = bytes[i]
            i &+= 1
            switch state {
            case .size:
                if let digit = ByteClass.hexValue(b) {
                    if chunkSize > (Int.max >> 4) { return fail(.bad("chunk size overflow")) }
                    chunkSize = chunkSize << 4 | Int(digit)
                    sizeDigits &+= 1
                } else if sizeDigits == 0 {
                    return fail(.bad("invalid chunk size"))
                } else if b == ByteClass.cr {
                    state = .sizeLF
                } else if b == ByteClass.semicolon {
                    state = .extensions
                } else if ByteClass.isOWS(b) {
                    state = .sizeWhitespace
                } else {
                    return fail(.bad("invalid chunk size"))
                }
            case .sizeWhitespace:
                if b == ByteClass.semicolon { state = .extensions }
                else if !ByteClass.isOWS(b) { return fail(.bad("invalid chunk size")) }
            case .extensions:
                if b == ByteClass.cr { state = .sizeLF }
                else if !ByteClass.isFieldValueByte(b) { return fail(.bad("invalid chunk extension")) }
            case .sizeLF:
                guard b == ByteClass.lf else { return fail(.bad("bare CR in chunk-size line")) }
                if chunkSize == 0 {
                    state = .trailerLineStart
                } else {
                    bodyBytes &+= chunkSize
                    if bodyBytes > limits.maxBodyBytes || bodyBytes < 0 {
                        return fail(HTTPParseError(status: 413, reason: "chunked body too large"))
                    }
                    remaining = chunkSize
                    state = .data
                }
            case .data:
                break  // handled above
            case .dataCR:
                guard b == ByteClass.cr else { return fail(.bad("missing CRLF after chunk data")) }
                state = .dataLF
            case .dataLF:
                guard b == ByteClass.lf else { return fail(.bad("missing CRLF after chunk data")) }
                state = .size
                chunkSize = 0
                sizeDigits = 0
                lineBytes = 0
            case .trailerLineStart:
                if b == ByteClass.cr { state = .finalLF }
                else if ByteClass.isToken(b) { state = .trailerName }
                else if ByteClass.isOWS(b) { return fail(.bad("obs-fold (line folding) is not allowed")) }
                else { return fail(.bad("invalid character in trailer field name")) }
            case .trailerName:
                if b == ByteClass.colon { state = .trailerValue }
                else if ByteClass.isOWS(b) { return fail(.bad("whitespace between field name and colon")) }
                else if !ByteClass.isToken(b) { return fail(.bad("invalid character in trailer field name")) }
            case .trailerValue:
                if b == ByteClass.cr { state = .trailerLF }
                else if !ByteClass.isFieldValueByte(b) { return fail(.bad("control character in trailer field value")) }
            case .trailerLF:
                guard b == ByteClass.lf else { return fail(.bad("bare CR in trailer")) }
                state = .trailerLineStart
            case .finalLF:
                guard b == ByteClass.lf else { return fail(.bad("bare CR at end of chunked body")) }
                state = .done
                return .done
            case .done:
                i &-= 1
                return .done
            case .failed:
                i &-= 1
                return .failure(failure ?? .bad("malformed chunked body"))
            }
            switch state {
            case .size, .sizeWhitespace, .extensions:
                lineBytes &+= 1
                if lineBytes > limits.maxChunkLineBytes { return fail(.bad("chunk-size line too long")) }
            case .trailerName, .trailerValue, .trailerLF, .trailerLineStart, .finalLF:
                trailerBytes &+= 1
                if trailerBytes > limits.maxTrailerBytes {
                    return fail(HTTPParseError(status: 431, reason: "trailer section too large"))
                }
            default:
                break
            }
        }
        switch state {
        case .done: return .done
        case .failed: return .failure(failure ?? .bad("malformed chunked body"))
        default: return .needMore
        }
    }

    private mutating func fail(_ error: HTTPParseError) -> Result {
        state = .failed
        failure = error
        return .failure(error)
    }
}
