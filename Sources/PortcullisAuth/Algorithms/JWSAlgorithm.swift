/// A JWS signature algorithm (RFC 7518 §3, RFC 8037). `none` is not one.
public enum JWSAlgorithm: String, Sendable, CaseIterable, Hashable {
    case hs256 = "HS256", hs384 = "HS384", hs512 = "HS512"
    case rs256 = "RS256", rs384 = "RS384", rs512 = "RS512"
    case ps256 = "PS256", ps384 = "PS384", ps512 = "PS512"
    case es256 = "ES256", es384 = "ES384"
    case edDSA = "EdDSA"

    /// The `alg` value as UTF-8 bytes, for allocation-free comparison.
    var nameBytes: [UInt8] { Array(rawValue.utf8) }

    var digest: FetchedDigest? {
        switch self {
        case .hs256, .rs256, .ps256, .es256: return .sha256
        case .hs384, .rs384, .ps384, .es384: return .sha384
        case .hs512, .rs512, .ps512: return .sha512
        case .edDSA: return nil
        }
    }

    /// One bit per algorithm: a provider's allowed set is a mask, so the
    /// per-token check is an AND rather than a hashed `Set` lookup.
    var bit: UInt16 {
        switch self {
        case .hs256: return 1 << 0
        case .hs384: return 1 << 1
        case .hs512: return 1 << 2
        case .rs256: return 1 << 3
        case .rs384: return 1 << 4
        case .rs512: return 1 << 5
        case .ps256: return 1 << 6
        case .ps384: return 1 << 7
        case .ps512: return 1 << 8
        case .es256: return 1 << 9
        case .es384: return 1 << 10
        case .edDSA: return 1 << 11
        }
    }

    var isHMAC: Bool { self == .hs256 || self == .hs384 || self == .hs512 }
    var isRSA: Bool { [.rs256, .rs384, .rs512, .ps256, .ps384, .ps512].contains(self) }
    var isPSS: Bool { self == .ps256 || self == .ps384 || self == .ps512 }
    var isECDSA: Bool { self == .es256 || self == .es384 }

    /// The OpenSSL group an ECDSA algorithm requires.
    var curve: ECCurve? {
        switch self {
        case .es256: return .p256
        case .es384: return .p384
        default: return nil
        }
    }
}

/// NIST curves used by ES256/ES384.
enum ECCurve: Sendable {
    case p256, p384

    var jwkName: String { self == .p256 ? "P-256" : "P-384" }
    var opensslGroup: String { self == .p256 ? "prime256v1" : "secp384r1" }
    var coordinateSize: Int { self == .p256 ? 32 : 48 }

    /// The group order n, big-endian; ECDSA r and s must lie in [1, n-1].
    var order: [UInt8] {
        switch self {
        case .p256:
            return [0xFF, 0xFF, 0xFF, 0xFF, 0x00, 0x00, 0x00, 0x00, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
                    0xBC, 0xE6, 0xFA, 0xAD, 0xA7, 0x17, 0x9E, 0x84, 0xF3, 0xB9, 0xCA, 0xC2, 0xFC, 0x63, 0x25, 0x51]
        case .p384:
            return [0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
                    0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xC7, 0x63, 0x4D, 0x81, 0xF4, 0x37, 0x2D, 0xDF,
                    0x58, 0x1A, 0x0D, 0xB2, 0x48, 0xB0, 0xA7, 0x7A, 0xEC, 0xEC, 0x19, 0x6A, 0xCC, 0xC5, 0x29, 0x73]
        }
    }
}
