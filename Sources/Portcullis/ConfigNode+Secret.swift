import Foundation

extension ConfigNode {
    /// A secret: `{env: NAME}`, `{file: /path}` (one trailing newline trimmed) or
    /// `{value: "…"}`, exactly one of them. Errors name the key, the variable or the
    /// file and never the value.
    func secret() throws(ConfigurationError) -> String {
        var node = self
        if case .scalar = self.node {
            throw error("expected a mapping with exactly one of env, file or value (a secret is never written inline as a bare string)")
        }
        let env = try node.optional("env")
        let file = try node.optional("file")
        let value = try node.optional("value")
        try node.finish()
        let given = [env, file, value].compactMap { $0 }
        guard given.count == 1 else { throw error("needs exactly one of env, file or value") }
        let text: String
        if let env {
            let name = try env.string()
            guard let v = environment[name] else { throw env.error("environment variable \(name) is not set") }
            text = v
        } else if let file {
            let path = try file.string()
            guard let data = FileManager.default.contents(atPath: path) else {
                throw file.error("cannot read \(path) (\(FileManager.default.fileExists(atPath: path) ? "permission denied" : "no such file"))")
            }
            guard var v = String(data: data, encoding: .utf8) else { throw file.error("\(path) is not UTF-8 text") }
            if v.hasSuffix("\r\n") { v.removeLast(1) } else if v.hasSuffix("\n") { v.removeLast() }
            text = v
        } else {
            // Not `string()`: `${VAR}` substitution errors would be fine, but a literal stays literal.
            guard case .scalar(let s) = value!.node else { throw value!.error("expected a string") }
            text = s.string
        }
        guard !text.isEmpty else { throw error("the secret is empty") }
        return text
    }
}
