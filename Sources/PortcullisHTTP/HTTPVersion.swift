/// The HTTP/1.x versions the codec accepts; any other well-formed version is answered with 505.
public enum HTTPVersion: Sendable, Equatable {
    case http10
    case http11
}
