/// A document every gateway listener serves itself at a fixed path, before routing
/// (the identity assertion's JWKS at `/.well-known/portcullis/jwks.json`): `GET` and
/// `HEAD` get `response()`, other methods 405. No route can shadow it.
public protocol PublishedDocument: AnyObject, Sendable {
    /// The normalized request path it answers (exact match).
    var path: String { get }
    /// The current document (it may change: keys rotate).
    func response() -> LocalResponse
}

extension PublishedDocument {
    /// The answer to `method` at `path`.
    public func answer(method: UnsafeRawBufferPointer) -> LocalResponse {
        let isGet = method.elementsEqual("GET".utf8)
        guard isGet || method.elementsEqual("HEAD".utf8) else {
            return .error(405, "only GET and HEAD are allowed here", headers: [("allow", "GET, HEAD")])
        }
        return response()
    }
}
