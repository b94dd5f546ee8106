import Testing
@testable import PortcullisAuth

@Suite struct AuthFailureTests {
    @Test func mapsToRFC6750Codes() {
        #expect(AuthFailure(.expired).errorCode == .invalidToken)
        #expect(AuthFailure(.expired).httpStatus == 401)
        #expect(AuthFailure(.malformedCookie).errorCode == .invalidRequest)
        #expect(AuthFailure(.malformedCookie).httpStatus == 400)
        #expect(AuthFailure(.hostedDomainMismatch).errorCode == .insufficientScope)
        #expect(AuthFailure(.requiredClaimMismatch).httpStatus == 403)
        #expect(AuthFailure(.noCredential).errorCode == nil)
        #expect(AuthFailure(.noCredential).httpStatus == 401)
    }

    @Test func challengeOmitsErrorWithoutCredentials() {
        #expect(AuthFailure(.noCredential).wwwAuthenticate(realm: "api") == #"Bearer realm="api""#)
        #expect(AuthFailure(.expired).wwwAuthenticate(realm: "api")
            == #"Bearer realm="api", error="invalid_token", error_description="The access token expired""#)
        #expect(AuthFailure(.requiredClaimMismatch).wwwAuthenticate(realm: "a\"b\\c", scope: "read write")
            == #"Bearer realm="abc", error="insufficient_scope", error_description="The token lacks a required claim", scope="read write""#)
    }

    @Test(arguments: AuthFailure.Reason.allCases)
    func descriptionsAreSafeToSend(reason: AuthFailure.Reason) {
        let text = AuthFailure(reason).description
        #expect(!text.isEmpty && text.count < 80)
        #expect(AuthFailure.quotable(text) == text)
    }
}
