import Foundation
import Yams

/// A YAML node with its key path, for reading configuration with precise errors.
/// Every mapping read through `ConfigNode` must account for all of its keys
/// (`finish()` reports the first unknown one), so typos fail at start.
struct ConfigNode {
    let node: Node
    let path: String
    let file: String
    let environment: [String: String]
    /// `demo: true` at the top of the file: the shipped placeholder secrets (`change-me`) are
    /// accepted (see `secret`). Set before any other key is read; every child inherits it.
    var placeholdersAllowed = false
    private(set) var usedKeys: Set<String> = []

    init(node: Node, path: String, file: String, environment: [String: String]) {
        self.node = node
        self.path = path
        self.file = file
        self.environment = environment
    }

    var line: Int? { node.mark.map { $0.line } }

    func error(_ reason: String, key: String? = nil, at node: Node? = nil) -> ConfigurationError {
        let fullKey = key.map { path.isEmpty ? $0 : "\(path).\($0)" } ?? path
        return ConfigurationError(file: file, key: fullKey, line: (node ?? self.node).mark?.line, reason: reason)
    }

    func child(_ node: Node, key: String) -> ConfigNode {
        var child = ConfigNode(node: node, path: path.isEmpty ? key : "\(path).\(key)", file: file, environment: environment)
        child.placeholdersAllowed = placeholdersAllowed
        return child
    }

    func mapping() throws(ConfigurationError) -> Node.Mapping {
        guard case .mapping(let m) = node else { throw error("expected a mapping (key: value)") }
        return m
    }

    /// The value of `key` in this mapping, marking the key as known.
    mutating func optional(_ key: String) throws(ConfigurationError) -> ConfigNode? {
        let m = try mapping()
        usedKeys.insert(key)
        for (k, v) in m where k.string == key {
            if case .scalar(let s) = v, s.tag.rawValue == Tag.Name.null.rawValue || (s.string.isEmpty && s.style == .plain) {
                return nil
            }
            return child(v, key: key)
        }
        return nil
    }

    mutating func required(_ key: String) throws(ConfigurationError) -> ConfigNode {
        guard let value = try optional(key) else { throw error("is required", key: key) }
        return value
    }

    /// Fails on the first key this mapping has that was never asked for.
    func finish() throws(ConfigurationError) {
        let m = try mapping()
        for (k, _) in m {
            let name = k.string ?? "?"
            if !usedKeys.contains(name) {
                let hint = Self.nearest(name, among: usedKeys).map { " (did you mean '\($0)'?)" } ?? ""
                throw ConfigurationError(file: file, key: path.isEmpty ? name : "\(path).\(name)",
                                         line: k.mark?.line, reason: "unknown key\(hint)")
            }
        }
    }

    /// The known key closest to `name`: the same up to case and `-`/`_`, or within two edits
    /// (`projectId` → `project_id`, `jwks_uri` → `jwks_url`); nil when none is that close.
    static func nearest(_ name: String, among known: Set<String>) -> String? {
        func folded(_ text: String) -> [Character] { Array(text.lowercased().filter { $0 != "_" && $0 != "-" }) }
        let target = folded(name)
        var best: (key: String, distance: Int)?
        for key in known.sorted() {
            let candidate = folded(key)
            let distance = editDistance(target, candidate)
            if distance <= 2, distance < (best?.distance ?? .max) { best = (key, distance) }
        }
        return best?.key
    }

    private static func editDistance(_ a: [Character], _ b: [Character]) -> Int {
        if a.isEmpty || b.isEmpty { return max(a.count, b.count) }
        var previous = Array(0...b.count)
        var current = previous
        for i in 1...a.count {
            current[0] = i
            for j in 1...b.count {
                current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1))
            }
            swap(&previous, &current)
        }
        return previous[b.count]
    }

    // MARK: Scalars

    /// A string with `${VAR}` / `${VAR:-default}` replaced from the environment.
    func string() throws(ConfigurationError) -> String {
        guard case .scalar(let s) = node else { throw error("expected a string") }
        return try substitute(s.string)
    }

    func substitute(_ text: String) throws(ConfigurationError) -> String {
        guard text.contains("${") else { return text }
        var out = ""
        var rest = Substring(text)
        while let start = rest.range(of: "${") {
            out += rest[..<start.lowerBound]
            guard let end = rest[start.upperBound...].firstIndex(of: "}") else {
                throw error("unterminated ${ in value")
            }
            let expression = rest[start.upperBound..<end]
            let name: Substring
            var fallback: Substring?
            if let dash = expression.range(of: ":-") {
                name = expression[..<dash.lowerBound]
                fallback = expression[dash.upperBound...]
            } else {
                name = expression
            }
            guard !name.isEmpty, name.allSatisfy({ $0.isLetter || $0.isNumber || $0 == "_" }) else {
                throw error("invalid environment variable reference ${\(expression)}")
            }
            if let value = environment[String(name)], !value.isEmpty {
                out += value
            } else if let fallback {
                out += fallback
            } else {
                throw error("environment variable \(name) is not set")
            }
            rest = rest[rest.index(after: end)...]
        }
        return out + rest
    }

    func int(min: Int? = nil, max: Int? = nil) throws(ConfigurationError) -> Int {
        let text = try string()
        guard let v = Int(text) else { throw error("expected an integer, got '\(text)'") }
        if let min, v < min { throw error("must be at least \(min)") }
        if let max, v > max { throw error("must be at most \(max)") }
        return v
    }

    func bool() throws(ConfigurationError) -> Bool {
        switch try string().lowercased() {
        case "true", "yes", "on": return true
        case "false", "no", "off": return false
        case let other: throw error("expected true or false, got '\(other)'")
        }
    }

    func duration() throws(ConfigurationError) -> Double {
        let text = try string()
        guard let v = parseDurationSeconds(text) else {
            throw error("expected a duration such as 500ms, 30s, 5m, 12h, 30d (at most 100 years), got '\(text)'")
        }
        return v
    }

    func byteSize() throws(ConfigurationError) -> Int {
        let text = try string()
        guard let v = parseByteSize(text) else { throw error("expected a size such as 8192, 64KiB, 10MiB, got '\(text)'") }
        return v
    }

    func sequence() throws(ConfigurationError) -> [ConfigNode] {
        guard case .sequence(let s) = node else { throw error("expected a list") }
        return s.enumerated().map { i, n in
            var item = ConfigNode(node: n, path: "\(path)[\(i)]", file: file, environment: environment)
            item.placeholdersAllowed = placeholdersAllowed
            return item
        }
    }

    func stringList() throws(ConfigurationError) -> [String] {
        var out: [String] = []
        for item in try sequence() { out.append(try item.string()) }
        return out
    }

    /// Key/value pairs of a mapping, in order.
    func entries() throws(ConfigurationError) -> [(key: String, value: ConfigNode)] {
        try mapping().map { k, v in
            let key = k.string ?? "?"
            return (key, child(v, key: key))
        }
    }
}

import PortcullisCore
