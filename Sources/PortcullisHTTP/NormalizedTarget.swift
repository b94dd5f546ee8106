/// A request-target reduced to the one spelling routing decisions are made on.
public struct NormalizedTarget: Sendable, Equatable {
    /// The normalized path: starts with '/' (or is "*" for asterisk-form).
    public var path: String
    /// The query as sent, without the '?', or nil when there was no '?'.
    public var query: String?

    public init(path: String, query: String?) {
        self.path = path
        self.query = query
    }
}
