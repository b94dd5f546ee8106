/// A credential carried in a JSON request body, on routes configured with
/// `credential: {json_field: NAME}` (refresh and token-exchange endpoints:
/// `{"token": …}`, `{"idToken": …}`).
///
/// The body is parsed by the same strict parser as token claim sets: UTF-8 checked,
/// duplicate member names refused. A duplicate is refused on purpose: the gateway and
/// the app must not be able to read two different credentials out of one body (a JSON
/// parser that keeps the last duplicate against one that keeps the first).
public enum BodyCredential: Equatable, Sendable {
    /// An empty body, or no such member, or `null` / `""`: no credential was presented.
    case absent
    /// The member's string value (unescaped).
    case token([UInt8])
    /// Not a JSON object, a duplicate member name, or the member is not a string.
    case malformed

    /// The top-level member `field` of the JSON object in `body`.
    public static func find(in body: UnsafeRawBufferPointer, field: [UInt8]) -> BodyCredential {
        var start = 0
        while start < body.count, body[start] == 0x20 || body[start] == 0x09 || body[start] == 0x0A || body[start] == 0x0D {
            start += 1
        }
        if start == body.count { return .absent }
        let document: JSONDocument
        do { document = try JSONDocument.parsingObject(Array(body)) } catch { return .malformed }
        guard let index = document.member(0, field) else { return .absent }
        switch document[index].kind {
        case .null:
            return .absent
        case .string:
            guard let value = document.stringBytes(index) else { return .malformed }
            return value.isEmpty ? .absent : .token(value)
        default:
            return .malformed
        }
    }
}
