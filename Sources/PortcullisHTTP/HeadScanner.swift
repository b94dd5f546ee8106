/// Finds the end of a message head (the empty line) incrementally, enforcing line structure as it goes:
/// every line ends in CRLF (a bare CR or a bare LF fails at once), at most two empty lines may precede
/// the start line (RFC 9112 §2.2), and the start-line, head-size and field-count limits hold.
///
/// It remembers how far it has looked, so feeding a growing buffer costs linear time overall.
struct HeadScanner: Sendable {
    /// Where the start line and the field lines of a complete head are.
    struct Head {
        /// The start line, without its CRLF.
        var startLine: Range<Int>
        /// The field lines, each ending in CRLF, without the final empty line.
        var fieldLines: Range<Int>
        /// Bytes consumed, leading empty lines and the final CRLF included.
        var headLength: Int
    }

    enum Outcome {
        case incomplete
        case complete(Head)
        case failure(HTTPParseError)
    }

    static let maxLeadingEmptyLines = 2

    private var scanned = 0
    private var lineStart = 0
    private var startLineStart = 0
    private var startLineEnd = -1
    private var leadingEmptyLines = 0
    private var fieldLineCount = 0

    init() {}

    mutating func reset() { self = HeadScanner() }

    /// Looks at the bytes not examined yet. `p` must start at the first byte of the message and
    /// extend the buffer of the previous call; a shorter buffer restarts the scan.
    ///
    /// Limits are checked byte by byte, so the outcome never depends on how the bytes were split
    /// into reads (the fuzz target checks this).
    mutating func scan(_ p: UnsafeRawBufferPointer, limits: HTTPLimits) -> Outcome {
        let n = p.count
        if scanned > n { reset() }
        var i = scanned
        var limit = byteLimit(limits)
        while true {
            i = ByteScan.firstLineBreak(p, from: i, to: max(i, min(n, limit)))
            if i == n { break }
            let b = p[i]
            if i >= limit, let error = limitError(at: i, byte: b, limits) { return fail(error) }
            if b == ByteClass.lf { return fail(.bad("bare LF line terminator")) }
            // b is CR here: firstLineBreak stopped at a CR, or at the limit where limitError allows only CR.
            if i &+ 1 == n { break }  // wait for the byte after CR
            if p[i &+ 1] != ByteClass.lf { return fail(.bad("bare CR")) }
            if i &+ 2 &- startLineStart > limits.maxHeaderBytes { return fail(Self.headTooLarge) }
            if startLineEnd < 0 {
                if i == lineStart {
                    leadingEmptyLines &+= 1
                    if leadingEmptyLines > Self.maxLeadingEmptyLines {
                        return fail(.bad("too many empty lines before the start line"))
                    }
                    startLineStart = i &+ 2
                } else {
                    startLineEnd = i
                }
            } else if i == lineStart {
                let head = Head(
                    startLine: startLineStart..<startLineEnd,
                    fieldLines: (startLineEnd &+ 2)..<i,
                    headLength: i &+ 2)
                reset()
                return .complete(head)
            } else {
                fieldLineCount &+= 1
                if fieldLineCount > limits.maxHeaderCount { return fail(Self.tooManyFields) }
            }
            i &+= 2
            lineStart = i
            limit = byteLimit(limits)
        }
        scanned = i
        return .incomplete
    }

    /// The first index at which a byte may break a limit: the end of the allowed head, or, while in
    /// the start line, the end of the allowed start line (where only its CR may follow).
    private func byteLimit(_ limits: HTTPLimits) -> Int {
        let headEnd = startLineStart &+ limits.maxHeaderBytes
        if startLineEnd >= 0 { return headEnd }
        return min(headEnd, lineStart &+ limits.maxRequestLineBytes)
    }

    private func limitError(at i: Int, byte: UInt8, _ limits: HTTPLimits) -> HTTPParseError? {
        if startLineEnd < 0 && i >= lineStart &+ limits.maxRequestLineBytes && byte != ByteClass.cr {
            return Self.lineTooLong
        }
        if i >= startLineStart &+ limits.maxHeaderBytes { return Self.headTooLarge }
        return nil
    }

    private mutating func fail(_ e: HTTPParseError) -> Outcome {
        reset()
        return .failure(e)
    }

    static let lineTooLong = HTTPParseError(status: 414, reason: "request line too long")
    static let headTooLarge = HTTPParseError(status: 431, reason: "header section too large")
    static let tooManyFields = HTTPParseError(status: 431, reason: "too many header fields")
}
