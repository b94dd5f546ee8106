import Foundation
import PortcullisAuth
import PortcullisCore
import PortcullisProxy

/// Which session endpoint a route is (an exchange with its own member and providers).
public enum SessionRouteKind: Sendable, Equatable, CustomStringConvertible {
    case exchange(SessionSettings.Exchange), refresh, logout, sessions

    public var description: String {
        switch self {
        case .exchange: return "exchange"
        case .refresh: return "refresh"
        case .logout: return "logout"
        case .sessions: return "sessions"
        }
    }
}

/// One session endpoint, answered by the gateway after the route's authentication (see
/// `SessionService`). `kind` says which.
public final class SessionEndpoint: RouteHandler, @unchecked Sendable {
    // @unchecked Sendable: immutable.
    let kind: SessionRouteKind
    let service: SessionService
    public var bodyLimit: Int { 64 * 1024 }
    /// A device's name (`device_name`, else the User-Agent) is kept to this many characters.
    static let maxDeviceNameLength = 64

    public init(_ kind: SessionRouteKind, service: SessionService) {
        self.kind = kind
        self.service = service
    }

    /// On an app's own refresh path (`sessions.paths.refresh` equal to an `auth: none` route's
    /// path, merged at load: see `ConfigurationLoader.addSessionRoutes`), a refresh token
    /// that is not the gateway's (no `rt1.` prefix) goes to the app as before, so the clients
    /// signed in before the move keep refreshing until they sign in again. Asked only on
    /// such a route (it has an upstream).
    public func forwardsInstead(_ request: RequestView, body: UnsafeRawBufferPointer) -> Bool {
        guard kind == .refresh else { return false }
        switch SessionService.refreshToken(request, body: body) {
        case .success(let token?): return !token.hasPrefix(SessionService.refreshTokenPrefix)
        case .success(nil), .failure: return true  // whatever the app made of it before
        }
    }

    public func handle(_ request: RequestView, body: UnsafeRawBufferPointer, grant: AuthGrant?, reply: LocalReply) -> LocalResponse? {
        let service = self.service
        if service.settings.requireTLS && !reply.secure {
            return service.oauthError(403, "invalid_request", "Session endpoints answer over HTTPS only")
        }
        let now = Int64(WallClock.nowSeconds())
        switch kind {
        case .exchange(let endpoint): return exchange(endpoint, request, body: body, grant: grant, reply: reply, now: now)
        case .refresh: return refresh(request, body: body, grant: grant, reply: reply, now: now)
        case .logout: return logout(request, body: body, grant: grant, reply: reply, now: now)
        case .sessions: return sessions(request, body: body, grant: grant, reply: reply, now: now)
        }
    }

    /// `{"sessions": [{id, device, provider, created_at, last_used_at, current}]}`; the admin
    /// API's list (no current session) adds the user.
    public static func listJSON(_ records: [SessionRecord], current: String?) -> String {
        let items = records.map { r in
            "{\"id\":\(JSONText.quoted(r.id)),\"device\":\(JSONText.quoted(r.device)),\"provider\":\(JSONText.quoted(r.provider)),"
                + "\"created_at\":\(r.createdAt),\"last_used_at\":\(r.lastUsedAt)"
                + (current.map { ",\"current\":\(r.id == $0)" } ?? ",\"user\":\(JSONText.quoted(r.user))") + "}"
        }
        return "{\"sessions\":[\(items.joined(separator: ","))]}"
    }

    /// In the endpoints' refusal shape, as every other answer of theirs.
    func methodNotAllowed(_ allowed: String) -> LocalResponse {
        var response = service.oauthError(405, "invalid_request", "Method not allowed (allowed: \(allowed))")
        response.headers.append(("allow", allowed))
        return response
    }

    /// 128 random bits, hex.
    static func sessionID() -> String {
        var random = SystemRandomNumberGenerator()
        let words = (random.next() as UInt64, random.next() as UInt64)
        func hex(_ v: UInt64) -> String { let s = String(v, radix: 16); return String(repeating: "0", count: 16 - s.count) + s }
        return hex(words.0) + hex(words.1)
    }
}
