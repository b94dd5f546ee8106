/// Parsing of one `field-line` (RFC 9112 §5): `field-name ":" OWS field-value OWS CRLF`.
enum FieldLine {
    /// Parses the field line starting at `start`; `end` is the end of the field-line block (the CR of
    /// the empty line), which the scanner guarantees to hold whole lines each ending in CRLF.
    /// Rejects obs-fold, whitespace before the colon, non-token name bytes and control characters
    /// (other than HTAB) or DEL in the value. Returns the field and the index of the line's CR.
    @inline(__always)
    static func parse(
        _ p: UnsafeRawBufferPointer, _ start: Int, _ end: Int
    ) throws(HTTPParseError) -> (HTTPHeaderField, lineEnd: Int) {
        if ByteClass.isOWS(p[start]) { throw .bad("obs-fold (line folding) is not allowed") }
        var i = start
        while ByteClass.isToken(p[i]) { i &+= 1 }  // stops at the latest at the line's CR
        let c = p[i]
        if c != ByteClass.colon {
            if ByteClass.isOWS(c) { throw .bad("whitespace between field name and colon") }
            if c == ByteClass.cr { throw .bad("header field without colon") }
            throw .bad("invalid character in field name")
        }
        if i == start { throw .bad("empty field name") }
        let name = start..<i
        let valueStart = i &+ 1
        let lineEnd = ByteScan.firstNonFieldValueByte(p, from: valueStart, to: end)
        if p[lineEnd] != ByteClass.cr { throw .bad("control character in field value") }
        return (HTTPHeaderField(name: name, value: HTTPBytes.trimOWS(p, valueStart..<lineEnd)), lineEnd)
    }
}
