import Foundation
import PortcullisTestSupport
import Testing

/// One reading of the host for routing and for the upstream, whatever spells it: HTTP/1.1
/// `Host`, an absolute-form target, HTTP/2 `:authority` and `host`. A host-bound route
/// (auth required) beside a host-less open one: no spelling of the bound host reaches the
/// open route, every invalid one is refused (400 on HTTP/1.1, a stream error on HTTP/2),
/// and the upstream gets the normalized host.
@Suite(.serialized) struct HostRoutingEndToEndTests {
    static func gateway(_ upstream: EchoUpstream) throws -> GatewayProcess {
        try GatewayProcess("""
        upstreams:
          app: {url: "http://127.0.0.1:\(upstream.port)"}
        routes:
          - {path: /, host: Admin.Example.com., upstream: app, auth: required}
          - {path: /, upstream: app, auth: none}
        """, listen: """
          - {address: "127.0.0.1:PORT", h2c: true}
        """)
    }

    /// Status and body of one HTTP/1.1 request sent as raw bytes.
    static func raw(_ port: UInt16, _ head: String) throws -> (Int, String) {
        let client = try RawConnection(port: port, timeout: 10)
        client.send(head + "\r\n\r\n")
        let message = try #require(client.readMessage())
        return (message.status ?? 0, message.bodyText)
    }

    /// The `host` the echo upstream received.
    static func forwardedHost(_ body: String) -> String? {
        guard let object = try? JSONSerialization.jsonObject(with: Data(body.utf8)) as? [String: Any],
              let headers = object["headers"] as? [[String]] else { return nil }
        return headers.first { $0.first?.lowercased() == "host" }?.last
    }

    @Test func everySpellingOfABoundHostOnHTTP1IsRoutedToItsRouteOrRefused() throws {
        let upstream = try EchoUpstream()
        let g = try Self.gateway(upstream)
        // The bound host however it is spelled: its route (401 without a credential).
        for host in ["admin.example.com", "admin.example.com.", "ADMIN.Example.Com", "admin.example.com:80",
                     "admin.example.com.:8080", "admin.example.com:0080", "admin.example.com:"] {
            #expect(try Self.raw(g.port, "GET /x HTTP/1.1\r\nHost: \(host)").0 == 401, "Host: \(host)")
        }
        #expect(try Self.raw(g.port, "GET http://Admin.Example.com./x HTTP/1.1\r\nHost: other.example").0 == 401,
                "absolute form")
        // Not a host: 400, nothing forwarded.
        for host in ["admin.example.com:1:2", "a@admin.example.com", "admin%2eexample.com", "admin.example.com..",
                     ".admin.example.com", "admin..example.com", "admin.example.com:99999", "[::1", "a b"] {
            #expect(try Self.raw(g.port, "GET /x HTTP/1.1\r\nHost: \(host)").0 == 400, "Host: \(host)")
        }
        #expect(try Self.raw(g.port, "GET http://a@admin.example.com/x HTTP/1.1\r\nHost: x").0 == 400)
        // Another host: the open route, and the upstream gets the normalized host.
        let (status, body) = try Self.raw(g.port, "GET /open HTTP/1.1\r\nHost: Public.Example.COM.:0443")
        #expect(status == 200)
        #expect(Self.forwardedHost(body) == "public.example.com:443", "\(body)")
        let seen = try upstream.seen()
        #expect(seen == ["/open"], "only the open request reached the app: \(seen)")
    }

    @Test func everySpellingOfABoundHostOnHTTP2IsRoutedToItsRouteOrAStreamError() throws {
        let upstream = try EchoUpstream()
        let g = try Self.gateway(upstream)
        func status(_ arguments: [String]) throws -> (Int?, [String: Any]) {
            let result = try H2Client.run(g.port, ["request", "--path", "/x"] + arguments)
            return (H2Client.responses(result).first?["status"] as? Int, result)
        }
        for authority in ["admin.example.com", "admin.example.com.", "ADMIN.example.com:443"] {
            #expect(try status(["--authority", authority]).0 == 401, ":authority \(authority)")
        }
        // No :authority, a host field instead (as HTTP/1.1 gateways may forward it).
        let hostOnly = try status(["--raw-pseudo", #"[[":method","GET"],[":scheme","http"],[":path","/x"]]"#,
                                   "--header", "host: Admin.Example.com."])
        #expect(hostOnly.0 == 401, "\(hostOnly.1)")
        // Invalid, or two hosts that differ: the stream is reset, nothing answered or forwarded.
        for arguments in [["--authority", "admin.example.com:1:2"], ["--authority", "a@admin.example.com"],
                          ["--authority", "admin%2eexample.com"], ["--authority", "admin.example.com.."],
                          ["--authority", "other.example", "--header", "host: admin.example.com"]] {
            let (code, result) = try status(arguments)
            #expect(code == nil, "\(arguments): answered \(code ?? 0)")
            let resets = result["resets"] as? [String: Any] ?? [:]
            #expect(resets["1"] as? Int == 1, "\(arguments): PROTOCOL_ERROR expected, got \(resets) \(result)")
        }
        let open = try H2Client.run(g.port, ["request", "--path", "/open", "--authority", "Public.Example.COM."])
        let response = try #require(H2Client.responses(open).first)
        #expect(response["status"] as? Int == 200)
        #expect(Self.forwardedHost(response["body"] as? String ?? "") == "public.example.com", "\(response)")
        #expect(try upstream.seen() == ["/open"])
    }
}
