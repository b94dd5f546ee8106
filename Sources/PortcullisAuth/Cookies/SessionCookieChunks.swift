/// Finds a session cookie's value among the request's cookies (rule book
/// §1a "Chunking"): names must match `^<name>(\.(0|[1-9]\d*))?$` exactly;
/// the unsuffixed cookie is tried first, then the chunks, which must run
/// contiguously from `.0` and are joined in numeric order. Empty values are
/// ignored (Auth.js).
enum SessionCookieChunks {
    static let maxChunks = 16
    static let maxJoinedSize = 64 * 1024

    enum Candidate {
        /// An unsuffixed cookie value (no copy).
        case whole(Substring)
        /// Joined chunks.
        case joined([UInt8])
    }

    /// Candidates in the order to try; `.failure` when chunks are present
    /// but unusable (a gap, a duplicate index, too many, too large).
    static func candidates(named name: String, in cookies: [(name: Substring, value: Substring)]) -> Result<[Candidate], AuthFailure.Reason> {
        var wholes = [Candidate]()
        var chunks = [(index: Int, value: Substring)]()
        for cookie in cookies where cookie.name.hasPrefix(name) && !cookie.value.isEmpty {
            let rest = cookie.name.utf8.dropFirst(name.utf8.count)
            if rest.isEmpty {
                wholes.append(.whole(cookie.value))
                continue
            }
            guard rest.first == UInt8(ascii: "."), let index = chunkIndex(rest.dropFirst()) else { continue }
            chunks.append((index, cookie.value))
        }
        guard !chunks.isEmpty else { return .success(wholes) }
        guard chunks.count <= maxChunks else { return .failure(.malformedCookie) }
        chunks.sort { $0.index < $1.index }
        var joined = [UInt8]()
        var position = 0
        for (i, chunk) in chunks.enumerated() {
            // The same chunk twice: harmless when identical, two credentials when not.
            if i > 0 && chunks[i - 1].index == chunk.index {
                if chunks[i - 1].value == chunk.value { continue }
                return .failure(.ambiguousCredential)
            }
            guard chunk.index == position else { return .failure(.incompleteCookie) }  // a chunk is missing
            position += 1
            joined.append(contentsOf: chunk.value.utf8)
            guard joined.count <= maxJoinedSize else { return .failure(.malformedCookie) }
        }
        return .success(wholes + [.joined(joined)])
    }

    /// `0|[1-9][0-9]*`, at most 3 digits.
    private static func chunkIndex(_ digits: Substring.UTF8View.SubSequence) -> Int? {
        guard !digits.isEmpty, digits.count <= 3 else { return nil }
        if digits.first == UInt8(ascii: "0") && digits.count > 1 { return nil }
        var value = 0
        for digit in digits {
            guard digit >= UInt8(ascii: "0"), digit <= UInt8(ascii: "9") else { return nil }
            value = value * 10 + Int(digit - UInt8(ascii: "0"))
        }
        return value
    }
}
