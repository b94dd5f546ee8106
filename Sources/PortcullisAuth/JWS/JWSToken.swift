/// A compact JWS whose header and payload have been decoded and parsed, but
/// whose signature has not been checked yet.
///
/// Header rules applied here, for every provider (RFC 7515, RFC 8725):
/// `alg` must be a string naming a known algorithm (`none` never is); `crit`
/// and `zip` are refused; `kid` must be a string of at most 256 bytes when
/// present; `typ` must be a string when present. `jku`, `x5u`, `jwk`, `x5c`
/// are ignored: keys only ever come from configuration.
struct JWSToken {
    /// Default limit on a whole compact token.
    static let defaultMaxSize = 16 * 1024

    /// Decoded header then payload bytes, with their JSON tokens.
    let document: JSONDocument
    let header: Int
    let payload: Int
    /// The payload's registered claims, indexed once for every provider tried.
    let claims: ClaimIndex
    let algorithm: JWSAlgorithm
    /// Token index of the header's `kid` string, if any.
    let keyID: Int?
    /// Token index of the header's `typ` string, if any.
    let type: Int?
    /// `header.payload` in the original bytes.
    let signingInput: Range<Int>
    let signature: Range<Int>

    static func parse(_ bytes: UnsafeRawBufferPointer, segments: CompactSegments) -> Result<JWSToken, AuthFailure.Reason> {
        Result { () throws(AuthFailure.Reason) in try parsed(bytes, segments: segments) }
    }

    /// As `parse`, throwing: the token is returned directly instead of being
    /// copied out of a `Result` (it is ~120 bytes) on the hot path.
    static func parsed(_ bytes: UnsafeRawBufferPointer, segments: CompactSegments) throws(AuthFailure.Reason) -> JWSToken {
        guard segments.count == 3 else { throw .malformed }
        let headerRange = segments[0], payloadRange = segments[1], signatureRange = segments[2]
        guard !headerRange.isEmpty, !payloadRange.isEmpty else { throw .malformed }
        guard let headerLength = Base64URL.decodedLength(headerRange.count),
              let payloadLength = Base64URL.decodedLength(payloadRange.count),
              Base64URL.decodedLength(signatureRange.count) != nil else { throw .badEncoding }

        // Decoded into temporary storage and parsed into temporary tokens, then
        // copied into one document object: one allocation in all (it was three:
        // the decoded bytes, the token array and the document).
        let decodedLength = headerLength + payloadLength
        let parsed = withUnsafeTemporaryAllocation(of: UInt8.self, capacity: decodedLength) { decoded -> Result<(JSONDocument, Int, Int), AuthFailure.Reason> in
            let raw = UnsafeMutableRawBufferPointer(decoded)
            guard Base64URL.decode(UnsafeRawBufferPointer(rebasing: bytes[headerRange]),
                                   into: UnsafeMutableRawBufferPointer(rebasing: raw[0..<headerLength])) != nil,
                  Base64URL.decode(UnsafeRawBufferPointer(rebasing: bytes[payloadRange]),
                                   into: UnsafeMutableRawBufferPointer(rebasing: raw[headerLength...])) != nil else {
                return .failure(.badEncoding)
            }
            let text = UnsafeBufferPointer(decoded)
            let bound = JSONParser.tokenBound(byteCount: headerLength) + JSONParser.tokenBound(byteCount: payloadLength)
            do {
                return .success(try JSONDocument.withTokenStorage(bound: bound) { tokens throws(JSONError) in
                    var count = 0
                    let header = try JSONDocument.parseObject(text, range: 0..<headerLength, tokens: tokens, count: &count)
                    let payload = try JSONDocument.parseObject(text, range: headerLength..<decodedLength, tokens: tokens, count: &count)
                    return (JSONDocument.make(tokens: UnsafeBufferPointer(rebasing: tokens[0..<count]), bytes: text), header, payload)
                })
            } catch {
                return .failure(.badJSON)
            }
        }
        let document: JSONDocument, header: Int, payload: Int
        switch parsed {
        case .success(let value): (document, header, payload) = value
        case .failure(let reason): throw reason
        }

        let members = HeaderMembers(document, header: header)
        guard let alg = members.alg, document[alg].kind == .string else { throw .malformed }
        guard let algorithm = JWSToken.algorithm(document, alg) else { throw .algorithmNotAllowed }
        if members.hasUnsupported { throw .unsupportedHeader }
        let kid = members.kid
        if let kid, document[kid].kind != .string || document[kid].end - document[kid].start > 256 {
            throw .malformed
        }
        let type = members.typ
        if let type, document[type].kind != .string { throw .malformed }

        return JWSToken(
            document: document, header: header, payload: payload, claims: ClaimIndex(document, object: payload), algorithm: algorithm, keyID: kid, type: type,
            signingInput: headerRange.lowerBound..<payloadRange.upperBound, signature: signatureRange)
    }

    private static let algorithmNames: [(JWSAlgorithm, PackedMemberName)] = JWSAlgorithm.allCases.map { algorithm in
        (algorithm, algorithm.nameBytes.withUnsafeBytes { PackedMemberName($0)! })
    }

    /// The algorithm a string token names, compared as packed integers
    /// (an escaped spelling is unescaped first).
    private static func algorithm(_ document: JSONDocument, _ index: Int) -> JWSAlgorithm? {
        let token = document[index]
        let packed: PackedMemberName?
        if token.flag {
            packed = document.stringBytes(index).flatMap { bytes in bytes.withUnsafeBytes { PackedMemberName($0) } }
        } else {
            packed = document.withBytes { PackedMemberName($0, token) }
        }
        guard let packed else { return nil }
        for (algorithm, name) in algorithmNames where name == packed { return algorithm }
        return nil
    }

    /// The header members the rules look at, found in one pass over the
    /// header (escaped names unescaped first).
    private struct HeaderMembers {
        var alg: Int?
        var kid: Int?
        var typ: Int?
        /// `crit` or `zip` present.
        var hasUnsupported = false

        private static let names: [PackedMemberName] = ["alg", "kid", "typ", "crit", "zip"].map { name in
            Array(name.utf8).withUnsafeBytes { PackedMemberName($0)! }
        }

        init(_ document: JSONDocument, header: Int) {
            document.withTokensAndBytes { tokens, buffer in
                var key = header + 1
                for _ in 0..<Int(tokens[header].count) {
                    let keyToken = tokens[key]
                    let packed = keyToken.flag
                        ? JSONDocumentBytes.unescapedBytes(buffer, keyToken).withUnsafeBytes { PackedMemberName($0) }
                        : PackedMemberName(buffer, keyToken)
                    if let packed, let slot = HeaderMembers.names.firstIndex(of: packed) {
                        switch slot {
                        case 0: alg = key + 1
                        case 1: kid = key + 1
                        case 2: typ = key + 1
                        default: hasUnsupported = true
                        }
                    }
                    key += 1 + Int(tokens[key + 1].span)
                }
            }
        }
    }

    /// Whether `typ` is acceptable: absent, or equal (ASCII case-insensitively)
    /// to one of `accepted` (lower-cased).
    func typeAccepted(_ accepted: [[UInt8]]) -> Bool {
        guard let type else { return true }
        let token = document[type]
        guard token.kind == .string else { return false }
        @inline(__always) func lowered(_ byte: UInt8) -> UInt8 { byte >= 0x41 && byte <= 0x5A ? byte | 0x20 : byte }
        if token.flag {  // escaped (rare): compare the unescaped value
            guard let value = document.stringBytes(type) else { return false }
            return accepted.contains(value.map(lowered))
        }
        // Compared in place: no copy of the value per token.
        return document.withBytes { buffer in
            let start = Int(token.start), length = Int(token.end - token.start)
            return accepted.contains { candidate in
                guard candidate.count == length else { return false }
                for offset in 0..<length where lowered(buffer[start + offset]) != candidate[offset] { return false }
                return true
            }
        }
    }
}
