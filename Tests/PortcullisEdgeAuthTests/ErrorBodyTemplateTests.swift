import Foundation
import Testing
@testable import PortcullisEdgeAuth

/// A token endpoint's refusal keeps RFC 6749 §5.2's code in whatever shape the app's clients
/// read (`carryingCode`): presets and templates without `{error}` gain an `"error"` member;
/// shapes that have one are unchanged. Every result is still one JSON object.
@Suite struct ErrorBodyTemplateTests {
    static func object(_ template: ErrorBodyTemplate) throws -> [String: Any] {
        let text = template.render(status: 400, code: "invalid_grant", description: "The session has \"ended\"")
        #expect(text.hasSuffix("}\n"))
        return try #require(try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any])
    }

    @Test(arguments: ["detail", "message", #"{"ok": false, "why": {description}, "status": {status}}"#])
    func shapesWithoutTheCodeGainIt(_ shape: String) throws {
        let template = try ErrorBodyTemplate.parse(shape).get()
        #expect(try Self.object(template)["error"] == nil, "the route shape itself is unchanged")
        let carried = try Self.object(template.carryingCode)
        #expect(carried["error"] as? String == "invalid_grant")
        #expect(carried.values.contains { ($0 as? String) == "The session has \"ended\"" }, "the description stays: \(carried)")
    }

    @Test(arguments: ["oauth", #"{"ok": false, "error": {"code": {error}, "message": {description}}}"#])
    func shapesWithTheCodeAreUnchanged(_ shape: String) throws {
        let template = try ErrorBodyTemplate.parse(shape).get()
        #expect(template.carryingCode == template)
    }
}
