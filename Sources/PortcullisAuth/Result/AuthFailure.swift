/// Why a credential was refused, mapped to RFC 6750 §3.1.
public struct AuthFailure: Error, Sendable, Equatable, CustomStringConvertible {
    /// Distinct failure causes. The `description` of each is short, safe to
    /// show a client and within RFC 6750's `error_description` character set.
    public enum Reason: String, Error, Sendable, Equatable, CaseIterable {
        case noCredential
        case ambiguousCredential
        case malformedAuthorization
        case malformedCookie
        /// A `credential: {json_field}` route's body is not a JSON object, holds the field
        /// twice, or holds it as something other than a string.
        case malformedBody
        /// A `credential: {json_field}` route (auth required) whose JSON body has no such member.
        case missingBodyCredential
        /// A chunked session cookie with a chunk missing: an invalid token (401), not a
        /// malformed request — the browser dropped or never got part of it.
        case incompleteCookie
        case tooLarge
        case malformed
        case badEncoding
        case badJSON
        case unsupportedHeader
        case typeNotAccepted
        case algorithmNotAllowed
        case missingKeyID
        case unknownKey
        case keysUnavailable
        case signatureInvalid
        case decryptionFailed
        case expired
        case missingExpiry
        case notYetValid
        case issuedInFuture
        case lifetimeTooLong
        case issuerNotAccepted
        case audienceNotAccepted
        case authorizedPartyNotAccepted
        case subjectInvalid
        case claimInvalid
        case nonceMismatch
        case requiredClaimMismatch
        case hostedDomainMismatch
        case noMatchingProvider
        /// The token looks like one of a provider the route does not accept.
        case providerNotAccepted
        /// Verified, but on a revocation list (decided by the caller's store).
        case revoked
        case internalError
    }

    /// The RFC 6750 `error` code.
    public enum ErrorCode: String, Sendable {
        case invalidRequest = "invalid_request"
        case invalidToken = "invalid_token"
        case insufficientScope = "insufficient_scope"
    }

    public var reason: Reason
    /// The provider whose rules refused it, when one was selected.
    public var provider: String?

    public init(_ reason: Reason, provider: String? = nil) {
        self.reason = reason
        self.provider = provider
    }

    /// nil when no credential was presented: RFC 6750 §3.1 says to send no
    /// `error` then, only `WWW-Authenticate: Bearer realm=...`.
    public var errorCode: ErrorCode? {
        switch reason {
        case .noCredential: return nil
        case .ambiguousCredential, .malformedAuthorization, .malformedCookie, .malformedBody, .missingBodyCredential: return .invalidRequest
        case .requiredClaimMismatch, .hostedDomainMismatch: return .insufficientScope
        default: return .invalidToken
        }
    }

    /// 400, 401 or 403.
    public var httpStatus: Int {
        switch errorCode {
        case .invalidRequest: return 400
        case .insufficientScope: return 403
        case .invalidToken, nil: return 401
        }
    }

    /// A short `error_description`, safe to return to the client.
    public var description: String {
        switch reason {
        case .noCredential: return "No credentials"
        case .ambiguousCredential: return "More than one credential was presented"
        case .malformedAuthorization: return "The Authorization header is malformed"
        case .malformedCookie: return "The session cookie is malformed"
        case .malformedBody: return "The request body is not a JSON object with a string credential field"
        case .missingBodyCredential: return "The request body has no credential member"
        case .incompleteCookie: return "The session cookie is missing a chunk"
        case .tooLarge: return "The token is too large"
        case .malformed: return "The token is malformed"
        case .badEncoding: return "The token is not valid base64url"
        case .badJSON: return "The token contains invalid JSON"
        case .unsupportedHeader: return "The token uses an unsupported header parameter"
        case .typeNotAccepted: return "The token type is not accepted"
        case .algorithmNotAllowed: return "The token algorithm is not allowed"
        case .missingKeyID: return "The token has no key ID"
        case .unknownKey: return "The token key ID is unknown"
        case .keysUnavailable: return "Signing keys are not available"
        case .signatureInvalid: return "The token signature is invalid"
        case .decryptionFailed: return "The token could not be decrypted"
        case .expired: return "The access token expired"
        case .missingExpiry: return "The token has no expiry"
        case .notYetValid: return "The token is not yet valid"
        case .issuedInFuture: return "The token was issued in the future"
        case .lifetimeTooLong: return "The token lifetime is too long"
        case .issuerNotAccepted: return "The token issuer is not accepted"
        case .audienceNotAccepted: return "The token audience is not accepted"
        case .authorizedPartyNotAccepted: return "The token authorized party is not accepted"
        case .subjectInvalid: return "The token subject is missing or invalid"
        case .claimInvalid: return "A token claim has an invalid type"
        case .nonceMismatch: return "The token nonce does not match"
        case .requiredClaimMismatch: return "The token lacks a required claim"
        case .hostedDomainMismatch: return "The account domain is not allowed"
        case .noMatchingProvider: return "No provider accepts this token"
        case .providerNotAccepted: return "The token is from a provider this route does not accept"
        case .revoked: return "The token has been revoked"
        case .internalError: return "The token could not be verified"
        }
    }

    /// Rank used to pick the most informative failure when several
    /// providers refused a token (a later stage says more).
    var stage: Int {
        switch reason {
        case .noCredential, .noMatchingProvider: return 0
        case .ambiguousCredential, .malformedAuthorization, .malformedCookie, .malformedBody, .missingBodyCredential, .incompleteCookie,
             .tooLarge, .malformed, .badEncoding, .badJSON: return 1
        case .unsupportedHeader, .algorithmNotAllowed: return 2
        case .typeNotAccepted: return 3  // the provider took the algorithm
        case .issuerNotAccepted: return 3
        case .missingKeyID, .unknownKey, .keysUnavailable: return 4
        case .signatureInvalid, .decryptionFailed, .internalError: return 5
        default: return 6
        }
    }
}

/// Why a `CredentialVerifier` could not be built from its configuration.
public enum AuthConfigurationError: Error, Sendable, Equatable, CustomStringConvertible {
    /// A provider lacks something its kind requires.
    case missingSetting(provider: String, setting: String)
    /// A setting has an unusable value.
    case invalidSetting(provider: String, setting: String, reason: String)
    /// Two providers share a name.
    case duplicateProvider(String)
    /// A key set was given for a provider that does not exist.
    case unknownProvider(String)
    /// A key or secret was refused.
    case key(provider: String, KeyLoadingError)

    public var description: String {
        switch self {
        case .missingSetting(let provider, let setting): return "provider \(provider): \(setting) is required"
        case .invalidSetting(let provider, let setting, let reason): return "provider \(provider): \(setting): \(reason)"
        case .duplicateProvider(let name): return "provider \(name) is defined twice"
        case .unknownProvider(let name): return "keys given for unknown provider \(name)"
        case .key(let provider, let error): return "provider \(provider): \(error)"
        }
    }
}

extension AuthFailure {
    /// What the refused credential was, so a description names it: an app's client tells
    /// an expired access token (refresh it) from an expired refresh token or ID token (sign
    /// in again) from an expired session cookie.
    public enum PresentedAs: Sendable, Equatable {
        /// `Authorization: Bearer`.
        case accessToken
        case sessionCookie
        /// A member of the JSON body (`credential: {json_field}`), by its name.
        case bodyMember(String)

        /// The credential in a sentence: "access token", "session cookie", "ID token",
        /// "refresh token"; another member by its name ("google_token") or, when the name
        /// says nothing of a token, "<member> token" ("assertion token").
        public var noun: String {
            switch self {
            case .accessToken: return "access token"
            case .sessionCookie: return "session cookie"
            case .bodyMember(let name):
                let folded = String(name.lowercased().filter { $0 != "_" && $0 != "-" })
                switch folded {
                case "idtoken", "identitytoken": return "ID token"
                case "refreshtoken": return "refresh token"
                case "accesstoken": return "access token"
                case "token": return "token"
                default: return folded.contains("token") ? name : "\(name) token"
                }
            }
        }
    }

    /// `description`, naming the credential instead of "the token" or "the access token".
    public func description(presentedAs: PresentedAs) -> String {
        if case .bodyMember(let name) = presentedAs, !name.isEmpty {
            switch reason {
            case .missingBodyCredential: return "The request body has no \(name) member"
            case .malformedBody: return "The request body is not a JSON object with a string \(name) member"
            default: break
            }
        }
        let text = description
        for generic in ["The access token ", "The token "] where text.hasPrefix(generic) {
            return "The \(presentedAs.noun) " + text.dropFirst(generic.count)
        }
        return text
    }
}
