import PortcullisCore
import Testing

/// `Authority`: the one reading of a host for routing, TLS server names and the forwarded
/// `Host`. Each accepted spelling with its normalized form; each refused one.
struct AuthorityTests {
    static func normalized(_ text: String) -> String? {
        Array(text.utf8).withUnsafeBytes { raw -> String? in
            guard let parts = Authority.scan(raw, 0..<raw.count) else { return nil }
            var out: [UInt8] = []
            Authority.write(raw, parts) { out.append($0) }
            return String(decoding: out, as: UTF8.self)
        }
    }

    @Test(arguments: [
        ("a.example.com", "a.example.com"), ("A.Example.COM", "a.example.com"),
        ("a.example.com.", "a.example.com"), ("a.example.com.:8080", "a.example.com:8080"),
        ("a.example.com:443", "a.example.com:443"), ("a.example.com:0443", "a.example.com:443"),
        ("a.example.com:", "a.example.com"), ("localhost", "localhost"), ("127.0.0.1:80", "127.0.0.1:80"),
        ("[::1]", "[::1]"), ("[::1]:8080", "[::1]:8080"), ("[2001:DB8::1]", "[2001:db8::1]"), ("[::1]:", "[::1]"),
        ("my_host-1.internal", "my_host-1.internal"), ("x", "x"), ("a.b:65535", "a.b:65535"),
    ])
    func acceptedSpellingsNormalize(_ input: String, _ expected: String) {
        #expect(Self.normalized(input) == expected, "\(input)")
    }

    @Test(arguments: [
        "", ".", "..", "a..b", ".a", "a.example.com..", "a@b", "user@a.example.com", "a:1:2",
        "a.example.com:1:2", "a%2eb", "a:65536", "a:0", "a:000", "a:123456", "a:8x", "[::1", "[]", "[::g]",
        "[::1]x", "[::1]:99999", "a b", "a/b", "a\\b", "a?b", "a#b", ":80", "[::1]%eth0",
    ])
    func refusedSpellings(_ input: String) {
        #expect(Self.normalized(input) == nil, "\(input)")
    }

    @Test func theSameAuthorityOnceNormalized() {
        func same(_ a: String, _ b: String) -> Bool {
            Array(a.utf8).withUnsafeBytes { p in
                Array(b.utf8).withUnsafeBytes { q in
                    Authority.same(p, Authority.scan(p, 0..<p.count)!, q, Authority.scan(q, 0..<q.count)!)
                }
            }
        }
        #expect(same("Admin.example.com.", "admin.example.com"))
        #expect(same("a:0080", "A.:80"))
        #expect(!same("a:80", "a"))
        #expect(!same("a", "b"))
        #expect(!same("ab", "a"))
    }

    @Test func hostsFromTextDropThePortOrRefuseIt() {
        #expect(Authority.normalizedHost("Api.Example.com.") == "api.example.com")
        #expect(Authority.normalizedHost("api.example.com:443") == "api.example.com")
        #expect(Authority.normalizedHost("api.example.com:443", allowPort: false) == nil)
        #expect(Authority.normalizedHost("a@b") == nil)
    }
}
