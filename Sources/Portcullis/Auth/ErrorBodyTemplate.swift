import Foundation
import PortcullisCore

/// The JSON body of an auth refusal (401, 403, 400, 503), in the shape the app's clients
/// parse. Status and `WWW-Authenticate` never change; only the body does.
///
/// `identity.error_body` sets it for every route, a route's `error_body` for that route:
/// - `oauth` (the default): `{"error": "<code>", "error_description": "<description>"}` (RFC 6750);
/// - `detail`: `{"detail": "<description>"}` (FastAPI's `HTTPException`);
/// - `message`: `{"message": "<description>"}` (Express and Next.js API routes);
/// - or a JSON template in which `{error}`, `{description}` and `{status}` are replaced by
///   the refusal's code and description as JSON strings and its status as a number, e.g.
///   `'{"ok": false, "error": {"code": {error}, "message": {description}}}'`.
public struct ErrorBodyTemplate: Sendable, Equatable {
    enum Shape: Sendable, Equatable {
        case oauth
        case template(String)
    }
    let shape: Shape

    public static let oauth = ErrorBodyTemplate(shape: .oauth)

    /// Why a configured value is neither a preset nor a usable template.
    public struct Invalid: Error, Sendable { public let reason: String }

    /// A preset name or a template; `Invalid` with the reason when it is neither.
    public static func parse(_ text: String) -> Result<ErrorBodyTemplate, Invalid> {
        switch text {
        case "oauth": return .success(.oauth)
        case "detail": return .success(ErrorBodyTemplate(shape: .template(#"{"detail": {description}}"#)))
        case "message": return .success(ErrorBodyTemplate(shape: .template(#"{"message": {description}}"#)))
        default: break
        }
        guard text.contains("{error}") || text.contains("{description}") else {
            return .failure(Invalid(reason: "expected oauth, detail, message or a JSON template with {error} and/or {description}"))
        }
        let template = ErrorBodyTemplate(shape: .template(text))
        let sample = template.render(status: 401, code: "invalid_token", description: "Token \"expired\"")
        guard let object = try? JSONSerialization.jsonObject(with: Data(sample.utf8)), object is [String: Any] else {
            return .failure(Invalid(reason: "the template is not a JSON object once {error}, {description} and {status} are filled in"))
        }
        return .success(template)
    }

    /// The body for one refusal (ends with a newline, as every gateway answer does).
    func render(status: Int, code: String, description: String) -> String {
        switch shape {
        case .oauth:
            return "{\"error\":\(JSONText.quoted(code)),\"error_description\":\(JSONText.quoted(description))}\n"
        case .template(let text):
            return text.replacingOccurrences(of: "{error}", with: JSONText.quoted(code))
                .replacingOccurrences(of: "{description}", with: JSONText.quoted(description))
                .replacingOccurrences(of: "{status}", with: String(status)) + "\n"
        }
    }
}
