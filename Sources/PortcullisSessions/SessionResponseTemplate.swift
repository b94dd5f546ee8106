import Foundation
import PortcullisAuth
import PortcullisCore

/// `sessions.response`: the JSON shape of the exchange's and the refresh's answer, for
/// clients that already decode another one (RVU Tracker's `{"success", "user",
/// "sessionToken", "expiresIn"}`, golfai's `is_new_user`/`user_profile`). A JSON object with
/// placeholders that become JSON values:
///
/// - `{access_token}`, `{refresh_token}`, `{token_type}`, `{expires_in}`, `{session_id}`,
///   `{user_id}`: the pair, as in the default answer;
/// - `{claim.NAME}`: a claim of the session (`carry_claims`, the lookup hook's claims; at the
///   exchange also any claim of the verified ID token), typed; `null` when absent;
/// - `{lookup.NAME}`: a member of the lookup hook's answer at the exchange (`user`,
///   `is_new_user`), typed; `null` when absent and at a refresh.
///
/// The answer is always built from what the session holds, so racing refreshes still get
/// byte-identical answers. Parsed once at load; a refusal keeps the error shape.
public struct SessionResponseTemplate: Sendable, Equatable {
    enum Part: Sendable, Equatable {
        case text(String)
        case field(String)
        case claim(String)
        case lookup(String)
    }
    let parts: [Part]

    static let fields: Set<String> = ["access_token", "refresh_token", "token_type", "expires_in", "session_id", "user_id"]

    public struct Invalid: Error, Sendable { public let reason: String }

    public static func parse(_ text: String) -> Result<SessionResponseTemplate, Invalid> {
        var parts: [Part] = []
        var literal = ""
        var rest = Substring(text)
        while let open = rest.firstIndex(of: "{") {
            literal += rest[..<open]
            let after = rest.index(after: open)
            guard let close = rest[after...].firstIndex(of: "}"),
                  case let name = rest[after..<close], !name.isEmpty,
                  name.allSatisfy({ $0.isLetter || $0.isNumber || $0 == "_" || $0 == "." || $0 == "-" }) else {
                literal.append("{")
                rest = rest[after...]
                continue
            }
            let placeholder: Part
            if name.hasPrefix("claim."), name.count > 6 { placeholder = .claim(String(name.dropFirst(6))) }
            else if name.hasPrefix("lookup."), name.count > 7 { placeholder = .lookup(String(name.dropFirst(7))) }
            else if fields.contains(String(name)) { placeholder = .field(String(name)) }
            else {
                return .failure(Invalid(reason: "unknown placeholder {\(name)} (known: \(fields.sorted().map { "{\($0)}" }.joined(separator: ", ")), {claim.NAME}, {lookup.NAME})"))
            }
            if !literal.isEmpty { parts.append(.text(literal)); literal = "" }
            parts.append(placeholder)
            rest = rest[rest.index(after: close)...]
        }
        literal += rest
        if !literal.isEmpty { parts.append(.text(literal)) }
        let template = SessionResponseTemplate(parts: parts)
        guard parts.contains(.field("access_token")), parts.contains(.field("refresh_token")) else {
            return .failure(Invalid(reason: "the answer must carry {access_token} and {refresh_token}"))
        }
        let sample = template.render { _ in .string("x\"y") }
        guard let object = try? JSONSerialization.jsonObject(with: Data(sample.utf8)), object is [String: Any] else {
            return .failure(Invalid(reason: "not a JSON object once its placeholders are filled in"))
        }
        return .success(template)
    }

    /// The answer; `value` gives each placeholder's JSON value (nil: `null`).
    func render(_ value: (Part) -> JSONValue?) -> String {
        var body = ""
        for part in parts {
            if case .text(let text) = part { body += text; continue }
            body += value(part)?.serialized ?? "null"
        }
        return body
    }
}
