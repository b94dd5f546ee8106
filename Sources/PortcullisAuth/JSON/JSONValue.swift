import PortcullisCore

/// A JSON value built in Swift: claims for `TokenMinter`, and values read back
/// from a verified token when a caller asks for the full claim set.
public enum JSONValue: Sendable, Equatable {
    case string(String)
    case number(Double)
    case integer(Int64)
    case bool(Bool)
    case null
    case array([JSONValue])
    /// Members in the order they are serialized.
    case object([(String, JSONValue)])

    public static func == (lhs: JSONValue, rhs: JSONValue) -> Bool {
        switch (lhs, rhs) {
        case let (.string(a), .string(b)): return a == b
        case let (.number(a), .number(b)): return a == b
        case let (.integer(a), .integer(b)): return a == b
        case let (.bool(a), .bool(b)): return a == b
        case (.null, .null): return true
        case let (.array(a), .array(b)): return a == b
        case let (.object(a), .object(b)):
            return a.count == b.count && zip(a, b).allSatisfy { $0.0 == $1.0 && $0.1 == $1.1 }
        default: return false
        }
    }

    /// Compact serialization (no whitespace), members in the given order.
    public var serialized: String { String(decoding: serializedBytes, as: UTF8.self) }

    /// `serialized` as UTF-8 bytes, written straight into one buffer.
    public var serializedBytes: [UInt8] {
        var out = [UInt8]()
        out.reserveCapacity(256)
        write(to: &out)
        return out
    }

    private func write(to out: inout [UInt8]) {
        switch self {
        case .string(let value): JSONText.appendQuoted(value, to: &out)
        case .number(let value):
            if value.rounded() == value && abs(value) < 1e15 { out += String(Int64(value)).utf8 } else { out += "\(value)".utf8 }
        case .integer(let value): out += String(value).utf8
        case .bool(let value): out += (value ? "true" : "false").utf8
        case .null: out += "null".utf8
        case .array(let values):
            out.append(UInt8(ascii: "["))
            for (index, value) in values.enumerated() {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                value.write(to: &out)
            }
            out.append(UInt8(ascii: "]"))
        case .object(let members):
            out.append(UInt8(ascii: "{"))
            for (index, (name, value)) in members.enumerated() {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                JSONText.appendQuoted(name, to: &out)
                out.append(UInt8(ascii: ":"))
                value.write(to: &out)
            }
            out.append(UInt8(ascii: "}"))
        }
    }
}

extension JSONValue: ExpressibleByStringLiteral, ExpressibleByIntegerLiteral, ExpressibleByBooleanLiteral,
    ExpressibleByFloatLiteral, ExpressibleByArrayLiteral, ExpressibleByDictionaryLiteral, ExpressibleByNilLiteral
{
    public init(stringLiteral value: String) { self = .string(value) }
    public init(integerLiteral value: Int64) { self = .integer(value) }
    public init(booleanLiteral value: Bool) { self = .bool(value) }
    public init(floatLiteral value: Double) { self = .number(value) }
    public init(arrayLiteral elements: JSONValue...) { self = .array(elements) }
    public init(dictionaryLiteral elements: (String, JSONValue)...) { self = .object(elements) }
    public init(nilLiteral: ()) { self = .null }
}

extension JSONDocument {
    /// Converts a token subtree back to a `JSONValue` (cold path).
    func value(_ index: Int) -> JSONValue {
        let token = self[index]
        switch token.kind {
        case .string: return .string(string(index) ?? "")
        case .number:
            let number = self.number(index) ?? 0
            if number.rounded() == number && abs(number) < 9e15 { return .integer(Int64(number)) }
            return .number(number)
        case .bool: return .bool(token.flag)
        case .null: return .null
        case .array: return .array(elements(index).map { value($0) })
        case .object: return .object(members(index).map { ($0.name, value($0.value)) })
        }
    }
}
