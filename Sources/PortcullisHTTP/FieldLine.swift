/// Parsing of one `field-line` (RFC 9112 §5): `field-name ":" OWS field-value OWS`.
enum FieldLine {
    /// Parses the field line `p[start..<end]` (its CRLF excluded; the scanner guarantees there is
    /// no CR or LF inside). Rejects obs-fold, whitespace before the colon, non-token name bytes
    /// and control characters (other than HTAB) or DEL in the value.
    @inline(__always)
    static func parse(_ p: UnsafeRawBufferPointer, _ start: Int, _ end: Int) throws(HTTPParseError) -> HTTPHeaderField {
        if ByteClass.isOWS(p[start]) { throw .bad("obs-fold (line folding) is not allowed") }
        var i = start
        while i < end && ByteClass.isToken(p[i]) { i &+= 1 }
        if i == end { throw .bad("header field without colon") }
        let c = p[i]
        if c != ByteClass.colon {
            if ByteClass.isOWS(c) { throw .bad("whitespace between field name and colon") }
            throw .bad("invalid character in field name")
        }
        if i == start { throw .bad("empty field name") }
        let name = start..<i
        i &+= 1
        let valueStart = i
        while i < end {
            if !ByteClass.isFieldValueByte(p[i]) { throw .bad("control character in field value") }
            i &+= 1
        }
        return HTTPHeaderField(name: name, value: HTTPBytes.trimOWS(p, valueStart..<end))
    }

    /// Calls `body` for each field line in `lines` (each ending in CRLF), in order.
    @inline(__always)
    static func forEach(
        _ p: UnsafeRawBufferPointer, _ lines: Range<Int>, _ body: (HTTPHeaderField) throws(HTTPParseError) -> Void
    ) throws(HTTPParseError) {
        var i = lines.lowerBound
        while i < lines.upperBound {
            var j = i
            while p[j] != ByteClass.cr { j &+= 1 }
            try body(parse(p, i, j))
            i = j &+ 2
        }
    }
}
