import PortcullisHTTP
import PortcullisIO

/// A parsed request as the authenticator sees it: raw head bytes plus offsets.
/// Valid only during the `authenticate` call.
public struct RequestView {
    public let bytes: UnsafeRawBufferPointer
    public let head: RequestHead
    /// Normalized path (before prefix stripping).
    public let path: String
    public let peer: SocketAddress
    public let loop: EventLoop

    /// Value bytes of every field named `name` (lower-case), in order.
    public func values(of name: StaticString, _ body: (UnsafeRawBufferPointer) -> Void) {
        for field in head.fields where HTTPBytes.equalsCaseInsensitive(bytes, field.name, name) {
            body(UnsafeRawBufferPointer(rebasing: bytes[field.value]))
        }
    }
}

/// The decision for one request.
public enum AuthOutcome {
    /// Forward without identity.
    case anonymous
    /// Forward with these headers injected (after all client identity headers were stripped).
    case identity([(name: String, value: String)])
    /// Answer locally and do not forward.
    case reject(LocalResponse)
}

/// Decides whether a request may pass and with which identity. Called on the
/// connection's loop queue; it must not block.
public protocol RequestAuthenticator: AnyObject, Sendable {
    func authenticate(_ request: RequestView, route: Route) -> AuthOutcome
}

/// The authenticator used when no provider is configured: `auth: required` routes
/// answer 401 with a Bearer challenge instead of forwarding unauthenticated traffic;
/// `optional` and `none` routes pass without identity.
public final class NoProvidersAuthenticator: RequestAuthenticator {
    let realm: String
    public init(realm: String) { self.realm = realm }

    public func authenticate(_ request: RequestView, route: Route) -> AuthOutcome {
        switch route.configuration.auth {
        case .required:
            return .reject(.error(401, "authentication required",
                                  headers: [("www-authenticate", "Bearer realm=\"\(realm)\"")]))
        case .optional, .none:
            return .anonymous
        }
    }
}
