/// A configuration problem: which file, which key (a path such as
/// `routes[2].upstream`), on which line, and why. Printed as
/// `FILE:LINE: KEY: REASON` so editors can jump to it.
public struct ConfigurationError: Error, CustomStringConvertible, Sendable {
    public var file: String
    public var key: String
    public var line: Int?
    public var reason: String

    public init(file: String, key: String, line: Int? = nil, reason: String) {
        self.file = file
        self.key = key
        self.line = line
        self.reason = reason
    }

    public var description: String {
        let location = line.map { "\(file):\($0)" } ?? file
        return key.isEmpty ? "\(location): \(reason)" : "\(location): \(key): \(reason)"
    }
}
