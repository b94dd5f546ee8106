import Testing
@testable import PortcullisHTTP

@Suite("Raw field helpers")
struct HTTPBytesTests {
    @Test func caseInsensitiveEquality() {
        let raw = bytes("Content-LENGTH")
        raw.withUnsafeBytes { p in
            #expect(HTTPBytes.equalsCaseInsensitive(p, 0..<raw.count, "content-length"))
            #expect(!HTTPBytes.equalsCaseInsensitive(p, 0..<raw.count, "content-lengt"))
            #expect(!HTTPBytes.equalsCaseInsensitive(p, 0..<7, "content-length"))
        }
    }

    @Test func oneCharacterLiteralIsCompared() {
        let raw = bytes("A")
        raw.withUnsafeBytes { p in
            #expect(HTTPBytes.equalsCaseInsensitive(p, 0..<1, "a"))
            #expect(!HTTPBytes.equalsCaseInsensitive(p, 0..<1, "b"))
        }
    }

    @Test(arguments: ["X-User-Id", "x_user_id", "X_USER-ID", "x-user-id", "X.User.Id", "X_User.Id", "x.user-id"])
    func identityNamesMatchEverySpelling(_ name: String) {
        let raw = bytes(name)
        #expect(raw.withUnsafeBytes { HTTPBytes.equalsIdentityName($0, 0..<raw.count, Array("x-user-id".utf8)) })
    }

    @Test func identityNamesDoNotMatchOtherNames() {
        let raw = bytes("X-User-Ids")
        #expect(!raw.withUnsafeBytes { HTTPBytes.equalsIdentityName($0, 0..<raw.count, Array("x-user-id".utf8)) })
        let other = bytes("X+User+Id")
        #expect(!other.withUnsafeBytes { HTTPBytes.equalsIdentityName($0, 0..<other.count, Array("x-user-id".utf8)) })
    }

    @Test func tokensAreSplitAndTrimmed() {
        let raw = bytes("Connection: keep-alive ,\tUpgrade,, close ")
        var tokens: [String] = []
        raw.withUnsafeBytes { p in
            HTTPBytes.forEachToken(p, 12..<raw.count) { tokens.append(String(decoding: raw[$0], as: UTF8.self)) }
        }
        #expect(tokens == ["keep-alive", "Upgrade", "close"])
    }

    @Test func emptyValueHasNoTokens() {
        let raw = bytes(" , ")
        var count = 0
        raw.withUnsafeBytes { p in HTTPBytes.forEachToken(p, 0..<raw.count) { _ in count += 1 } }
        #expect(count == 0)
    }
}
