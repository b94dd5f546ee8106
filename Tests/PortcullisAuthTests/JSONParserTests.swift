import Testing
@testable import PortcullisAuth
import PortcullisCore

@Suite struct JSONParserTests {
    func parse(_ text: String) throws(JSONError) -> JSONDocument { try JSONDocument.parsingObject(Array(text.utf8)) }
    func parse(bytes: [UInt8]) throws(JSONError) -> JSONDocument { try JSONDocument.parsingObject(bytes) }

    /// The serializer writes bytes: quotes, backslashes and every C0 control escaped,
    /// everything else (DEL, non-ASCII, astral scalars) copied; the parser reads back what
    /// it wrote, and `quoted` is the same text.
    @Test func serializationEscapesAndRoundTrips() throws {
        var tricky = "q\"b\\n\nr\rt\tdel\u{7F} é ✓ 🎉"
        for scalar in 0..<0x20 { tricky.unicodeScalars.append(Unicode.Scalar(UInt8(scalar))) }
        let value: JSONValue = .object([("s", .string(tricky)), ("i", -42), ("f", 1.5), ("b", true), ("z", nil),
                                        ("a", [1, "x", .object([])]), ("é", "")])
        let text = value.serialized
        #expect(text.hasPrefix(#"{"s":"q\"b\\n\nr\rt\tdel"# + "\u{7F} é ✓ 🎉" + #"\u0000\u0001\u0002"#))
        #expect(text.hasSuffix(#"\u001e\u001f","i":-42,"f":1.5,"b":true,"z":null,"a":[1,"x",{}],"é":""}"#))
        #expect(text.contains(#"\u0008\t\n\u000b\u000c\r\u000e"#))
        #expect(Array(text.utf8) == value.serializedBytes)
        #expect(JSONText.quoted(tricky) == String(text.dropFirst(5).prefix { $0 != "," }))
        #expect(try parse(text).value(0) == value)
    }

    @Test func parsesEveryValueKind() throws {
        let document = try parse(#" {"s":"a\"b\\c\u00e9\ud83d\ude00","n":-12.5e1,"i":1700000000,"t":true,"f":false,"z":null,"a":[1,[2],{"k":"v"}],"o":{}} "#)
        #expect(document.string(document.member(0, "s")!) == "a\"b\\cé😀")
        #expect(document.number(document.member(0, "n")!) == -125)
        #expect(document.number(document.member(0, "i")!) == 1_700_000_000)
        #expect(document.bool(document.member(0, "t")!) == true)
        #expect(document.bool(document.member(0, "f")!) == false)
        #expect(document[document.member(0, "z")!].kind == .null)
        #expect(document.elements(document.member(0, "a")!).count == 3)
        #expect(document.member(0, "missing") == nil)
    }

    @Test func memberLookupMatchesEscapedNames() throws {
        let document = try parse(#"{"\u0073ub":"x"}"#)
        #expect(document.string(document.member(0, "sub")!) == "x")
    }

    @Test(arguments: [
        #"{"a":1,"a":2}"#, #"{"a":1,"\u0061":2}"#, #"{"x":{"b":1,"b":1}}"#,
    ])
    func duplicateMembersAreRefused(text: String) {
        #expect(throws: JSONError.duplicateMember) { try parse(text) }
    }

    /// Names of every length up to 20 (packed up to 16 bytes, compared
    /// byte-wise above): equal names are refused, names differing only in
    /// their last byte are not.
    @Test func duplicateCheckSeesEveryByteOfEveryLength() throws {
        for length in 1...20 {
            let name = String((0..<length).map { Character(UnicodeScalar(UInt8(97 + $0 % 26))) })
            let other = String(name.dropLast()) + "Z"
            _ = try parse("{\"\(name)\":1,\"\(other)\":2,\"\(name)x\":3}")
            #expect(throws: JSONError.duplicateMember) { try parse("{\"\(name)\":1,\"\(other)\":2,\"\(name)\":3}") }
        }
    }

    /// Sixteen distinct names (the one-pass check's limit; some share a
    /// hash bucket, so the byte-wise fallback runs) pass; repeating any of
    /// them as the last member, escaped or not, is refused.
    @Test func sixteenMembersWithARepeatedNameAnywhere() throws {
        let names = (0..<16).map { "claim_\($0 * 7919)" }
        let members = names.enumerated().map { "\"\($1)\":\($0)" }
        _ = try parse("{" + members.joined(separator: ",") + "}")
        for repeated in names.dropLast() {  // (the last member is the one replaced)
            let last = members.dropLast() + ["\"\(repeated)\":0"]
            #expect(throws: JSONError.duplicateMember) { try parse("{" + last.joined(separator: ",") + "}") }
            let escaped = "\\u00" + String(repeated.utf8.first!, radix: 16) + repeated.dropFirst()
            let lastEscaped = members.dropLast() + ["\"\(escaped)\":0"]
            #expect(throws: JSONError.duplicateMember) { try parse("{" + lastEscaped.joined(separator: ",") + "}") }
        }
    }

    /// Strings of 16+ bytes take the 8-byte scan: a quote, a backslash, a
    /// control byte or a non-ASCII byte at each offset of a word is found
    /// (controls and invalid UTF-8 refused, escapes and valid UTF-8 decoded),
    /// including after a NUL, whose borrow spills into the next byte.
    @Test func longStringsFindEverySpecialByteAtEveryOffset() throws {
        for offset in 0..<16 {
            func text(_ special: [UInt8]) -> [UInt8] {
                var content = Array("abcdefghijklmnopqrstuvwx".utf8)
                content.replaceSubrange(offset..<(offset + special.count), with: special)
                return Array(#"{"k":""#.utf8) + content + Array(#""}"#.utf8)
            }
            for control: [UInt8] in [[0x00], [0x01], [0x1F], [0x00, 0x01], [0x00, 0x21], [0x0A]] {
                #expect(throws: JSONError.self, "control at \(offset)") { try parse(bytes: text(control)) }
            }
            #expect(throws: JSONError.self, "lone continuation byte at \(offset)") { try parse(bytes: text([0x80])) }
            #expect(throws: JSONError.self, "bare quote at \(offset)") { try parse(bytes: text([0x22])) }
            let escaped = try parse(bytes: text(Array(#"\""#.utf8)))
            #expect(escaped.string(escaped.member(0, "k")!)?.contains("\"") == true)
            let accented = try parse(bytes: text([0xC3, 0xA9]))
            #expect(accented.string(accented.member(0, "k")!)?.contains("é") == true)
            let plain = try parse(bytes: text(Array("~ !".utf8)))
            #expect(plain.string(plain.member(0, "k")!)?.utf8.count == 24)
        }
    }

    @Test func packedNamesMatchExactlyTheSameBytes() {
        func packed(_ bytes: [UInt8]) -> PackedMemberName? { bytes.withUnsafeBytes { PackedMemberName($0) } }
        for length in 0...16 {
            let bytes = (0..<length).map { UInt8(truncatingIfNeeded: 0x41 &+ $0 &* 7) }
            let name = packed(bytes)
            #expect(name != nil)
            #expect(name == packed(bytes))
            for position in 0..<length {
                var changed = bytes
                changed[position] ^= 0x20
                #expect(packed(changed) != name, "length \(length), byte \(position)")
            }
            #expect(packed(bytes + [0]) != name, "a trailing NUL is a different name")
        }
        #expect(packed(Array(repeating: 0x61, count: 17)) == nil)
    }

    @Test func duplicatesInLargeObjectsAreRefused() {
        let members = (0..<40).map { "\"k\($0)\":\($0)" } + ["\"k7\":1"]
        #expect(throws: JSONError.duplicateMember) { try parse("{" + members.joined(separator: ",") + "}") }
    }

    @Test(arguments: [
        "", "{", "}", "[]", "\"s\"", "{\"a\"}", "{\"a\":}", "{\"a\":1,}", "{,}", "{\"a\":01}", "{\"a\":1.}", "{\"a\":.5}",
        "{\"a\":+1}", "{\"a\":1e}", "{\"a\":tru}", "{\"a\":nul}", "{\"a\":\"\u{01}\"}", "{\"a\":\"\\x\"}", "{\"a\":\"\\u12\"}",
        "{\"a\":1} x", "{'a':1}", "{\"a\":[1,]}", "{\"a\":NaN}",
    ])
    func malformedTextIsRefused(text: String) {
        #expect(throws: JSONError.self) { try parse(text) }
    }

    @Test func invalidUTF8IsRefused() {
        for bytes: [UInt8] in [[0xC0, 0xAF], [0xED, 0xA0, 0x80], [0xF4, 0x90, 0x80, 0x80], [0xE2, 0x82], [0x80], [0xFF]] {
            #expect(throws: JSONError.invalidUTF8) { try parse(bytes: Array(#"{"a":""#.utf8) + bytes + Array(#""}"#.utf8)) }
        }
        #expect(throws: JSONError.invalidUTF8) { try parse(#"{"a":"\ud800"}"#) }
        #expect(throws: JSONError.invalidUTF8) { try parse(#"{"a":"\udc00"}"#) }
    }

    @Test func depthIsLimited() throws {
        let deep = String(repeating: "{\"a\":", count: 40) + "1" + String(repeating: "}", count: 40)
        #expect(throws: JSONError.tooDeep) { try parse(deep) }
        let ok = String(repeating: "{\"a\":", count: 10) + "1" + String(repeating: "}", count: 10)
        _ = try parse(ok)
    }

    @Test func rootMustBeAnObject() {
        #expect(throws: JSONError.notAnObject) { try parse(bytes: Array("[1]".utf8)) }
    }

    /// Token storage is sized by `JSONParser.tokenBound`: the densest texts
    /// (one-digit array elements, empty containers) must still fit, on the
    /// stack buffer and past it.
    @Test(arguments: [3, 50, 51, 52, 1000])
    func densestTextsFitTheTokenBound(elements: Int) throws {
        for element in ["1", "[]", "{}"] {
            let text = "{\"a\":[" + Array(repeating: element, count: elements).joined(separator: ",") + "]}"
            let document = try parse(text)
            #expect(document.tokenCount == elements + 3)
            #expect(document.elements(document.member(0, "a")!).count == elements)
            #expect(document.tokenCount <= JSONParser.tokenBound(byteCount: text.utf8.count))
        }
    }

    @Test func tokenCountIsLimited() throws {
        let atLimit = "{\"a\":[" + Array(repeating: "1", count: JSONParser.defaultMaxTokens - 3).joined(separator: ",") + "]}"
        #expect(try parse(atLimit).tokenCount == JSONParser.defaultMaxTokens)
        let over = "{\"a\":[" + Array(repeating: "1", count: JSONParser.defaultMaxTokens - 2).joined(separator: ",") + "]}"
        #expect(throws: JSONError.tooLarge) { try parse(over) }
    }
}

@Suite struct Base64URLTests {
    @Test func roundTripsEveryLength() {
        for length in 0..<40 {
            let bytes = (0..<length).map { UInt8(truncatingIfNeeded: $0 &* 37 &+ 11) }
            #expect(Base64URL.decode(Base64URL.encode(bytes)) == bytes)
        }
    }

    @Test(arguments: ["AA==", "A", "AAAAA", "A+AA", "A/AA", "AA AA", "AA\nA", "AB", "AAB"])
    func refusesNonCanonicalInput(text: String) {
        #expect(Base64URL.decode(text) == nil)
    }

    /// A character outside the alphabet is found at every position, in the
    /// groups decoded with a 4-byte store, the last full group and the tail.
    @Test func refusesAForeignCharacterAnywhere() {
        let foreign: [UInt8] = [0x00, 0x20, 0x2B, 0x2E, 0x2F, 0x3D, 0x40, 0x5B, 0x60, 0x7B, 0x7F, 0x80, 0xC3, 0xFF]
        for length in [2, 3, 4, 7, 8, 10, 12, 15, 16] {
            let valid = Array(Base64URL.encode((0..<(length * 3 / 4)).map { UInt8($0 &* 29 & 0xFF) }).utf8)
            #expect(valid.count == length)
            #expect(Base64URL.decode(valid) != nil)
            for position in 0..<length {
                for byte in foreign {
                    var text = valid
                    text[position] = byte
                    #expect(Base64URL.decode(text) == nil, "length \(length), position \(position), byte \(byte)")
                }
            }
        }
    }

    @Test func decodesEveryCharacterInEveryPosition() {
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)
        // Each sextet value at each of the four positions of a group, in an
        // 8-character text so both store paths see it.
        for value in 0..<64 {
            for position in 0..<8 {
                var text = Array("AAAAAAAA".utf8)
                text[position] = alphabet[value]
                var expected = [UInt8](repeating: 0, count: 6)
                let bit = (7 - position) * 6  // bit offset of this sextet in the 48-bit value
                let word = UInt64(value) << UInt64(bit)
                for index in 0..<6 { expected[index] = UInt8(truncatingIfNeeded: word >> UInt64(40 - index * 8)) }
                #expect(Base64URL.decode(text) == expected, "value \(value) at \(position)")
            }
        }
    }

    @Test func decodesIntoALongerBuffer() {
        let bytes = (0..<30).map { UInt8($0 &* 11 & 0xFF) }
        let text = Array(Base64URL.encode(bytes).utf8)
        var output = [UInt8](repeating: 0xEE, count: 64)
        let written = text.withUnsafeBytes { input in output.withUnsafeMutableBytes { Base64URL.decode(input, into: $0) } }
        #expect(written == 30)
        #expect(Array(output[0..<30]) == bytes)
        #expect(output[31...].allSatisfy { $0 == 0xEE }, "at most the byte right after the decoded ones is scratch")
    }

    @Test func acceptsTheURLAlphabet() {
        #expect(Base64URL.decode("-_-_") == [0xFB, 0xFF, 0xBF])
        #expect(Base64URL.decode("AA") == [0])
        #expect(Base64URL.decode("AAA") == [0, 0])
    }
}
