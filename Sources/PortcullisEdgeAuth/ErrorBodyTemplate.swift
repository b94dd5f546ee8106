import Foundation
import PortcullisCore

/// The JSON body of an auth refusal (401, 403, 400, 503), in the shape the app's clients
/// parse. Status and `WWW-Authenticate` never change; only the body does.
///
/// `identity.error_body` sets it for every route, a route's `error_body` for that route:
/// - `oauth` (the default): `{"error":"<code>","error_description":"<description>"}` (RFC 6750);
/// - `detail`: `{"detail": "<description>"}` (FastAPI's `HTTPException`);
/// - `message`: `{"message": "<description>"}` (Express and Next.js API routes);
/// - or a JSON template in which `{error}`, `{description}` and `{status}` are replaced by
///   the refusal's code and description as JSON strings and its status as a number, e.g.
///   `'{"ok": false, "error": {"code": {error}, "message": {description}}}'`.
///
/// The template is split into literal text and placeholders once, at start; a refusal
/// only concatenates.
public struct ErrorBodyTemplate: Sendable, Equatable {
    enum Part: Sendable, Equatable {
        case text(String)
        case error, description, status
    }
    let parts: [Part]

    public static let oauth = ErrorBodyTemplate(#"{"error":{error},"error_description":{description}}"#)

    private init(_ template: String) {
        var parts: [Part] = []
        var rest = Substring(template)
        while let open = rest.firstIndex(of: "{") {
            let placeholders: [(String, Part)] = [("{error}", .error), ("{description}", .description), ("{status}", .status)]
            guard let (token, part) = placeholders.first(where: { rest[open...].hasPrefix($0.0) }) else {
                parts.append(.text(String(rest[...open])))
                rest = rest[rest.index(after: open)...]
                continue
            }
            if open > rest.startIndex { parts.append(.text(String(rest[..<open]))) }
            parts.append(part)
            rest = rest[rest.index(open, offsetBy: token.count)...]
        }
        if !rest.isEmpty { parts.append(.text(String(rest))) }
        self.parts = parts
    }

    /// Why a configured value is neither a preset nor a usable template.
    public struct Invalid: Error, Sendable { public let reason: String }

    /// A preset name or a template; `Invalid` with the reason when it is neither.
    public static func parse(_ text: String) -> Result<ErrorBodyTemplate, Invalid> {
        switch text {
        case "oauth": return .success(.oauth)
        case "detail": return .success(ErrorBodyTemplate(#"{"detail": {description}}"#))
        case "message": return .success(ErrorBodyTemplate(#"{"message": {description}}"#))
        default: break
        }
        let template = ErrorBodyTemplate(text)
        guard template.parts.contains(.error) || template.parts.contains(.description) else {
            return .failure(Invalid(reason: "expected oauth, detail, message or a JSON template with {error} and/or {description}"))
        }
        let sample = template.render(status: 401, code: "invalid_token", description: "Token \"expired\"")
        guard let object = try? JSONSerialization.jsonObject(with: Data(sample.utf8)), object is [String: Any] else {
            return .failure(Invalid(reason: "the template is not a JSON object once {error}, {description} and {status} are filled in"))
        }
        return .success(template)
    }

    /// This shape with the refusal's code as an `"error"` member when the shape has no
    /// `{error}` of its own (`detail`, `message`, a template of prose only): what a token
    /// endpoint answers, so a client can branch on RFC 6749 §5.2's code (`invalid_grant`)
    /// whatever shape the app's clients read. `{"detail": "…"}` becomes
    /// `{"detail": "…", "error": "invalid_grant"}`.
    public var carryingCode: ErrorBodyTemplate {
        guard !parts.contains(.error),
              let last = parts.lastIndex(where: { if case .text(let t) = $0 { return t.contains("}") }; return false }),
              case .text(let text) = parts[last], let brace = text.lastIndex(of: "}") else { return self }
        var copy = parts
        copy.replaceSubrange(last...last, with: [.text(String(text[..<brace]) + ", \"error\": "), .error, .text(String(text[brace...]))])
        return ErrorBodyTemplate(parts: copy)
    }

    private init(parts: [Part]) { self.parts = parts }

    /// The body for one refusal (ends with a newline, as every gateway answer does).
    public func render(status: Int, code: String, description: String) -> String {
        var body = ""
        for part in parts {
            switch part {
            case .text(let text): body += text
            case .error: body += JSONText.quoted(code)
            case .description: body += JSONText.quoted(description)
            case .status: body += String(status)
            }
        }
        return body + "\n"
    }
}
