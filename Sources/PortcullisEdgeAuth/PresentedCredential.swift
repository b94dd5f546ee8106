import PortcullisAuth
import PortcullisHTTP
import PortcullisProxy

/// The credential a request carries, found without copying the token.
///
/// Selection (RFC 6750 §2, RFC 7235): one `Authorization` field whose scheme is
/// `Bearer` (any case) followed by one or more spaces and a token68; else the
/// route's session cookies. Two `Authorization` fields, a Bearer field without
/// a token68, or a Bearer token together with a session cookie are
/// `invalid_request`. Other schemes (`Basic`, …) are not ours: they count as
/// no credential and stay untouched for the upstream.
enum PresentedCredential {
    case none
    /// `Bearer 1*SP` and the rest of the field: the token68 syntax of that rest is not
    /// checked yet (`isToken68`); a verified-token-cache hit stands for the check.
    case bearer(Range<Int>)
    case cookies(CookieJar)
    case malformed(AuthFailure.Reason)

    /// What `find` saw: the credential, and the session cookies this route does not verify
    /// but an app would read (another provider's), which must not reach the upstream.
    struct Found {
        var credential: PresentedCredential
        var foreign: ForeignSessionCookies? = nil
    }

    /// Finds the credential. `cookieNames` are the session cookies the route verifies;
    /// `sessionBases` every session cookie name of every provider. Cookie names are read
    /// as the apps' frameworks read them (`CookieJar`): a cookie an app would take as a
    /// session is verified (a name the route verifies), refused as ambiguous (another
    /// spelling of a name the route verifies: `name.x`, `__Host-name`, a chunk beside the
    /// whole), or reported in `foreign` to be stripped (another provider's); never passed
    /// on unverified.
    static func find(in request: RequestView, cookieNames: [String], sessionBases: [String]) -> Found {
        var foreign: ForeignSessionCookies?
        let credential = find(in: request, cookieNames: cookieNames, sessionBases: sessionBases, foreign: &foreign)
        return Found(credential: credential, foreign: foreign)
    }

    private static func find(in request: RequestView, cookieNames: [String], sessionBases: [String],
                             foreign: inout ForeignSessionCookies?) -> PresentedCredential {
        let bytes = request.bytes
        var authorization: Range<Int>?
        var authorizationCount = 0
        var hasCookieField = false
        for field in request.fields {
            switch field.name.count {
            case 13 where HTTPBytes.equalsCaseInsensitive(bytes, field.name, "authorization"):
                authorizationCount += 1
                authorization = field.value
            case 6 where HTTPBytes.equalsCaseInsensitive(bytes, field.name, "cookie"):
                hasCookieField = true
            default:
                continue
            }
        }
        if authorizationCount > 1 { return .malformed(.ambiguousCredential) }
        var bearer: Range<Int>?
        if let value = authorization {
            switch bearerScheme(bytes, value) {
            case .notBearer: break
            case .malformed: return .malformed(.malformedAuthorization)
            case .token(let range): bearer = range
            }
        }
        var jar: CookieJar?
        if hasCookieField && !sessionBases.isEmpty {
            let candidate = CookieJar(request: request)
            var strip: [Substring] = []
            for name in candidate.sessionLikeNames(of: sessionBases) {
                if cookieNames.contains(where: { CookieJar.isSessionCookie(name, base: $0) }) { continue }  // verified here
                // A spelling of a session this route verifies that the gateway would not
                // read but the app would (NextAuth takes every cookie whose name starts
                // with the session name): two credentials, as two Authorization fields.
                if cookieNames.contains(where: { CookieJar.sharesBase(name, $0) }) { return .malformed(.ambiguousCredential) }
                strip.append(name)
            }
            if !strip.isEmpty { foreign = ForeignSessionCookies(jar: candidate, names: strip) }
            if !cookieNames.isEmpty && candidate.containsAny(of: cookieNames) {
                if candidate.holdsSeveralSessions(of: cookieNames) { return .malformed(.ambiguousCredential) }
                jar = candidate
            }
        }
        switch (bearer, jar) {
        case (.some(let range), .some):
            let token = UnsafeRawBufferPointer(rebasing: bytes[range])
            return .malformed(isToken68(token) ? .ambiguousCredential : .malformedAuthorization)
        case (.some(let range), nil): return .bearer(range)
        case (nil, .some(let jar)): return .cookies(jar)
        case (nil, nil): return .none
        }
    }

    enum BearerParse: Equatable { case notBearer, malformed, token(Range<Int>) }

    /// `Bearer 1*SP token68` (RFC 6750 §2.1); the scheme is case-insensitive.
    static func parseBearer(_ bytes: UnsafeRawBufferPointer, _ value: Range<Int>) -> BearerParse {
        let parsed = bearerScheme(bytes, value)
        guard case .token(let range) = parsed else { return parsed }
        return isToken68(UnsafeRawBufferPointer(rebasing: bytes[range])) ? parsed : .malformed
    }

    /// `Bearer 1*SP` and a non-empty rest, whose syntax `isToken68` checks.
    static func bearerScheme(_ bytes: UnsafeRawBufferPointer, _ value: Range<Int>) -> BearerParse {
        let scheme = "bearer".utf8
        var i = value.lowerBound
        for expected in scheme {
            guard i < value.upperBound, bytes[i] | 0x20 == expected else {
                // Another scheme, unless it is a longer word starting with "bearer".
                return .notBearer
            }
            i += 1
        }
        if i == value.upperBound { return .malformed }  // "Bearer" alone
        guard bytes[i] == 0x20 else { return .notBearer }  // e.g. "Bearerx …": another scheme
        while i < value.upperBound && bytes[i] == 0x20 { i += 1 }
        guard i < value.upperBound else { return .malformed }
        return .token(i..<value.upperBound)
    }

    /// `token68`: token68 characters, then only `=` padding (not all of it).
    static func isToken68(_ token: UnsafeRawBufferPointer) -> Bool {
        var i = token68End(token, from: 0, to: token.count)
        while i < token.count && token[i] == UInt8(ascii: "=") { i += 1 }
        return i == token.count && i > 0 && token[0] != UInt8(ascii: "=")
    }

    /// Where the token68 characters (except '=') that start at `start` end.
    ///
    /// Every authenticated request scans its whole token (often 700 bytes or more), so
    /// the scan takes 8 bytes a step through `token68Table` and tests once per step;
    /// a micro-benchmark of a 640-byte token: 195–310 ns, against 565–720 ns testing
    /// each byte with `isToken68` (its two masks cost two branches per byte). In the
    /// HTTP/2 authenticated load row the per-byte scan was 3.3% of the gateway's CPU.
    @inline(__always)
    static func token68End(_ bytes: UnsafeRawBufferPointer, from start: Int, to end: Int) -> Int {
        guard let base = bytes.baseAddress, start < end else { return start }
        return token68Table.withUnsafeBufferPointer { table in
            var i = start
            while i &+ 8 <= end {
                var all: UInt8 = 1
                for k in 0..<8 { all &= table[Int(base.load(fromByteOffset: i &+ k, as: UInt8.self))] }
                if all == 0 { break }
                i &+= 8
            }
            while i < end && table[Int(base.load(fromByteOffset: i, as: UInt8.self))] != 0 { i &+= 1 }
            return i
        }
    }

    /// 1 for each token68 byte except '=' (see `isToken68`), 0 for the others.
    static let token68Table: [UInt8] = (0...255).map { isToken68(UInt8($0)) ? 1 : 0 }

    /// token68 characters (RFC 9110 §11.2) except '=': ALPHA, DIGIT, "-._~+/", as two
    /// 64-bit masks (bytes 0–63, 64–127).
    @inline(__always)
    static func isToken68(_ b: UInt8) -> Bool {
        let low: UInt64 = 0x3ffe80000000000, high: UInt64 = 0x47fffffe87fffffe
        if b < 64 { return low >> UInt64(b) & 1 != 0 }
        if b < 128 { return high >> UInt64(b - 64) & 1 != 0 }
        return false
    }
}

/// The request's cookies as (name, value) pairs, from every `Cookie` field
/// (RFC 6265 §5.4: `name=value` joined by `; `). Built only on routes that
/// accept session cookies and only when a `Cookie` field is present.
struct CookieJar {
    let text: String
    let pairs: [(name: Substring, value: Substring)]

    init(request: RequestView) {
        // One Cookie field (the usual case) becomes the text directly; several
        // are joined first.
        var first: String?
        var joined = [UInt8]()
        for field in request.fields where field.name.count == 6
            && HTTPBytes.equalsCaseInsensitive(request.bytes, field.name, "cookie") {
            let value = UnsafeRawBufferPointer(rebasing: request.bytes[field.value])
            if let first {
                if joined.isEmpty { joined.append(contentsOf: first.utf8) }
                joined.append(contentsOf: "; ".utf8)
                joined.append(contentsOf: value)
            } else {
                first = String(decoding: value, as: UTF8.self)
            }
        }
        let text = joined.isEmpty ? first ?? "" : String(decoding: joined, as: UTF8.self)
        self.text = text
        var pairs: [(name: Substring, value: Substring)] = []
        for piece in text.split(separator: ";", omittingEmptySubsequences: true) {
            let trimmed = piece.drop { $0 == " " || $0 == "\t" }
            guard let equals = trimmed.firstIndex(of: "=") else { continue }
            var value = trimmed[trimmed.index(after: equals)...].drop { $0 == " " || $0 == "\t" }
            while value.last == " " || value.last == "\t" { value = value.dropLast() }
            if value.count >= 2 && value.first == "\"" && value.last == "\"" { value = value.dropFirst().dropLast() }
            pairs.append((Self.name(trimmed[..<equals]), value))
        }
        self.pairs = pairs
    }

    /// A cookie's name as the `cookie` library (Express, NextAuth, Auth.js) reads it:
    /// spaces and tabs around it trimmed (`name =v` is `name`).
    static func name(_ raw: Substring) -> Substring {
        var name = raw.drop { $0 == " " || $0 == "\t" }
        while name.last == " " || name.last == "\t" { name = name.dropLast() }
        return name
    }

    /// `name` without a `__Secure-` or `__Host-` prefix (any case, as browsers compare them).
    static func unprefixed(_ name: Substring) -> Substring {
        for prefix in ["__secure-", "__host-"] where name.count > prefix.count
            && name.prefix(prefix.count).lowercased() == prefix {
            return name.dropFirst(prefix.count)
        }
        return name
    }

    /// True when an app would read `name` as (part of) the session cookie `base`: NextAuth
    /// and Auth.js take every cookie whose name starts with the session name, whatever
    /// follows (`base.0`, `base.x`, `base-2`), and the `__Secure-`/`__Host-` forms name
    /// the same cookie.
    static func sharesBase(_ name: Substring, _ base: String) -> Bool {
        unprefixed(name).hasPrefix(unprefixed(Substring(base)))
    }

    /// Names of the cookies with a value that an app would read as one of `bases`' sessions.
    func sessionLikeNames(of bases: [String]) -> [Substring] {
        var found: [Substring] = []
        for pair in pairs where !pair.value.isEmpty && bases.contains(where: { Self.sharesBase(pair.name, $0) }) {
            if !found.contains(pair.name) { found.append(pair.name) }
        }
        return found
    }

    /// True when a cookie is named one of `names`, or a chunk of one (`name.N`).
    func containsAny(of names: [String]) -> Bool {
        pairs.contains { pair in names.contains { Self.isSessionCookie(pair.name, base: $0) } }
    }

    static func isSessionCookie(_ name: Substring, base: String) -> Bool {
        guard name.hasPrefix(base) else { return false }
        let rest = name.dropFirst(base.count)
        if rest.isEmpty { return true }
        guard rest.first == ".", rest.count > 1 else { return false }
        return rest.dropFirst().utf8.allSatisfy { $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }
    }

    /// More than one session credential: cookies of two session names (a NextAuth v4
    /// and an Auth.js v5 cookie, or `__Secure-` beside the plain name), one name twice
    /// with different values, or a whole cookie beside chunks of the same name. Any of
    /// these could carry two identities, so the request is `invalid_request`, as two
    /// `Authorization` fields are. Identical repeats and emptied cookies (`name=`, what
    /// a sign-out leaves) do not count.
    func holdsSeveralSessions(of names: [String]) -> Bool {
        var present = 0
        for base in Set(names) {
            var whole: Substring?
            var chunks: [Substring: Substring] = [:]
            var hasWhole = false
            for pair in pairs where !pair.value.isEmpty && Self.isSessionCookie(pair.name, base: base) {
                if pair.name.count == base.count {
                    if let whole, whole != pair.value { return true }
                    whole = pair.value
                    hasWhole = true
                } else {
                    let index = pair.name.dropFirst(base.count)
                    if let seen = chunks[index], seen != pair.value { return true }
                    chunks[index] = pair.value
                }
            }
            if hasWhole && !chunks.isEmpty { return true }
            if hasWhole || !chunks.isEmpty { present += 1 }
        }
        return present > 1
    }

    /// The names of the session cookies present (and their chunks), each once.
    func sessionCookieNames(of names: [String]) -> [Substring] {
        var found: [Substring] = []
        for pair in pairs where names.contains(where: { Self.isSessionCookie(pair.name, base: $0) }) {
            if !found.contains(pair.name) { found.append(pair.name) }
        }
        return found
    }

    /// The Cookie value without the session cookies (and their chunks); the
    /// other cookies are kept byte for byte.
    func header(removing names: [String]) -> String {
        Self.filter(text) { name in names.contains { Self.isSessionCookie(name, base: $0) } }
    }

    /// `text` (a Cookie value) without the cookies whose (trimmed) name `drop` picks; the
    /// others are kept byte for byte.
    static func filter(_ text: String, dropping drop: (Substring) -> Bool) -> String {
        text.split(separator: ";", omittingEmptySubsequences: true)
            .map { $0.drop { $0 == " " || $0 == "\t" } }
            .filter { piece in !drop(name(piece.prefix { $0 != "=" })) }
            .joined(separator: "; ")
    }
}

/// Session cookies of providers a route does not verify: an app would read them as a
/// session, so they are removed from the Cookie field the upstream gets.
struct ForeignSessionCookies {
    let jar: CookieJar
    let names: [Substring]

    /// `grant` with those cookies removed from what it forwards (its own replacement, if
    /// it has one, or the request's Cookie value): a new grant (grants are shared).
    func strip(from grant: AuthGrant) -> AuthGrant {
        grant.replacingCookie(CookieJar.filter(grant.replacementCookie ?? jar.text) { names.contains($0) })
    }
}
