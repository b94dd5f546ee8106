extension AuthFailure {
    /// The `WWW-Authenticate` value for this failure (RFC 6750 §3): `Bearer`
    /// with `realm`, then `error` and `error_description` unless no
    /// credential was presented (§3.1: no `error` then). `realm` and `scope`
    /// are filtered to the characters RFC 6750 allows in quoted values.
    public func wwwAuthenticate(realm: String, scope: String? = nil, presentedAs: PresentedAs = .accessToken) -> String {
        var value = "Bearer realm=\"\(AuthFailure.quotable(realm))\""
        if let code = errorCode {
            value += ", error=\"\(code.rawValue)\", error_description=\"\(AuthFailure.quotable(description(presentedAs: presentedAs)))\""
        }
        if let scope, errorCode == .insufficientScope {
            value += ", scope=\"\(AuthFailure.quotable(scope))\""
        }
        return value
    }

    /// %x20-21 / %x23-5B / %x5D-7E only: no `"`, no `\`, no controls.
    static func quotable(_ text: String) -> String {
        String(String.UnicodeScalarView(text.unicodeScalars.filter { scalar in
            (0x20...0x7E).contains(scalar.value) && scalar != "\"" && scalar != "\\"
        }))
    }
}
