/// Why a key, key set or secret was refused at load time.
public enum KeyLoadingError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The JWKS / certificate map is not valid JSON of the expected shape.
    case invalidDocument(String)
    /// A JWK lacks a member or has one that does not decode.
    case invalidMember(kid: String?, member: String)
    /// The key is too weak (RSA < 2048 bits, HMAC secret < 32 bytes).
    case weakKey(String)
    /// The key's type cannot serve the algorithm.
    case algorithmMismatch(String, keyType: String)
    /// An EC key is not on the curve its algorithm requires.
    case curveMismatch(expected: String, found: String)
    /// A PEM block could not be read.
    case invalidPEM(String)
    /// Two keys in one set share a `kid`.
    case duplicateKeyID(String)
    /// The key type or algorithm is not supported here.
    case unsupported(String)
    /// OpenSSL refused the key material.
    case openSSL(OpenSSLError)

    public var description: String {
        switch self {
        case .invalidDocument(let what): return "invalid key document: \(what)"
        case .invalidMember(let kid, let member): return "key \(kid ?? "(no kid)"): member '\(member)' missing or invalid"
        case .weakKey(let what): return "key refused: \(what)"
        case .algorithmMismatch(let alg, let keyType): return "a \(keyType) key cannot serve \(alg)"
        case .curveMismatch(let expected, let found): return "EC key on \(found), algorithm requires \(expected)"
        case .invalidPEM(let what): return "invalid PEM: \(what)"
        case .duplicateKeyID(let kid): return "duplicate kid '\(kid)' in one key set"
        case .unsupported(let what): return "unsupported: \(what)"
        case .openSSL(let error): return error.description
        }
    }
}
