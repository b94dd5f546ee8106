import Testing
@testable import PortcullisAuth

@Suite struct JSONParserTests {
    func parse(_ text: String) throws(JSONError) -> JSONDocument { try JSONDocument.parsingObject(Array(text.utf8)) }
    func parse(bytes: [UInt8]) throws(JSONError) -> JSONDocument { try JSONDocument.parsingObject(bytes) }

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

    @Test func acceptsTheURLAlphabet() {
        #expect(Base64URL.decode("-_-_") == [0xFB, 0xFF, 0xBF])
        #expect(Base64URL.decode("AA") == [0])
        #expect(Base64URL.decode("AAA") == [0, 0])
    }
}
