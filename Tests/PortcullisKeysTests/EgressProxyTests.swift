import Foundation
import Testing
@testable import PortcullisKeys
@testable import PortcullisOutbound

/// Key fetches (and the lookup hook, which uses the same client) through an egress proxy
/// (#35.7): `HTTPS_PROXY` tunnels with CONNECT (TLS end to end with the key host, its name
/// checked), `HTTP_PROXY` takes absolute-form requests, credentials in the proxy URL go as
/// `Proxy-Authorization`, `NO_PROXY` and loopback go direct. A real proxy process on 127.0.0.1
/// reaches every name on loopback, so `keys.test` never leaves the machine.
@Suite(.serialized) struct EgressProxyTests {
    final class ProxyProcess {
        let directory: URL
        let port: Int
        let process = Process()

        init(requiredAuthorization: String? = nil) throws {
            directory = FileManager.default.temporaryDirectory.appendingPathComponent("proxy-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            let script = Bundle.module.url(forResource: "Fixtures/egress_proxy", withExtension: "py")
                ?? Bundle.module.resourceURL!.appendingPathComponent("Fixtures/egress_proxy.py")
            process.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
            process.arguments = [script.path, directory.path] + (requiredAuthorization.map { [$0] } ?? [])
            // Not the test runner's pipes: a child holding them would keep `swift test` waiting.
            process.standardOutput = FileHandle.nullDevice
            process.standardError = FileHandle.nullDevice
            process.standardInput = FileHandle.nullDevice
            try process.run()
            let deadline = Date().addingTimeInterval(20)
            var found: Int?
            while Date() < deadline, found == nil {
                found = (try? String(contentsOf: directory.appendingPathComponent("port"), encoding: .utf8)).flatMap { Int($0) }
                if found == nil { Thread.sleep(forTimeInterval: 0.05) }
            }
            guard let found else { throw FixtureError("proxy did not start") }
            port = found
        }

        var log: [String] {
            ((try? String(contentsOf: directory.appendingPathComponent("log"), encoding: .utf8)) ?? "").split(separator: "\n").map(String.init)
        }

        /// SIGKILL, not waited for here (Foundation's `waitUntilExit` can spin on Linux);
        /// Foundation reaps the child.
        func stop() {
            if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        }

        deinit { stop() }
    }

    @Test func httpsGoesThroughACONNECTTunnelWithTheNameChecked() async throws {
        let server = try KeyServer(keys: ["rsa-a": "RS256"], tlsNames: "DNS:keys.test")
        defer { server.stop() }
        let proxy = try ProxyProcess(requiredAuthorization: "Basic " + Data("egress:s3cret".utf8).base64EncodedString())
        defer { proxy.stop() }
        var options = HTTPFetchOptions(connectTimeout: 2, totalTimeout: 5, caFile: server.caFile)
        options.proxies = EgressProxy.Settings(environment: ["HTTPS_PROXY": "http://egress:s3cret@127.0.0.1:\(proxy.port)"])
        let fetched = try await get("https://keys.test:\(server.port)/keys", options: options).get()
        #expect(fetched.status == 200 && fetched.body.count > 300)
        #expect(proxy.log.contains("CONNECT keys.test:\(server.port) HTTP/1.1|Basic " + Data("egress:s3cret".utf8).base64EncodedString()),
                "\(proxy.log)")
        // The certificate is still checked against the target's name, through the tunnel.
        let other = try KeyServer(keys: ["rsa-a": "RS256"], tlsNames: "DNS:keys.elsewhere.test")
        defer { other.stop() }
        var otherOptions = options
        otherOptions.caFile = other.caFile
        guard case .failure(.tlsFailed) = await get("https://keys.test:\(other.port)/keys", options: otherOptions) else {
            Issue.record("a certificate for another name passed through the tunnel")
            return
        }
        // Wrong credentials: the proxy's 407 is the reason.
        options.proxies = EgressProxy.Settings(environment: ["HTTPS_PROXY": "http://egress:wrong@127.0.0.1:\(proxy.port)"])
        let refused = await get("https://keys.test:\(server.port)/keys", options: options)
        guard case .failure(.connectFailed(let address, let reason)) = refused else {
            Issue.record("expected connectFailed, got \(refused)")
            return
        }
        #expect(address == "127.0.0.1:\(proxy.port) (proxy)" && reason.contains("407"), "\(reason)")
    }

    @Test func httpGoesInAbsoluteFormAndNoProxyGoesDirect() async throws {
        let server = try KeyServer(keys: ["rsa-a": "RS256"])
        defer { server.stop() }
        let proxy = try ProxyProcess()
        defer { proxy.stop() }
        var options = HTTPFetchOptions(connectTimeout: 2, totalTimeout: 5)
        options.proxies = EgressProxy.Settings(environment: ["http_proxy": "127.0.0.1:\(proxy.port)", "no_proxy": "internal.test,.corp.test"])
        #expect(try await get("http://keys.test:\(server.port)/keys", options: options).get().status == 200)
        #expect(proxy.log == ["GET http://keys.test:\(server.port)/keys HTTP/1.1|-"], "\(proxy.log)")
        // Loopback and NO_PROXY names go direct (keys.corp.test would need DNS: it is never asked of the proxy).
        #expect(try await get("http://127.0.0.1:\(server.port)/keys", options: options).get().status == 200)
        _ = await get("http://a.corp.test:\(server.port)/keys", options: options)
        #expect(proxy.log.count == 1, "\(proxy.log)")
    }

    @Test func noProxyRules() throws {
        let settings = EgressProxy.Settings(environment: ["HTTPS_PROXY": "http://proxy.corp:3128",
                                                         "NO_PROXY": "internal.example, .svc.cluster.local,10.0.0.0/8,keys.test:8443,[::1]"])
        func proxied(_ url: String) throws -> Bool { settings.proxy(for: try FetchURL(parsing: url)) != nil }
        #expect(settings.https == EgressProxy(host: "proxy.corp", port: 3128))
        #expect(try proxied("https://www.googleapis.com/oauth2/v3/certs"))
        #expect(try !proxied("https://internal.example/keys") && !proxied("https://a.internal.example/keys"))
        #expect(try !proxied("https://users.app.svc.cluster.local/resolve"))
        #expect(try !proxied("https://10.1.2.3/keys") && proxied("https://11.1.2.3/keys"))
        #expect(try !proxied("https://keys.test:8443/") && proxied("https://keys.test:9443/"))
        #expect(try !proxied("https://127.0.0.1:9/") && !proxied("https://localhost/") && !proxied("https://[::1]:9/"))
        #expect(try !proxied("http://www.googleapis.com/"), "no HTTP_PROXY: http:// goes direct")
        #expect(EgressProxy.Settings(environment: ["NO_PROXY": "*", "HTTPS_PROXY": "http://p:1"]).proxy(for: try FetchURL(parsing: "https://x/")) == nil)
        #expect(EgressProxy(url: "socks5://p:1080") == nil && EgressProxy(url: "http://p") == EgressProxy(host: "p", port: 80))
    }
}
