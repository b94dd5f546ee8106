/// One value in a parsed JSON document, as offsets into the document's bytes.
///
/// Tokens are stored in document order; a container's members follow it, and
/// `span` says how many tokens its subtree covers, so siblings are found by
/// skipping `span` tokens. For strings `start..<end` excludes the quotes.
struct JSONToken: Sendable {
    enum Kind: UInt8, Sendable { case object, array, string, number, bool, null }

    var kind: Kind
    /// Strings: contains a backslash escape. Bools: the value.
    var flag: Bool
    var start: Int32
    var end: Int32
    /// Tokens in this subtree, including this one.
    var span: Int32
    /// Members of an object, or elements of an array.
    var count: Int32
}

/// Why a JSON text was refused.
enum JSONError: Error, Sendable, Equatable {
    case syntax
    case invalidUTF8
    case duplicateMember
    case tooDeep
    case tooLarge
    case notAnObject
}
