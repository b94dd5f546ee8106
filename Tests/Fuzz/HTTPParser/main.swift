// libFuzzer target for the PortcullisHTTP codec. Built together with Sources/PortcullisHTTP/*.swift
// into one module by Tests/Fuzz/run-http-fuzz.sh (so the module's internals are visible here).
//
// Input layout: byte 0 chooses where the rest is split into two reads; bytes 1... are the message.
// Every entry point is driven on the message, and invariants that must hold for any input are
// checked with `precondition` (a violation is a crash libFuzzer reports).

let fuzzLimits = HTTPLimits(
    maxRequestLineBytes: 256, maxHeaderBytes: 1024, maxHeaderCount: 16,
    maxBodyBytes: 4096, maxChunkLineBytes: 64, maxTrailerBytes: 256)

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    guard size > 0 else { return 0 }
    let message = UnsafeRawBufferPointer(start: data + 1, count: size - 1)
    let split = message.count * Int(data[0]) / 255
    fuzzRequest(message, split: split)
    fuzzResponse(message, split: split)
    fuzzChunked(message, split: split)
    fuzzNormalizer(message)
    return 0
}

func within(_ r: Range<Int>?, _ count: Int) -> Bool {
    guard let r else { return true }
    return r.lowerBound >= 0 && r.upperBound <= count
}

/// Whole-buffer and two-read parsing agree, and a complete head lies inside the bytes.
func fuzzRequest(_ message: UnsafeRawBufferPointer, split: Int) {
    var parser = RequestHeadParser(limits: fuzzLimits)
    var head = RequestHead()
    let whole = parser.parse(message, into: &head)
    if whole == .complete {
        precondition(head.headLength > 0 && head.headLength <= message.count)
        precondition(within(head.methodRange, head.headLength) && within(head.target, head.headLength))
        precondition(within(head.host, head.headLength) && within(head.absoluteAuthority, head.headLength))
        precondition(head.fields.count <= fuzzLimits.maxHeaderCount)
        for f in head.fields {
            precondition(within(f.name, head.headLength) && within(f.value, head.headLength) && !f.name.isEmpty)
        }
        precondition(head.headLength <= fuzzLimits.maxHeaderBytes + 4 * HeadScanner.maxLeadingEmptyLines)
        if case .contentLength(let n) = head.framing { precondition(n >= 0 && n <= fuzzLimits.maxBodyBytes) }
        precondition(head.framing != .untilClose)
        let target = UnsafeRawBufferPointer(rebasing: message[head.target])
        if head.targetForm != .authority { _ = TargetNormalizer.normalize(target, form: head.targetForm) }
        if head.framing == .chunked {
            fuzzChunked(UnsafeRawBufferPointer(rebasing: message[head.headLength...]), split: 0)
        }
    }
    var second = RequestHead()
    parser.reset()
    var twoReads = parser.parse(UnsafeRawBufferPointer(rebasing: message[..<split]), into: &second)
    if twoReads == .incomplete { twoReads = parser.parse(message, into: &second) }
    precondition(twoReads == whole, "split parse disagrees: \(whole) vs \(twoReads) at \(split)")
    if whole == .complete {
        precondition(second.headLength == head.headLength && second.fields == head.fields)
    }
}

func fuzzResponse(_ message: UnsafeRawBufferPointer, split: Int) {
    for method in [HTTPMethod.get, .head] {
        var parser = ResponseHeadParser(limits: fuzzLimits)
        var head = ResponseHead()
        let whole = parser.parse(message, requestMethod: method, into: &head)
        switch whole {
        case .complete:
            precondition(head.headLength <= message.count && within(head.reasonRange, head.headLength))
            precondition((100...599).contains(head.status))
            for f in head.fields { precondition(within(f.name, head.headLength) && within(f.value, head.headLength)) }
            if head.framing == .untilClose { precondition(!head.keepAlive) }
            if method == .head { precondition(head.framing == .none) }
        case .failure(let e):
            precondition(e.status == 502)
        case .incomplete:
            break
        }
        var second = ResponseHead()
        parser.reset()
        var twoReads = parser.parse(UnsafeRawBufferPointer(rebasing: message[..<split]), requestMethod: method, into: &second)
        if twoReads == .incomplete { twoReads = parser.parse(message, requestMethod: method, into: &second) }
        precondition(twoReads == whole, "split response parse disagrees: \(whole) vs \(twoReads) at \(split)")
    }
}

/// One read and two reads decode the same data with the same result; data never exceeds the input or the limit.
func fuzzChunked(_ message: UnsafeRawBufferPointer, split: Int) {
    var decoder = ChunkedDecoder(limits: fuzzLimits)
    var wholeData = 0
    var wholeConsumed = 0
    let whole = decoder.decode(message, consumed: &wholeConsumed) { piece in
        precondition(piece.count > 0)
        wholeData += piece.count
    }
    precondition(wholeConsumed <= message.count && wholeData <= wholeConsumed)
    precondition(wholeData <= fuzzLimits.maxBodyBytes)
    if whole == .needMore { precondition(wholeConsumed == message.count) }

    decoder.reset()
    var splitData = 0
    var first = 0
    var result = decoder.decode(UnsafeRawBufferPointer(rebasing: message[..<split]), consumed: &first) { splitData += $0.count }
    var total = first
    if result == .needMore {
        precondition(first == split)
        var rest = 0
        result = decoder.decode(UnsafeRawBufferPointer(rebasing: message[split...]), consumed: &rest) { splitData += $0.count }
        total += rest
    }
    precondition(result == whole && splitData == wholeData && total == wholeConsumed, "split decode disagrees")
}

/// A normalized path is canonical: rooted, no empty, "." or ".." segments, no backslash, and stable.
func fuzzNormalizer(_ message: UnsafeRawBufferPointer) {
    for form in [RequestTargetForm.origin, .absolute] {
        guard case .success(let n) = TargetNormalizer.normalize(message, form: form) else { continue }
        let path = Array(n.path.utf8)
        precondition(path.first == 0x2F && !path.contains(0x5C))
        let segments = path.split(separator: 0x2F, omittingEmptySubsequences: false).dropFirst()
        for (k, s) in segments.enumerated() {
            precondition(!s.elementsEqual([0x2E]) && !s.elementsEqual([0x2E, 0x2E]))
            precondition(!s.isEmpty || k == segments.count - 1)
        }
        let again = path.withUnsafeBytes { TargetNormalizer.normalize($0, form: .origin) }
        precondition(again == .success(NormalizedTarget(path: n.path, query: nil)), "normalization not idempotent")
    }
}
