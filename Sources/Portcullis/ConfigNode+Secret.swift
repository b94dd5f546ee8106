import Foundation
import PortcullisTLS

extension ConfigNode {
    /// A secret, in one of the forms every secret of the file takes:
    /// `{env: NAME}`, `{file: /path}` (one trailing newline trimmed; read again on every
    /// reload, so a rotated file applies with the next reload) or `{value: "…"}`, exactly one
    /// of them; and, with `bare: true` (the keys that always took a string: a provider's
    /// `secret`, `admin.token`, `sessions.refresh_token.secret`), a plain string with
    /// `${VAR}` substitution. Errors name the key, the variable or the file, never the value.
    /// A shipped placeholder (`change-me`, `replace-me`) is refused unless the file says
    /// `demo: true`.
    func secret(bare: Bool = false) throws(ConfigurationError) -> String {
        let text: String
        if case .scalar = self.node {
            guard bare else {
                throw error("expected a mapping with exactly one of env, file or value (a secret is never written inline as a bare string)")
            }
            text = try string()
        } else {
            text = try secretMapping()
        }
        guard !text.isEmpty else { throw error("the secret is empty") }
        if !placeholdersAllowed, let marker = Self.placeholderMarkers.first(where: { text.lowercased().contains($0) }) {
            throw error("is a placeholder (it contains '\(marker)'): set the real secret (or mark a demo file with demo: true)")
        }
        return text
    }

    /// Markers of the placeholder values shipped in `Config/demo.yaml`, `deploy/compose.yaml`
    /// and `deploy/kubernetes/secrets.env`.
    static let placeholderMarkers = ["change-me", "changeme", "replace-me", "replaceme"]

    private func secretMapping() throws(ConfigurationError) -> String {
        var node = self
        let env = try node.optional("env")
        let file = try node.optional("file")
        let value = try node.optional("value")
        try node.finish()
        let given = [env, file, value].compactMap { $0 }
        guard given.count == 1 else { throw error("needs exactly one of env, file or value") }
        if let env {
            let name = try env.string()
            guard let v = environment[name] else { throw env.error("environment variable \(name) is not set") }
            return v
        }
        if let file {
            let path = try file.string()
            guard let data = FileManager.default.contents(atPath: path) else {
                throw file.error("cannot read \(path) (\(FileManager.default.fileExists(atPath: path) ? "permission denied" : "no such file"))")
            }
            guard var v = String(data: data, encoding: .utf8) else { throw file.error("\(path) is not UTF-8 text") }
            if v.hasSuffix("\r\n") { v.removeLast(1) } else if v.hasSuffix("\n") { v.removeLast() }
            return v
        }
        // Not `string()`: a literal stays literal (no `${VAR}` substitution).
        guard case .scalar(let s) = value!.node else { throw value!.error("expected a string") }
        return s.string
    }
}

extension ConfigNode {
    /// A `ca_file`: a PEM file of trusted roots, loaded once here so a missing or unreadable
    /// file, or one without a certificate, fails at start with this key's line.
    func caFile() throws(ConfigurationError) -> String {
        let path = try string()
        do { _ = try TLSClientContext(caFile: path) } catch { throw self.error(error.description) }
        return path
    }
}
