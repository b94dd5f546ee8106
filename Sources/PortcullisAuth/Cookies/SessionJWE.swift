/// A compact JWE as NextAuth / Auth.js write it: `dir` key management, an
/// empty encrypted-key segment (RFC 7516 §5.2 step 10), no `zip`, no `crit`.
struct SessionJWE {
    let encryption: ContentEncryption
    /// Header `kid` bytes (Auth.js thumbprint), if any.
    let keyID: [UInt8]?
    /// The protected header segment as received: the AAD.
    let headerSegment: Range<Int>
    let iv: Range<Int>
    let ciphertext: Range<Int>
    let tag: Range<Int>

    static func parse(_ bytes: UnsafeRawBufferPointer, segments: CompactSegments) -> Result<SessionJWE, AuthFailure.Reason> {
        guard segments.count == 5, segments[1].isEmpty else { return .failure(.malformed) }
        let headerRange = segments[0]
        guard !headerRange.isEmpty, headerRange.count <= 1024, let headerLength = Base64URL.decodedLength(headerRange.count) else {
            return .failure(.malformed)
        }
        var header = [UInt8](repeating: 0, count: headerLength)
        let decoded = header.withUnsafeMutableBytes { Base64URL.decode(UnsafeRawBufferPointer(rebasing: bytes[headerRange]), into: $0) }
        guard decoded == headerLength else { return .failure(.badEncoding) }
        let document: JSONDocument
        do { document = try JSONDocument.parsingObject(header) } catch { return .failure(.badJSON) }
        guard let alg = document.member(0, "alg"), document.stringEquals(alg, Array("dir".utf8)) else {
            return .failure(.algorithmNotAllowed)
        }
        guard let encIndex = document.member(0, "enc"), let encName = document.string(encIndex),
              let encryption = ContentEncryption(rawValue: encName) else { return .failure(.algorithmNotAllowed) }
        if document.member(0, "zip") != nil || document.member(0, "crit") != nil { return .failure(.unsupportedHeader) }
        var keyID: [UInt8]?
        if let kid = document.member(0, "kid") {
            guard let value = document.stringBytes(kid) else { return .failure(.malformed) }
            keyID = value
        }
        return .success(SessionJWE(encryption: encryption, keyID: keyID, headerSegment: headerRange,
                                   iv: segments[2], ciphertext: segments[3], tag: segments[4]))
    }
}
