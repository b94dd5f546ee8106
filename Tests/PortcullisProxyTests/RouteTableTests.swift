import Testing
@testable import PortcullisProxy

struct RouteTableTests {
    let table = RouteTable([
        RouteConfiguration(pathPrefix: "/", upstream: "web", auth: .none),
        RouteConfiguration(pathPrefix: "/api", upstream: "api", auth: .required),
        RouteConfiguration(pathPrefix: "/api/public/", upstream: "api", auth: .none),
        RouteConfiguration(pathPrefix: "/api", host: "admin.example.com", upstream: "admin", auth: .required),
    ], upstreamNames: ["web", "api", "admin"])

    @Test func longestPrefixWinsOnSegmentBoundaries() {
        #expect(table.match(path: "/api/public/x", host: nil)?.configuration.auth == AuthMode.none)
        #expect(table.match(path: "/api/publicity", host: nil)?.configuration.auth == .required)
        #expect(table.match(path: "/apix", host: nil)?.configuration.upstream == "web")
        #expect(table.match(path: "/api", host: nil)?.configuration.upstream == "api")
    }

    @Test func hostBoundRoutesWinForTheirHostOnly() {
        #expect(table.match(path: "/api/x", host: "admin.example.com")?.configuration.upstream == "admin")
        #expect(table.match(path: "/api/x", host: "other.example.com")?.configuration.upstream == "api")
    }

    @Test func stripPrefixKeepsALeadingSlash() {
        let t = RouteTable([RouteConfiguration(pathPrefix: "/svc/", upstream: "a", auth: .none, stripPrefix: true)], upstreamNames: ["a"])
        let route = t.match(path: "/svc", host: nil)!
        #expect(RouteTable.forwardedPath("/svc", route: route) == "/")
        #expect(RouteTable.forwardedPath("/svc/a/b", route: route) == "/a/b")
    }

    @Test func cidrMatchesByPrefixLength() {
        let net = CIDR("10.1.0.0/16")!
        #expect(net.contains([10, 1, 200, 3]))
        #expect(!net.contains([10, 2, 0, 1]))
        #expect(CIDR("::1")!.contains(Array(repeating: 0, count: 15) + [1]))
        #expect(CIDR("10.0.0.0/33") == nil)
    }
}
