import PortcullisHTTP
import PortcullisProxy

/// The admin listener (loopback by default): `/healthz` (the process runs) and
/// `/readyz` (listeners are up and not draining) answer without a token, as load
/// balancers expect; every other admin endpoint needs `Authorization: Bearer
/// <admin.token>` and is refused when no token is configured.
public final class AdminHandler: LocalHandler, @unchecked Sendable {
    // @unchecked Sendable: `state` is read-only after start except `draining`, a
    // benign flag written once at shutdown.
    let token: String?
    public var draining = false

    init(token: String?) { self.token = token }

    public func handle(_ request: RequestView, body: UnsafeRawBufferPointer) -> LocalResponse {
        switch request.path {
        case "/healthz":
            return .json(200, "{\"status\":\"ok\"}\n")
        case "/readyz":
            return draining ? .json(503, "{\"status\":\"draining\"}\n") : .json(200, "{\"status\":\"ready\"}\n")
        default:
            guard let token else {
                return .error(404, "no such admin endpoint")
            }
            var presented: [UInt8]?
            request.values(of: "authorization") { value in presented = Array(value) }
            guard let presented, presented.count == token.utf8.count + 7,
                  String(decoding: presented.prefix(7), as: UTF8.self).lowercased() == "bearer ",
                  constantTimeEqual(Array(presented.dropFirst(7)), Array(token.utf8)) else {
                return .error(401, "admin token required",
                              headers: [("www-authenticate", "Bearer realm=\"portcullis-admin\"")])
            }
            return .error(404, "no such admin endpoint")
        }
    }
}

func constantTimeEqual(_ a: [UInt8], _ b: [UInt8]) -> Bool {
    guard a.count == b.count else { return false }
    var diff: UInt8 = 0
    for i in 0..<a.count { diff |= a[i] ^ b[i] }
    return diff == 0
}
