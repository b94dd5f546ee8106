import PortcullisHTTP
import PortcullisProxy
import PortcullisCore

/// A demo upstream app: answers every request with what it received (method,
/// target, headers, body size) as JSON, so a user sees exactly what an unchanged
/// app behind the gateway would see.
public final class EchoApp: LocalHandler {
    public let name: String
    public init(name: String) { self.name = name }

    public func handle(_ request: RequestView, body: UnsafeRawBufferPointer) -> LocalResponse {
        let bytes = request.bytes
        func text(_ range: Range<Int>) -> String {
            String(decoding: UnsafeRawBufferPointer(rebasing: bytes[range]), as: UTF8.self)
        }
        var json = "{\"app\":\(JSONText.quoted(name)),\"method\":\(JSONText.quoted(text(request.methodRange)))"
        json += ",\"target\":\(JSONText.quoted(text(request.target))),\"headers\":{"
        var first = true
        for field in request.fields {
            if !first { json += "," }
            first = false
            json += "\(JSONText.quoted(text(field.name).lowercased())):\(JSONText.quoted(text(field.value)))"
        }
        json += "},\"body_bytes\":\(body.count)}\n"
        return .json(200, json)
    }
}
