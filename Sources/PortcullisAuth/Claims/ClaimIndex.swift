/// Token indices of the registered and common claims of one claim set,
/// found in a single pass over its members (instead of one scan per
/// lookup). Names with escapes are unescaped before matching.
struct ClaimIndex {
    enum Name: Int, CaseIterable {
        case iss, sub, aud, exp, nbf, iat, azp, jti, sid, hd, name, nonce, email, picture, authTime, emailVerified, nonceSupported

        var text: String {
            switch self {
            case .authTime: return "auth_time"
            case .emailVerified: return "email_verified"
            case .nonceSupported: return "nonce_supported"
            default: return "\(self)"
            }
        }
    }

    /// The indexed names in slot order.
    private static let packedNames: [PackedMemberName] = Name.allCases.map { name in
        Array(name.text.utf8).withUnsafeBytes { PackedMemberName($0)! }
    }
    static let slotCount = Name.allCases.count

    /// Token indices, -1 when absent. Int16 is enough (a document holds at
    /// most `JSONParser.defaultMaxTokens` tokens) and keeps the index, which
    /// travels inside `JWSToken` and `ClaimValidation`, at 34 bytes.
    private var slots: (Int16, Int16, Int16, Int16, Int16, Int16, Int16, Int16, Int16, Int16, Int16, Int16, Int16, Int16,
                        Int16, Int16, Int16) = (-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1)

    init(_ document: JSONDocument, object: Int) {
        let token = document[object]
        guard token.kind == .object else { return }
        document.withTokensAndBytes { tokens, buffer in
            ClaimIndex.packedNames.withUnsafeBufferPointer { names in
                var key = object + 1
                for _ in 0..<Int(token.count) {
                    let keyToken = tokens[key]
                    let packed: PackedMemberName?
                    if keyToken.flag {  // escaped name (rare): match its unescaped bytes
                        packed = JSONDocumentBytes.unescapedBytes(buffer, keyToken).withUnsafeBytes { PackedMemberName($0) }
                    } else {
                        packed = PackedMemberName(UnsafeRawBufferPointer(UnsafeBufferPointer(rebasing: buffer[Int(keyToken.start)..<Int(keyToken.end)])))
                    }
                    if let packed, let slot = names.firstIndex(of: packed) { set(slot, key + 1) }
                    key += 1 + Int(tokens[key + 1].span)
                }
            }
        }
    }

    private mutating func set(_ slot: Int, _ value: Int) {
        // Cannot overflow: claim sets come from one or two parses of at most
        // `defaultMaxTokens` tokens each. Trapping (not dropping) keeps a
        // broken invariant from reading as an absent `nbf` or `exp`.
        let stored = Int16(value)
        withUnsafeMutableBytes(of: &slots) { $0.storeBytes(of: stored, toByteOffset: slot * MemoryLayout<Int16>.stride, as: Int16.self) }
    }

    @inline(__always)
    subscript(_ name: Name) -> Int? {
        let value = withUnsafeBytes(of: slots) { $0.load(fromByteOffset: name.rawValue * MemoryLayout<Int16>.stride, as: Int16.self) }
        return value < 0 ? nil : Int(value)
    }

    /// The slot for an arbitrary claim name, if it is one of the indexed ones.
    static func name(for bytes: [UInt8]) -> Name? {
        guard let packed = bytes.withUnsafeBytes({ PackedMemberName($0) }), let slot = packedNames.firstIndex(of: packed) else { return nil }
        return Name(rawValue: slot)
    }
}
