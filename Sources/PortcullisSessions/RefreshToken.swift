import PortcullisAuth

/// The gateway's refresh tokens: `rt1.<session id>.<counter>.<MAC>`, the MAC an HMAC-SHA-256
/// (with `refresh_token.secret`) of what precedes it, base64url. Nothing is stored per token:
/// the MAC proves the gateway issued it, the session keeps its current counter. `rt1.` tells
/// the gateway's tokens from an app's own (`old_refresh_tokens: forward`).
public struct RefreshTokenFormat: Sendable {
    public static let prefix = "rt1."
    private let key: [UInt8]

    public init(secret: String) { key = Array(secret.utf8) }

    public func token(session: String, counter: UInt64) -> String {
        let body = "\(Self.prefix)\(session).\(counter)"
        return body + "." + JWTText.base64URL(HMACSHA256.mac(key: key, Array(body.utf8)))
    }

    /// The session id (32 hex digits) and counter of a token whose MAC is the gateway's;
    /// nil for anything else (compared in constant time).
    public func parse(_ token: String) -> (session: String, counter: UInt64)? {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 4, parts[0] == "rt1", parts[1].count == 32, parts[1].allSatisfy(\.isHexDigit),
              let counter = UInt64(parts[2]), parts[3].count == 43 else { return nil }
        let expected = self.token(session: String(parts[1]), counter: counter)
        guard HMACSHA256.equal(expected.utf8, token.utf8) else { return nil }
        return (String(parts[1]), counter)
    }
}
