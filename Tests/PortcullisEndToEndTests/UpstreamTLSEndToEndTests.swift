import Foundation
import PortcullisTestSupport
import Testing

/// Upstreams as apps are really hosted: by host name, over HTTPS verified against a
/// test CA, with `host_header` both ways; each verification failure a 502 and one
/// log line per change of state.
@Suite(.serialized) struct UpstreamTLSEndToEndTests {
    static func config(url: String, extra: String = "") -> String {
        """
        upstreams:
          app: {url: "\(url)"\(extra)}
        routes:
          - {path: /, upstream: app, auth: none}
        """
    }

    @Test func anHTTPSUpstreamIsVerifiedAndReusedWithTheClientsHost() throws {
        let pki = try TestPKI()
        let leaf = try pki.leaf(["localhost", "IP:127.0.0.1"])
        let upstream = try EchoUpstream(tls: (leaf.certificate, leaf.key))
        let gateway = try GatewayProcess(Self.config(url: "https://localhost:\(upstream.port)",
                                                     extra: ", ca_file: \"\(pki.caCertificate)\""))
        // Three requests on one client connection: pooled keep-alive TLS to the upstream.
        let (_, out, _) = E2E.run("/usr/bin/curl", ["-s", "-H", "Host: api.example.test", "-w", "\n%{http_code}\n",
                                                    "\(gateway.url)/a", "\(gateway.url)/b", "\(gateway.url)/c"])
        #expect(out.components(separatedBy: "\n200\n").count == 4, "\(out)")
        let echo = try Echo(String(out.split(separator: "\n").first ?? ""))
        #expect(echo.path == "/a")
        #expect(echo.values("host") == ["api.example.test"], "host_header: client (the default) keeps the client's Host")
        #expect(echo.values("x-forwarded-proto") == ["http"])
        #expect(!gateway.log.contains("upstream unreachable"))

        // By IP literal too: the certificate's IP address is checked.
        let byIP = try GatewayProcess(Self.config(url: "https://127.0.0.1:\(upstream.port)",
                                                  extra: ", ca_file: \"\(pki.caCertificate)\", host_header: upstream"))
        let (status, body) = E2E.curl(["-H", "Host: api.example.test", "\(byIP.url)/ip"])
        #expect(status == 200)
        let viaIP = try Echo(body)
        #expect(viaIP.values("host") == ["127.0.0.1:\(upstream.port)"], "host_header: upstream sends the URL's authority")
        #expect(viaIP.values("x-forwarded-host") == ["api.example.test"])
    }

    @Test func verificationFailuresAre502AndLoggedOncePerStateChange() throws {
        let pki = try TestPKI()
        let stranger = try TestPKI(name: "Unknown CA")
        let cases: [(String, TestPKI.Leaf, String)] = [
            ("wrong name", try pki.leaf(["other.test"]), "hostname mismatch"),
            ("expired", try pki.leaf(["localhost"], startDays: -5, endDays: -1), "expired"),
            ("unknown CA", try stranger.leaf(["localhost"]), "local issuer"),
        ]
        for (what, leaf, reason) in cases {
            let upstream = try EchoUpstream(tls: (leaf.certificate, leaf.key))
            let gateway = try GatewayProcess(Self.config(url: "https://localhost:\(upstream.port)",
                                                         extra: ", ca_file: \"\(pki.caCertificate)\""))
            for _ in 0..<4 {
                let (status, body) = E2E.curl(["\(gateway.url)/x"])
                #expect(status == 502, "\(what)")
                #expect(body.contains("TLS"), "\(what): \(body)")
                #expect(!body.contains(reason), "the client is not told the upstream's certificate details")
            }
            #expect(gateway.waitForLog(reason), "\(what): \(gateway.log)")
            let lines = gateway.log.components(separatedBy: "\n").filter { $0.contains("upstream unreachable") }
            #expect(lines.count == 1, "\(what): logged once per change, not per request: \(lines)")
            #expect(try upstream.seen().isEmpty, "\(what): no request reached the upstream")
        }
    }

    @Test func theSystemTrustStoreDoesNotTrustATestCA() throws {
        let pki = try TestPKI()
        let leaf = try pki.leaf(["localhost"])
        let upstream = try EchoUpstream(tls: (leaf.certificate, leaf.key))
        let gateway = try GatewayProcess(Self.config(url: "https://localhost:\(upstream.port)"))
        #expect(E2E.curl(["\(gateway.url)/x"]).status == 502)
    }

    @Test func anUpstreamByHostNameIsResolvedOffTheLoopsAndReachable() throws {
        let upstream = try EchoUpstream()
        // `localhost` is a name here: it goes through getaddrinfo (/etc/hosts), not a literal.
        let gateway = try GatewayProcess(Self.config(url: "http://localhost:\(upstream.port)", extra: ", host_header: upstream"))
        let (status, body) = E2E.curl(["\(gateway.url)/named"])
        #expect(status == 200)
        #expect(try Echo(body).values("host") == ["localhost:\(upstream.port)"])
        // A name that does not resolve: 502 with a reason, logged once; start-up is not refused.
        let unresolvable = try GatewayProcess(Self.config(url: "http://no-such-host.invalid:80"))
        for _ in 0..<3 { #expect(E2E.curl(["\(unresolvable.url)/x"]).status == 502) }
        #expect(unresolvable.waitForLog("cannot resolve no-such-host.invalid"))
        #expect(unresolvable.log.components(separatedBy: "upstream unreachable").count == 2)
    }

    @Test func checkConfigRefusesBadUpstreamURLsAndCAFiles() throws {
        let dir = RedisProcess.makeDirectory()
        let cases: [(String, String)] = [
            ("url: \"ftp://x\"", "expected http://HOST[:PORT] or https://HOST[:PORT]"),
            ("url: \"https://x/path\"", "take no path"),
            ("url: \"http://bad_host:80\"", "not an IP address or a DNS name"),
            ("url: \"https://x:0\"", "invalid port"),
            ("url: \"http://x\", ca_file: /etc/hosts", "ca_file applies to https:// upstreams only"),
            ("url: \"https://x\", ca_file: \(dir)/missing.pem", "missing.pem"),
            ("url: \"https://x\", host_header: origin", "expected client or upstream"),
        ]
        for (upstream, reason) in cases {
            let path = dir + "/c-\(UUID().uuidString).yaml"
            try "upstreams:\n  app: {\(upstream)}\nroutes: [{path: /, upstream: app, auth: none}]\n"
                .write(toFile: path, atomically: true, encoding: .utf8)
            let (status, out, err) = E2E.run(E2E.binary, ["check-config", path])
            #expect(status == 2, "\(upstream): \(out)")
            #expect(err.contains(reason) && err.contains("upstreams.app"), "\(upstream): \(err)")
        }
    }
}

/// `rediss://`: the revocation store over TLS through the same TLS layer.
@Suite(.serialized) struct RedisTLSEndToEndTests {
    static func config(_ store: String, upstream: EchoUpstream) -> String {
        """
        providers:
          - {name: app, type: hs256, secret: "\(AuthFixtures.appSecret)"}
        store: \(store)
        upstreams:
          app: {url: "http://127.0.0.1:\(upstream.port)"}
        routes:
          - {path: /api/v1/auth/logout, upstream: app, auth: required, revoke_on_success: true}
          - {path: /, upstream: app, auth: required}
        """
    }

    @Test func revocationsTravelOverRediss() throws {
        let pki = try TestPKI()
        let leaf = try pki.leaf(["redis.test", "IP:127.0.0.1"])
        let redis = try RedisProcess(tlsCertificate: leaf.certificate, key: leaf.key, ca: pki.caCertificate)
        let upstream = try EchoUpstream()
        let store = "{redis: \"rediss://127.0.0.1:\(redis.port)/0\", tls: {ca_file: \"\(pki.caCertificate)\"}}"
        let a = try GatewayProcess(Self.config(store, upstream: upstream))
        let b = try GatewayProcess(Self.config(store, upstream: upstream))
        #expect(waitUntil(5) { E2E.curl(["http://127.0.0.1:\(a.adminPort)/readyz"]).status == 200 })
        let credential = try a.mint(["--provider", "app"])
        #expect(waitUntil(5) { E2E.curl(["-H", credential, "\(b.url)/visits"]).status == 200 })
        #expect(E2E.curl(["-X", "POST", "-H", credential, "\(a.url)/api/v1/auth/logout"]).status == 200)
        #expect(waitUntil(5) { E2E.curl(["-H", credential, "\(b.url)/visits"]).status == 401 }, "enforced by the other instance")
        #expect(redis.cli(["--scan"]).split(separator: "\n").contains { $0.hasPrefix("portcullis:") }, "stored in the TLS Redis")
    }

    @Test func aRedisCertificateFromAnUnknownAuthorityIsRefusedWithTheReason() throws {
        let pki = try TestPKI()
        let stranger = try TestPKI(name: "Stranger CA")
        let leaf = try stranger.leaf(["redis.test", "IP:127.0.0.1"])
        let redis = try RedisProcess(tlsCertificate: leaf.certificate, key: leaf.key, ca: stranger.caCertificate)
        let upstream = try EchoUpstream()
        let store = "{redis: \"rediss://127.0.0.1:\(redis.port)/0\", tls: {ca_file: \"\(pki.caCertificate)\"}}"
        let gateway = try GatewayProcess(Self.config(store, upstream: upstream) + "\nrevocation: {max_staleness: 1s, on_unavailable: deny}")
        #expect(waitUntil(8) { E2E.curl(["http://127.0.0.1:\(gateway.adminPort)/readyz"]).status == 503 })
        #expect(gateway.waitForLog("certificate verification"), "the log says why: \(gateway.log.suffix(1500))")
    }
}
