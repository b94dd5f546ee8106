import PortcullisEdgeAuth
import PortcullisProxy

/// `GET /.well-known/portcullis/jwks.json` on every listener and the admin listener: the
/// public keys of `identity.assertion`, cacheable for five minutes (an app that meets an
/// unknown `kid` should refetch, as jose's `createRemoteJWKSet` does).
final class AssertionJWKS: PublishedDocument {
    static let wellKnownPath = "/.well-known/portcullis/jwks.json"
    let keys: AssertionKeys
    var path: String { Self.wellKnownPath }

    init(keys: AssertionKeys) { self.keys = keys }

    func response() -> LocalResponse {
        LocalResponse(status: 200, contentType: "application/json",
                      headers: [("cache-control", "public, max-age=300")], body: keys.jwks)
    }
}
