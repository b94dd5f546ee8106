/// The fields that decide message framing, `Content-Length` and `Transfer-Encoding`,
/// checked strictly because disagreement about them is what request smuggling exploits.
enum ContentLengthValue {
    /// More digits than this are rejected rather than risking overflow (18 digits < Int.max).
    static let maxDigits = 18

    /// Parses a `Content-Length` value. A list (`5, 5`) is accepted only if every element is the
    /// same number; anything else (sign, space inside, hex, empty element, more than 18 digits) is malformed.
    static func parse(_ p: UnsafeRawBufferPointer, _ range: Range<Int>) throws(HTTPParseError) -> Int {
        var result = -1
        var i = range.lowerBound
        while true {
            while i < range.upperBound && ByteClass.isOWS(p[i]) { i &+= 1 }
            var value = 0, digits = 0
            while i < range.upperBound && ByteClass.isDigit(p[i]) {
                value = value &* 10 &+ Int(p[i] &- 0x30)
                digits &+= 1
                i &+= 1
            }
            if digits == 0 || digits > maxDigits { throw .bad("malformed Content-Length") }
            while i < range.upperBound && ByteClass.isOWS(p[i]) { i &+= 1 }
            if result >= 0 && result != value { throw .bad("differing Content-Length values") }
            result = value
            if i == range.upperBound { return result }
            if p[i] != ByteClass.comma { throw .bad("malformed Content-Length") }
            i &+= 1
        }
    }
}

/// The transfer codings named by every `Transfer-Encoding` field of a message, in order.
struct TransferCodings {
    var present = false
    var chunkedCount = 0
    var finalIsChunked = false
    var hasOtherCoding = false
    var malformed = false

    /// Adds the codings of one `Transfer-Encoding` field value.
    mutating func add(_ p: UnsafeRawBufferPointer, _ range: Range<Int>) {
        present = true
        var start = range.lowerBound
        while true {
            var end = start
            while end < range.upperBound && p[end] != ByteClass.comma { end &+= 1 }
            addElement(p, HTTPBytes.trimOWS(p, start..<end))
            if end == range.upperBound { return }
            start = end &+ 1
        }
    }

    private mutating func addElement(_ p: UnsafeRawBufferPointer, _ element: Range<Int>) {
        var i = element.lowerBound
        while i < element.upperBound && ByteClass.isToken(p[i]) { i &+= 1 }
        let name = element.lowerBound..<i
        while i < element.upperBound && ByteClass.isOWS(p[i]) { i &+= 1 }
        let hasParameters = i < element.upperBound
        if name.isEmpty || (hasParameters && p[i] != ByteClass.semicolon) {
            malformed = true
            return
        }
        if HTTPBytes.equalsCaseInsensitive(p, name, "chunked") {
            if hasParameters { malformed = true }  // chunked takes no parameters
            chunkedCount &+= 1
            finalIsChunked = true
        } else {
            hasOtherCoding = true
            finalIsChunked = false
        }
    }

    /// Request rule, part 1: well formed, exactly one `chunked`, and it is last (else 400, RFC 9112 §6.3).
    func checkStructure() throws(HTTPParseError) {
        if malformed { throw .bad("malformed Transfer-Encoding") }
        if chunkedCount > 1 { throw .bad("chunked applied more than once") }
        if !finalIsChunked { throw .bad("chunked is not the final transfer coding") }
    }

    /// Request rule, part 2: no coding other than `chunked` (else 501, RFC 9112 §6.1).
    func checkSupported() throws(HTTPParseError) {
        if hasOtherCoding { throw HTTPParseError(status: 501, reason: "unsupported transfer coding") }
    }
}
