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

    /// (UTF-8 name, slot), for matching.
    private static let names: [([UInt8], Int)] = Name.allCases.map { (Array($0.text.utf8), $0.rawValue) }
    static let slotCount = Name.allCases.count

    /// -1 when absent.
    private var slots: (Int, Int, Int, Int, Int, Int, Int, Int, Int, Int, Int, Int, Int, Int, Int, Int, Int) =
        (-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1)

    init(_ document: JSONDocument, object: Int) {
        let token = document[object]
        guard token.kind == .object else { return }
        document.bytes.withUnsafeBufferPointer { buffer in
            document.tokens.withUnsafeBufferPointer { tokens in
                ClaimIndex.names.withUnsafeBufferPointer { names in
                    var key = object + 1
                    for _ in 0..<Int(token.count) {
                        let keyToken = tokens[key]
                        let length = Int(keyToken.end &- keyToken.start)
                        for (name, slot) in names where name.count == length || keyToken.flag {
                            let matched = name.withUnsafeBytes { JSONDocumentBytes.stringEquals(buffer, keyToken, $0) }
                            if matched {
                                set(slot, key + 1)
                                break
                            }
                        }
                        key += 1 + Int(tokens[key + 1].span)
                    }
                }
            }
        }
    }

    private mutating func set(_ slot: Int, _ value: Int) {
        withUnsafeMutableBytes(of: &slots) { $0.storeBytes(of: value, toByteOffset: slot * MemoryLayout<Int>.stride, as: Int.self) }
    }

    @inline(__always)
    subscript(_ name: Name) -> Int? {
        let value = withUnsafeBytes(of: slots) { $0.load(fromByteOffset: name.rawValue * MemoryLayout<Int>.stride, as: Int.self) }
        return value < 0 ? nil : value
    }

    /// The slot for an arbitrary claim name, if it is one of the indexed ones.
    static func name(for bytes: [UInt8]) -> Name? {
        names.first { $0.0 == bytes }.flatMap { Name(rawValue: $0.1) }
    }
}
