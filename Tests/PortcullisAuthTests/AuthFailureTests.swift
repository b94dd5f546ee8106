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
            == #"Bearer realm="abc", error="insufficient_scope", error_description="The access token lacks a required claim", scope="read write""#)
    }

    @Test(arguments: AuthFailure.Reason.allCases)
    func descriptionsAreSafeToSend(reason: AuthFailure.Reason) {
        let text = AuthFailure(reason).description
        #expect(!text.isEmpty && text.count < 80)
        #expect(AuthFailure.quotable(text) == text)
    }

    /// A description names what was refused: an app's client refreshes an expired access
    /// token, but signs in again for an expired refresh token, ID token or session cookie.
    @Test func descriptionsNameTheCredential() {
        #expect(AuthFailure(.expired).description(presentedAs: .accessToken) == "The access token expired")
        #expect(AuthFailure(.expired).description(presentedAs: .sessionCookie) == "The session cookie expired")
        #expect(AuthFailure(.expired).description(presentedAs: .bodyMember("refreshToken")) == "The refresh token expired")
        #expect(AuthFailure(.expired).description(presentedAs: .bodyMember("refresh_token")) == "The refresh token expired")
        #expect(AuthFailure(.revoked).description(presentedAs: .bodyMember("idToken")) == "The ID token has been revoked")
        #expect(AuthFailure(.signatureInvalid).description(presentedAs: .bodyMember("assertion"))
                == "The assertion token signature is invalid")
        #expect(AuthFailure(.audienceNotAccepted).description(presentedAs: .bodyMember("google_token"))
                == "The google_token audience is not accepted")
        #expect(AuthFailure(.revoked).description(presentedAs: .sessionCookie) == "The session cookie has been revoked")
        #expect(AuthFailure(.missingBodyCredential).description(presentedAs: .bodyMember("idToken"))
                == "The request body has no idToken member")
        #expect(AuthFailure(.missingBodyCredential).httpStatus == 400)
        // Descriptions that name no token are kept.
        #expect(AuthFailure(.malformedCookie).description(presentedAs: .bodyMember("idToken")) == "The session cookie is malformed")
        #expect(AuthFailure(.expired).wwwAuthenticate(realm: "api", presentedAs: .bodyMember("idToken"))
            == #"Bearer realm="api", error="invalid_token", error_description="The ID token expired""#)
    }
}
