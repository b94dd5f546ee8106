/// One header field as offsets into the bytes that were parsed (no copy).
/// `value` is trimmed of leading and trailing optional whitespace (SP / HTAB).
public struct HTTPHeaderField: Sendable, Equatable {
    public var name: Range<Int>
    public var value: Range<Int>

    public init(name: Range<Int>, value: Range<Int>) {
        self.name = name
        self.value = value
    }
}
