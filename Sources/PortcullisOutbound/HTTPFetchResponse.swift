/// A complete response to an outbound GET.
public struct HTTPFetchResponse: Sendable {
    public var status: Int
    /// Every header field as sent (names keep their case), in order.
    public var headers: [(name: String, value: String)]
    /// The decoded body (chunked framing removed).
    public var body: [UInt8]

    public init(status: Int, headers: [(name: String, value: String)], body: [UInt8]) {
        self.status = status
        self.headers = headers
        self.body = body
    }

    /// The first field named `name` (ASCII case-insensitive).
    public func header(_ name: String) -> String? {
        let wanted = name.lowercased()
        return headers.first { $0.name.lowercased() == wanted }?.value
    }

    /// Every value of `name` joined with ", " (RFC 9110 §5.3), or nil.
    public func combinedHeader(_ name: String) -> String? {
        let wanted = name.lowercased()
        let values = headers.filter { $0.name.lowercased() == wanted }.map(\.value)
        return values.isEmpty ? nil : values.joined(separator: ", ")
    }

    public var cacheControl: String? { combinedHeader("Cache-Control") }
    public var age: String? { header("Age") }
    public var expires: String? { header("Expires") }
}
