import Testing
@testable import PortcullisHTTP

/// A raw target, its form and the expected path and query (nil path: rejected with 400).
struct NormalizationCase: Sendable, CustomTestStringConvertible {
    var target: String
    var form: RequestTargetForm = .origin
    var path: String?
    var query: String? = nil
    var testDescription: String { "\(target) → \(path ?? "400")" }
}

let normalizationCases: [NormalizationCase] = [
    .init(target: "/", path: "/"),
    .init(target: "/a/b", path: "/a/b"),
    .init(target: "/a/b/", path: "/a/b/"),
    .init(target: "/a/../b", path: "/b"),
    .init(target: "/a/./b", path: "/a/b"),
    .init(target: "//a///b", path: "/a/b"),
    .init(target: "/a/%2e%2e/b", path: "/b"),
    .init(target: "/a/%2E./b", path: "/b"),
    .init(target: "/a/.%2e/b", path: "/b"),
    .init(target: "/a/%2e/b", path: "/a/b"),
    .init(target: "/a\\..\\b", path: "/b"),
    .init(target: "/a\\b", path: "/a/b"),
    .init(target: "/a%2Fb", path: nil),
    .init(target: "/a%2fb", path: nil),
    .init(target: "/a%5cb", path: nil),
    .init(target: "/a%5Cb", path: nil),
    .init(target: "/%41", path: "/A"),
    .init(target: "/%7euser", path: "/~user"),
    .init(target: "/a%zz", path: nil),
    .init(target: "/a%2", path: nil),
    .init(target: "/a%", path: nil),
    .init(target: "/a%00", path: nil),
    .init(target: "/..", path: "/"),
    .init(target: "/../../etc/passwd", path: "/etc/passwd"),
    .init(target: "/a/..", path: "/"),
    .init(target: "/a/b/..", path: "/a/"),
    .init(target: "/a/.", path: "/a/"),
    .init(target: "/.", path: "/"),
    .init(target: "/a/..b/c", path: "/a/..b/c"),
    .init(target: "/a/.../c", path: "/a/.../c"),
    .init(target: "/a?x=../y", path: "/a", query: "x=../y"),
    .init(target: "/a?", path: "/a", query: ""),
    .init(target: "/a/%3a%3Ab", path: "/a/%3A%3Ab"),
    .init(target: "/a%20b", path: "/a%20b"),
    .init(target: "/a#f", path: nil),
    .init(target: "/a?q#f", path: nil),
    .init(target: "/api//protected/../admin", path: "/api/admin"),
    .init(target: "/public/%2e%2e/admin", path: "/admin"),
    .init(target: "http://h/x/../y?q", form: .absolute, path: "/y", query: "q"),
    .init(target: "http://h", form: .absolute, path: "/"),
    .init(target: "https://h:8443?q=1", form: .absolute, path: "/", query: "q=1"),
    .init(target: "HTTP://h//a", form: .absolute, path: "/a"),
    .init(target: "*", form: .asterisk, path: "*"),
    .init(target: "a", path: nil),
    .init(target: "/public/..;/admin", path: nil),
    .init(target: "/public/..;jsessionid=1/admin", path: nil),
    .init(target: "/public/%2e%2e;/admin", path: nil),
    .init(target: "/a/.;x/b", path: nil),
    .init(target: "/a/b;v=1/c", path: "/a/b;v=1/c"),
    .init(target: "/a/...;/c", path: "/a/...;/c"),
]

@Suite("Request-target normalization")
struct TargetNormalizerTests {
    @Test(arguments: normalizationCases)
    func normalizes(_ c: NormalizationCase) {
        let raw = bytes(c.target)
        let result = raw.withUnsafeBytes { TargetNormalizer.normalize($0, form: c.form) }
        switch result {
        case .success(let normalized):
            #expect(normalized.path == c.path)
            #expect(normalized.query == c.query)
        case .failure(let error):
            #expect(c.path == nil, "rejected: \(error.reason)")
            #expect(error.status == 400)
        }
    }

    @Test func normalizingTwiceChangesNothing() {
        for c in normalizationCases where c.path != nil && c.form == .origin {
            let once = bytes(c.path! + (c.query.map { "?" + $0 } ?? ""))
            let again = once.withUnsafeBytes { TargetNormalizer.normalize($0, form: .origin) }
            #expect(again == .success(NormalizedTarget(path: c.path!, query: c.query)))
        }
    }
}
