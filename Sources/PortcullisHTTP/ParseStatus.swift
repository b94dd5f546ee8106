/// The outcome of feeding bytes to a head parser.
public enum ParseStatus: Sendable, Equatable {
    /// The head is not complete yet: call again with the same bytes plus more.
    case incomplete
    /// The head is complete; its length is in `headLength`.
    case complete
    /// The message is invalid; answer `error.status` and close the connection.
    case failure(HTTPParseError)
}
