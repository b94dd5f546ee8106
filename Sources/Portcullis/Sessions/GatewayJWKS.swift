import PortcullisSessions
import PortcullisEdgeAuth
import PortcullisProxy

/// `/.well-known/portcullis/jwks.json` on the gateway's listeners: every public key the
/// gateway signs with — the identity assertion's (for apps) and the session access
/// tokens' (for anyone who verifies them), in one document.
final class GatewayJWKS: PublishedDocument, @unchecked Sendable {
    // @unchecked Sendable: immutable.
    let assertion: AssertionKeys?
    /// The session access tokens' keys, read per request: a retiring key leaves the
    /// document when its last token has expired.
    let sessions: SessionService?
    var path: String { AssertionJWKS.wellKnownPath }

    init?(assertion: AssertionKeys?, sessions: SessionService?) {
        guard assertion != nil || sessions != nil else { return nil }
        self.assertion = assertion
        self.sessions = sessions
    }

    func response() -> LocalResponse {
        let documents = [assertion?.jwks, sessions?.jwks()].compactMap { $0 }
        // `{"keys":[A]}` and `{"keys":[B]}` make `{"keys":[A,B]}`.
        let lists = documents.compactMap { document -> ArraySlice<UInt8>? in
            guard let open = document.firstIndex(of: UInt8(ascii: "[")), let close = document.lastIndex(of: UInt8(ascii: "]")),
                  open < close else { return nil }
            return document[(open + 1)..<close]
        }.filter { !$0.isEmpty }
        var body = Array("{\"keys\":[".utf8)
        for (i, list) in lists.enumerated() {
            if i > 0 { body.append(UInt8(ascii: ",")) }
            body += list
        }
        body += Array("]}\n".utf8)
        return LocalResponse(status: 200, contentType: "application/json", headers: [("cache-control", "public, max-age=300")], body: body)
    }
}
