import Testing
@testable import PortcullisSessions

/// `rt1.<session>.<counter>.<MAC>`: what the gateway issued parses back; any change to any
/// part, another secret, or another shape does not.
@Suite struct RefreshTokenFormatTests {
    let format = RefreshTokenFormat(secret: "0123456789abcdef0123456789abcdef-secret")
    let session = "0123456789abcdef0123456789abcdef"

    @Test func whatTheGatewayIssuedParsesBack() throws {
        let token = format.token(session: session, counter: 7)
        #expect(token.hasPrefix(RefreshTokenFormat.prefix))
        let parsed = try #require(format.parse(token))
        #expect(parsed.session == session && parsed.counter == 7)
    }

    @Test func anyChangeOrAnotherSecretIsRefused() {
        let token = format.token(session: session, counter: 7)
        #expect(RefreshTokenFormat(secret: "another-secret-0123456789abcdef0123456").parse(token) == nil)
        #expect(format.parse(token.replacingOccurrences(of: ".7.", with: ".8.")) == nil, "the counter is under the MAC")
        var flipped = Array(token)
        flipped[flipped.count - 1] = flipped.last == "A" ? "B" : "A"
        #expect(format.parse(String(flipped)) == nil)
        for shape in ["", "rt1.", "refresh_abc123", "rt2." + token.dropFirst(4), token + ".x", "rt1.xyz.7.\(token.suffix(43))"] {
            #expect(format.parse(String(shape)) == nil, "\(shape)")
        }
    }
}
