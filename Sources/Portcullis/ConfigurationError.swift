/// A configuration problem: which file, which key (a path such as
/// `routes[2].upstream`), on which line, and why. Printed as
/// `FILE:LINE: KEY: REASON` so editors can jump to it.
public struct ConfigurationError: Error, CustomStringConvertible, Sendable {
    public var file: String
    public var key: String
    public var line: Int?
    public var reason: String
    /// Further errors of the same file, found in the same reading (`check-config` reports
    /// every one, as `haproxy -c` does); the first is this one.
    public var more: [ConfigurationError] = []

    /// Every error, this one first.
    public var all: [ConfigurationError] {
        var first = self
        first.more = []
        return [first] + more
    }

    public init(file: String, key: String, line: Int? = nil, reason: String) {
        self.file = file
        self.key = key
        self.line = line
        self.reason = reason
    }

    /// `FILE:LINE: KEY: REASON`, one line per error.
    public var description: String {
        let location = line.map { "\(file):\($0)" } ?? file
        let first = key.isEmpty ? "\(location): \(reason)" : "\(location): \(key): \(reason)"
        return ([first] + more.map(\.description)).joined(separator: "\n")
    }
}
