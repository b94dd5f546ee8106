import Testing
@testable import PortcullisEdgeAuth

/// `Authorization: Bearer <token68>` parsing (RFC 6750 §2.1) against a byte-by-byte
/// reference written from the grammar, for every byte value at every position of tokens
/// of every length around the scan's 8-byte steps.
struct PresentedCredentialTests {
    /// `b64token = 1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" / "/" ) *"="`.
    static func reference(_ value: [UInt8]) -> PresentedCredential.BearerParse {
        let scheme = Array("bearer".utf8)
        // The scheme's letters in either case (and nothing else that `| 0x20` would fold).
        guard value.count >= scheme.count,
              zip(value, scheme).allSatisfy({ $0 == $1 || $0 == $1 - 0x20 }) else { return .notBearer }
        if value.count == scheme.count { return .malformed }
        guard value[scheme.count] == 0x20 else { return .notBearer }
        var i = scheme.count
        while i < value.count && value[i] == 0x20 { i += 1 }
        let start = i
        let allowed = Set(Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~+/".utf8))
        while i < value.count && allowed.contains(value[i]) { i += 1 }
        let charsEnd = i
        while i < value.count && value[i] == UInt8(ascii: "=") { i += 1 }
        guard i == value.count, charsEnd > start else { return .malformed }
        return .token(start..<value.count)
    }

    static func parse(_ value: [UInt8]) -> PresentedCredential.BearerParse {
        value.withUnsafeBytes { PresentedCredential.parseBearer($0, 0..<value.count) }
    }

    @Test func everyByteAtEveryPositionOfTokensUpTo40Bytes() {
        var mismatches: [String] = []
        for length in 1...40 {
            let token = (0..<length).map { Array("aZ0-._~+/".utf8)[$0 % 9] }
            for position in 0..<length {
                for byte in UInt8.min...UInt8.max {
                    var value = Array("Bearer ".utf8) + token
                    value[7 + position] = byte
                    let got = Self.parse(value), expected = Self.reference(value)
                    if got != expected, mismatches.count < 10 {
                        mismatches.append("length \(length), byte \(byte) at \(position): \(got) ≠ \(expected)")
                    }
                }
            }
        }
        #expect(mismatches.isEmpty, "\(mismatches)")
    }

    @Test func schemeSpacesAndPadding() {
        let cases: [(String, PresentedCredential.BearerParse)] = [
            ("Bearer abc", .token(7..<10)),
            ("bEaReR   abc.def", .token(9..<16)),
            ("Bearer abc==", .token(7..<12)),
            ("Bearer abcdefghijklmnop==", .token(7..<25)),
            ("Bearer ab=c", .malformed),
            ("Bearer abcdefghijk=lmnopqrst", .malformed),
            ("Bearer ==", .malformed),
            ("Bearer ", .malformed),
            ("Bearer", .malformed),
            ("Bearer abc ", .malformed),
            ("Bearer abcdefghijklmnopqrstuvwxyz012345 x", .malformed),
            ("Bearerx abc", .notBearer),
            ("Basic YWxhZGRpbjpvcGVuc2VzYW1l", .notBearer),
            ("Bear", .notBearer),
        ]
        for (text, expected) in cases {
            #expect(Self.parse(Array(text.utf8)) == expected, "\(text)")
            #expect(Self.reference(Array(text.utf8)) == expected, "reference: \(text)")
        }
    }
}
