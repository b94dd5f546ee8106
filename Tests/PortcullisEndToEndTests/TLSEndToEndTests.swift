import Foundation
import PortcullisTestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// TLS termination through the real binary, with real clients (`curl`, `openssl
/// s_client`, Python's ssl) and certificates made by a test CA at test time.
@Suite(.serialized) struct TLSEndToEndTests {
    static let echoScript = E2E.packageRoot.appendingPathComponent("Tests/PortcullisEndToEndTests/Fixtures/tls_keepalive_client.py").path

    /// `openssl s_client` to the gateway: stdin gets `input` and stays open `linger`
    /// seconds (so TLS 1.3 tickets arrive); stdout and stderr together.
    static func sClient(_ port: UInt16, _ arguments: [String], input: String = "", linger: Double = 0.3) -> String {
        let quoted = arguments.map { "'\($0)'" }.joined(separator: " ")
        let command = "(printf '%s' '\(input)'; sleep \(linger)) | timeout 10 openssl s_client -connect 127.0.0.1:\(port) \(quoted) 2>&1"
        return E2E.run("/bin/sh", ["-c", command], timeout: 15).1
    }

    /// The serial number of the certificate the gateway presents for `serverName` (nil: no SNI).
    static func servedSerial(_ port: UInt16, serverName: String?) -> String {
        let sni = serverName.map { "-servername '\($0)'" } ?? "-noservername"
        let command = "timeout 10 openssl s_client -connect 127.0.0.1:\(port) \(sni) </dev/null 2>/dev/null | openssl x509 -noout -serial"
        return E2E.run("/bin/sh", ["-c", command], timeout: 15).1
            .trimmingCharacters(in: .whitespacesAndNewlines).replacingOccurrences(of: "serial=", with: "")
    }

    static func tlsListener(_ certificates: [TestPKI.Leaf], extra: String = "") -> String {
        let list = certificates.map { "{certificate: \"\($0.certificate)\", private_key: \"\($0.key)\"}" }.joined(separator: ", ")
        return "  - {address: \"127.0.0.1:PORT\", tls: {certificates: [\(list)]\(extra)}}"
    }

    static func upstreamConfig(_ upstream: EchoUpstream) -> String { upstream.openRoute }

    /// A renewed certificate applies by itself (#35.5, as cert-manager renews a Secret): the
    /// files are compared every `certificate_check`; a changed pair is loaded through the reload
    /// path (without reading the configuration file: an edit waiting there stays waiting); a
    /// half-written pair is refused, the old certificate serving on until the next change.
    @Test func renewedCertificateFilesApplyWithoutASignal() throws {
        let pki = try TestPKI()
        let first = try pki.leaf(["api.test"]), second = try pki.leaf(["api.test"]), third = try pki.leaf(["api.test"])
        let live = TestPKI.Leaf(certificate: pki.directory + "/live.pem", key: pki.directory + "/live.key", serial: first.serial)
        try FileManager.default.copyItem(atPath: first.certificate, toPath: live.certificate)
        try FileManager.default.copyItem(atPath: first.key, toPath: live.key)
        let upstream = try EchoUpstream()
        let gateway = try GatewayProcess(Self.upstreamConfig(upstream) + "\ncertificate_check: 1s", listen: Self.tlsListener([live]))
        #expect(Self.servedSerial(gateway.port, serverName: "api.test") == first.serial)
        // An edit of the file that is not meant to apply yet (it would fail a reload).
        let text = try String(contentsOfFile: gateway.configPath, encoding: .utf8)
        try (text + "\nlog_level: loud\n").write(toFile: gateway.configPath, atomically: true, encoding: .utf8)
        // Renewed: both files replaced (as a Secret volume's atomic swap, here a rename).
        for (from, to) in [(second.key, live.key), (second.certificate, live.certificate)] {
            try FileManager.default.copyItem(atPath: from, toPath: to + ".new")
            rename(to + ".new", to)
        }
        #expect(waitUntil(10) { Self.servedSerial(gateway.port, serverName: "api.test") == second.serial }, "\(gateway.log.suffix(800))")
        #expect(gateway.log.contains("certificate files changed") && gateway.log.contains("\"trigger\":\"certificate files changed\""))
        // Half-written: the certificate of one pair with the key of another is refused, logged; the
        // second certificate serves on.
        try FileManager.default.removeItem(atPath: live.certificate)
        try FileManager.default.copyItem(atPath: third.certificate, toPath: live.certificate)
        #expect(waitUntil(10) { gateway.log.contains("configuration reload refused") }, "\(gateway.log.suffix(800))")
        #expect(Self.servedSerial(gateway.port, serverName: "api.test") == second.serial)
        // The key follows: the pair loads.
        try FileManager.default.removeItem(atPath: live.key)
        try FileManager.default.copyItem(atPath: third.key, toPath: live.key)
        #expect(waitUntil(10) { Self.servedSerial(gateway.port, serverName: "api.test") == third.serial }, "\(gateway.log.suffix(800))")
    }

    @Test func sniChoosesTheCertificateByNameAndTheFirstOtherwise() throws {
        let pki = try TestPKI()
        let api = try pki.leaf(["api.test", "*.api.test"])
        let web = try pki.leaf(["web.test"], keyType: .rsa)
        let upstream = try EchoUpstream()
        let gateway = try GatewayProcess(Self.upstreamConfig(upstream), listen: Self.tlsListener([api, web]))
        let port = gateway.port
        #expect(Self.servedSerial(port, serverName: "api.test") == api.serial)
        #expect(Self.servedSerial(port, serverName: "web.test") == web.serial)
        #expect(Self.servedSerial(port, serverName: "WEB.test") == web.serial)
        #expect(Self.servedSerial(port, serverName: "v2.api.test") == api.serial, "wildcard from the SAN")
        #expect(Self.servedSerial(port, serverName: "a.b.api.test") == api.serial, "a wildcard covers one label; default otherwise")
        #expect(Self.servedSerial(port, serverName: "unknown.test") == api.serial, "unknown name: the first certificate")
        #expect(Self.servedSerial(port, serverName: nil) == api.serial, "no SNI: the first certificate")

        for name in ["api.test", "web.test"] {
            let (status, body) = E2E.curl(["--http1.1", "--cacert", pki.caCertificate, "--resolve", "\(name):\(port):127.0.0.1",
                                           "https://\(name):\(port)/hello?x=1"])
            #expect(status == 200, "\(name)")
            let echo = try Echo(body)
            #expect(echo.path == "/hello?x=1")
            #expect(echo.values("x-forwarded-proto") == ["https"])
            #expect(echo.values("host") == ["\(name):\(port)"])
        }
    }

    @Test func oldProtocolsAndWeakCiphersAreRefused() throws {
        let pki = try TestPKI()
        let ec = try pki.leaf(["api.test"])
        let rsa = try pki.leaf(["rsa.test"], keyType: .rsa)
        let upstream = try EchoUpstream()
        let strictPort = Loopback.freePort()
        let listen = Self.tlsListener([ec, rsa]) + "\n  - {address: \"127.0.0.1:\(strictPort)\", tls: {certificates: [{certificate: \"\(ec.certificate)\", private_key: \"\(ec.key)\"}], min_version: \"1.3\"}}"
        let gateway = try GatewayProcess(Self.upstreamConfig(upstream), listen: listen)
        let port = gateway.port
        // The client is allowed everything (SECLEVEL=0), so only the server can refuse.
        for version in ["-tls1", "-tls1_1"] {
            let out = Self.sClient(port, [version, "-cipher", "DEFAULT@SECLEVEL=0", "-servername", "api.test"])
            #expect(!out.contains("Cipher is ECDHE") && !out.contains("Cipher is AES"), "\(version) accepted: \(out.suffix(400))")
        }
        for weak in ["AES128-SHA256", "AES256-GCM-SHA384", "ECDHE-ECDSA-AES128-SHA", "ECDHE-RSA-AES256-SHA384", "DHE-RSA-AES128-GCM-SHA256"] {
            let out = Self.sClient(port, ["-tls1_2", "-cipher", "\(weak)@SECLEVEL=0", "-servername", "rsa.test"])
            #expect(!out.contains("Cipher is \(weak)"), "\(weak) accepted")
        }
        for strong in [("ECDHE-ECDSA-AES128-GCM-SHA256", "api.test"), ("ECDHE-RSA-CHACHA20-POLY1305", "rsa.test")] {
            let out = Self.sClient(port, ["-tls1_2", "-cipher", strong.0, "-servername", strong.1])
            #expect(out.contains("Cipher is \(strong.0)"), "\(strong.0) refused: \(out.suffix(400))")
        }
        #expect(Self.sClient(port, ["-tls1_3", "-servername", "api.test"]).contains("TLSv1.3"))
        // min_version "1.3" refuses 1.2.
        #expect(!Self.sClient(strictPort, ["-tls1_2", "-servername", "api.test"]).contains("Cipher is ECDHE"))
        #expect(Self.sClient(strictPort, ["-tls1_3", "-servername", "api.test"]).contains("New, TLSv1.3"))
    }

    @Test func ticketsResumeSessionsInTLS12AndTLS13() throws {
        let pki = try TestPKI()
        let api = try pki.leaf(["api.test"])
        let upstream = try EchoUpstream()
        let gateway = try GatewayProcess(Self.upstreamConfig(upstream), listen: Self.tlsListener([api]))
        for version in ["-tls1_2", "-tls1_3"] {
            let session = pki.directory + "/session\(version).pem"
            let first = Self.sClient(gateway.port, [version, "-servername", "api.test", "-sess_out", session], linger: 0.5)
            #expect(first.contains("New, TLSv1."), "\(version): \(first.suffix(300))")
            let second = Self.sClient(gateway.port, [version, "-servername", "api.test", "-sess_in", session], linger: 0.3)
            #expect(second.contains("Reused, TLSv1."), "\(version) did not resume: \(second.suffix(500))")
        }
    }

    /// A connection the gateway closes (after a `Connection: close` response) ends with
    /// `close_notify`: OpenSSL 3 clients then keep the session and resume with it (without
    /// the alert they reported "unexpected eof while reading" and dropped it).
    @Test func aConnectionTheGatewayClosesEndsWithCloseNotifyAndResumes() throws {
        let pki = try TestPKI()
        let api = try pki.leaf(["api.test"])
        let upstream = try EchoUpstream()
        let gateway = try GatewayProcess(Self.upstreamConfig(upstream), listen: Self.tlsListener([api]))
        let request = "GET /x HTTP/1.1\r\nHost: api.test\r\nConnection: close\r\n\r\n"
        for version in ["-tls1_3", "-tls1_2"] {
            let session = pki.directory + "/closed\(version).pem"
            let first = Self.sClient(gateway.port, [version, "-servername", "api.test", "-ign_eof", "-sess_out", session],
                                     input: request, linger: 1.0)
            #expect(first.contains("HTTP/1.1 200"), "\(version): \(first.suffix(400))")
            #expect(!first.contains("unexpected eof"), "\(version): \(first.suffix(400))")
            let second = Self.sClient(gateway.port, [version, "-servername", "api.test", "-ign_eof", "-sess_in", session],
                                      input: request, linger: 1.0)
            #expect(second.contains("Reused, TLSv1."), "\(version) did not resume: \(second.suffix(500))")
        }
    }

    @Test func withRedisATicketFromOneInstanceResumesOnAnother() throws {
        let pki = try TestPKI()
        let api = try pki.leaf(["api.test"])
        let redis = try RedisProcess()
        let upstream = try EchoUpstream()
        let config = Self.upstreamConfig(upstream) + "\nstore: {redis: \"redis://127.0.0.1:\(redis.port)/0\"}"
        let a = try GatewayProcess(config, listen: Self.tlsListener([api]))
        let b = try GatewayProcess(config, listen: Self.tlsListener([api]))
        for version in ["-tls1_2", "-tls1_3"] {
            let session = pki.directory + "/shared\(version).pem"
            let first = Self.sClient(a.port, [version, "-servername", "api.test", "-sess_out", session], linger: 0.5)
            #expect(first.contains("New, TLSv1."), "\(version): \(first.suffix(300))")
            let second = Self.sClient(b.port, [version, "-servername", "api.test", "-sess_in", session])
            #expect(second.contains("Reused, TLSv1."), "\(version): a ticket from instance A did not resume on B: \(second.suffix(400))")
        }
        #expect(redis.cli(["--scan", "--pattern", "portcullis:tls:ticket-key:*"]).split(separator: "\n").count >= 1)
    }

    @Test func aStalledHandshakeIsCutOffWhileOthersAreServed() throws {
        let pki = try TestPKI()
        let api = try pki.leaf(["api.test"])
        let upstream = try EchoUpstream()
        let gateway = try GatewayProcess(Self.upstreamConfig(upstream),
                                         listen: Self.tlsListener([api], extra: ", handshake_timeout: 1s"))
        // 64 clients that open TCP and stall: half send nothing, half a partial ClientHello.
        var stalled: [RawConnection] = []
        for i in 0..<64 {
            let connection = try RawConnection(port: gateway.port, timeout: 6)
            if i % 2 == 1 { connection.send("\u{16}\u{03}\u{01}\u{02}") }
            stalled.append(connection)
        }
        // Connected clients are served meanwhile.
        for _ in 0..<5 {
            let (status, _) = E2E.curl(["--http1.1", "--cacert", pki.caCertificate, "--resolve", "api.test:\(gateway.port):127.0.0.1",
                                        "https://api.test:\(gateway.port)/ok"])
            #expect(status == 200)
        }
        let start = Date()
        for connection in stalled { #expect(connection.peerClosed(), "a stalled handshake was not cut off") }
        #expect(Date().timeIntervalSince(start) < 5)
    }

    @Test func sighupSwapsTheCertificateForNewHandshakesWhileKeepAliveConnectionsContinue() throws {
        let pki = try TestPKI()
        let first = try pki.leaf(["api.test"])
        let second = try pki.leaf(["api.test"], keyType: .rsa)
        // The gateway reads these two paths; the test replaces their contents.
        let live = TestPKI.Leaf(certificate: pki.directory + "/live.pem", key: pki.directory + "/live.key", serial: first.serial)
        try FileManager.default.copyItem(atPath: first.certificate, toPath: live.certificate)
        try FileManager.default.copyItem(atPath: first.key, toPath: live.key)
        let upstream = try EchoUpstream()
        let gateway = try GatewayProcess(Self.upstreamConfig(upstream), listen: Self.tlsListener([live]))
        #expect(Self.servedSerial(gateway.port, serverName: "api.test") == first.serial)

        let go = pki.directory + "/go"
        let out = pki.directory + "/client.out"
        let client = try RedisProcess.spawn(["/usr/bin/python3", Self.echoScript, "\(gateway.port)", "api.test", pki.caCertificate, go],
                                            stdout: out)
        defer { kill(client, SIGKILL); var s: Int32 = 0; waitpid(client, &s, 0) }
        #expect(waitUntil(10) { ((try? String(contentsOfFile: out, encoding: .utf8)) ?? "").contains("first 200") })

        for (from, to) in [(second.certificate, live.certificate), (second.key, live.key)] {
            try FileManager.default.removeItem(atPath: to)
            try FileManager.default.copyItem(atPath: from, toPath: to)
        }
        gateway.send(SIGHUP)
        #expect(gateway.waitForLog("configuration reloaded"))
        #expect(Self.servedSerial(gateway.port, serverName: "api.test") == second.serial, "a new handshake gets the new certificate")

        FileManager.default.createFile(atPath: go, contents: nil)
        var status: Int32 = 0
        _ = waitUntil(10) { waitpid(client, &status, WNOHANG) == client }
        let lines = ((try? String(contentsOfFile: out, encoding: .utf8)) ?? "").split(separator: "\n").map { $0.split(separator: " ") }
        #expect(lines.count == 2, "\(lines)")
        if lines.count == 2 {
            #expect(lines[1][1] == "200", "the keep-alive connection from before the reload still works")
            #expect(lines[0][2] == lines[1][2], "and still runs on the certificate it started with")
        }
    }

    @Test func aBrokenCertificateOnSighupIsRefusedAndTheOldOneKeepsServing() throws {
        let pki = try TestPKI()
        let good = try pki.leaf(["api.test"])
        let live = TestPKI.Leaf(certificate: pki.directory + "/live.pem", key: pki.directory + "/live.key", serial: good.serial)
        try FileManager.default.copyItem(atPath: good.certificate, toPath: live.certificate)
        try FileManager.default.copyItem(atPath: good.key, toPath: live.key)
        let upstream = try EchoUpstream()
        let gateway = try GatewayProcess(Self.upstreamConfig(upstream), listen: Self.tlsListener([live]))

        let other = try pki.leaf(["api.test"])
        let cases: [(String, () throws -> Void)] = [
            ("garbage certificate", { try "-----BEGIN CERTIFICATE-----\nnot base64\n".write(toFile: live.certificate, atomically: true, encoding: .utf8) }),
            ("key of another certificate", {
                try FileManager.default.removeItem(atPath: live.certificate)
                try FileManager.default.copyItem(atPath: good.certificate, toPath: live.certificate)
                try FileManager.default.removeItem(atPath: live.key)
                try FileManager.default.copyItem(atPath: other.key, toPath: live.key)
            }),
        ]
        var refusals = 0
        for (what, breakFiles) in cases {
            try breakFiles()
            gateway.send(SIGHUP)
            refusals += 1
            #expect(waitUntil(10) { gateway.log.components(separatedBy: "configuration reload refused").count > refusals }, "\(what)")
            #expect(Self.servedSerial(gateway.port, serverName: "api.test") == good.serial, "\(what): the old certificate serves")
            let (status, _) = E2E.curl(["--http1.1", "--cacert", pki.caCertificate, "--resolve", "api.test:\(gateway.port):127.0.0.1",
                                        "https://api.test:\(gateway.port)/still"])
            #expect(status == 200, "\(what)")
        }
        #expect(gateway.log.contains(live.certificate) && gateway.log.contains(live.key), "the log names the file")
    }

    @Test func bodiesLargerThanTLSRecordsCrossBothWaysOnOneConnection() throws {
        let pki = try TestPKI()
        let api = try pki.leaf(["api.test"])
        let upstream = try EchoUpstream()
        let gateway = try GatewayProcess(Self.upstreamConfig(upstream), listen: Self.tlsListener([api]))
        let upload = pki.directory + "/upload.bin"
        try String(repeating: "0123456789abcdef", count: 40_000).write(toFile: upload, atomically: true, encoding: .utf8)  // 640 KB
        let base = "https://api.test:\(gateway.port)"
        let (_, out, _) = E2E.run("/usr/bin/curl", ["-s", "--http1.1", "--cacert", pki.caCertificate,
                                                    "--resolve", "api.test:\(gateway.port):127.0.0.1",
                                                    "-o", "/dev/null", "-o", "/dev/null", "-o", "/dev/null",
                                                    "-w", "%{http_code} %{size_download} %{num_connects}\n",
                                                    "\(base)/big/3000000", "\(base)/big/70000", "\(base)/big/17"])
        #expect(out.split(separator: "\n") == ["200 3000000 1", "200 70000 0", "200 17 0"], "one connection, three responses: \(out.prefix(300))")
        let (status, body) = E2E.curl(["--http1.1", "--cacert", pki.caCertificate, "--resolve", "api.test:\(gateway.port):127.0.0.1",
                                       "--data-binary", "@\(upload)", "\(base)/upload"])
        #expect(status == 200)
        #expect(try Echo(body).body.count == 640_000)
    }

    @Test func pipelinedRequestsInSeparateRecordsAreAllAnsweredInOrder() throws {
        let pki = try TestPKI()
        let api = try pki.leaf(["api.test"])
        let upstream = try EchoUpstream()
        let gateway = try GatewayProcess(Self.upstreamConfig(upstream), listen: Self.tlsListener([api]))
        let script = E2E.packageRoot.appendingPathComponent("Tests/PortcullisEndToEndTests/Fixtures/tls_pipeline_client.py").path
        let (status, out, err) = E2E.run("/usr/bin/python3", [script, "\(gateway.port)", "api.test", pki.caCertificate, "20"], timeout: 20)
        #expect(status == 0, "\(err)")
        #expect(out.split(separator: "\n").map(String.init) == (0..<20).map { "/pipelined/\($0)" })
    }

    @Test func plainHTTPOnTheTLSPortGetsA400WithAReasonAndAnAbsoluteNameItsCertificate() throws {
        let pki = try TestPKI()
        let api = try pki.leaf(["api.test"])
        let web = try pki.leaf(["web.test"])
        let upstream = try EchoUpstream()
        let gateway = try GatewayProcess(Self.upstreamConfig(upstream), listen: Self.tlsListener([api, web]))
        let raw = try RawConnection(port: gateway.port)
        raw.send("GET /secret HTTP/1.1\r\nHost: api.test\r\n\r\n")
        let text = raw.readAll()
        #expect(text.hasPrefix("HTTP/1.1 400"), "\(text)")
        #expect(text.contains("HTTPS port"))
        #expect(try upstream.seen().isEmpty)
        #expect(Self.servedSerial(gateway.port, serverName: "web.test.") == web.serial, "a trailing dot names the same host")
    }

    @Test func aRedirectListenerSendsPlainHTTPToHTTPS() throws {
        let pki = try TestPKI()
        let api = try pki.leaf(["api.test"])
        let upstream = try EchoUpstream()
        let plainPort = Loopback.freePort()
        let gateway = try GatewayProcess(Self.upstreamConfig(upstream),
                                         listen: Self.tlsListener([api]) + "\n  - {address: \"127.0.0.1:\(plainPort)\", redirect_https: true}")
        let raw = try RawConnection(port: plainPort)
        raw.send("POST /api/visits/7?x=1&y=%2F HTTP/1.1\r\nHost: api.test:\(plainPort)\r\nContent-Length: 2\r\n\r\nhi")
        let response = raw.readResponses(1)
        #expect(response.first?.status == 308)
        #expect(response.first?.header("location") == "https://api.test/api/visits/7?x=1&y=%2F")
        let noHost = try RawConnection(port: plainPort)
        noHost.send("GET / HTTP/1.0\r\n\r\n")
        #expect(noHost.readResponses(1).first?.status == 400)
        #expect(try upstream.seen().isEmpty, "nothing reached the upstream")
        _ = gateway
    }

    @Test func checkConfigNamesTheCertificateFileAndReason() throws {
        let pki = try TestPKI()
        let good = try pki.leaf(["api.test"])
        let other = try pki.leaf(["web.test"])
        let expired = try pki.leaf(["old.test"], startDays: -5, endDays: -1)
        let intermediate = try pki.leaf(["Test Intermediate"], isCA: true)
        let underIntermediate = try pki.leaf(["chain.test"], issuer: intermediate)
        let inOrder = try pki.concatenate([underIntermediate.certificate, intermediate.certificate])
        let outOfOrder = try pki.concatenate([intermediate.certificate, underIntermediate.certificate])
        let noSAN = try pki.leaf([])

        func check(_ certificate: String, _ key: String) -> (Int32, String) {
            let path = pki.directory + "/check-\(UUID().uuidString).yaml"
            try? """
            listen:
              - address: "127.0.0.1:8443"
                tls:
                  certificates:
                    - {certificate: "\(certificate)", private_key: "\(key)"}
            upstreams: {app: {url: "http://127.0.0.1:9"}}
            routes: [{path: /, upstream: app, auth: none}]
            """.write(toFile: path, atomically: true, encoding: .utf8)
            let (status, out, err) = E2E.run(E2E.binary, ["check-config", path])
            return (status, out + err)
        }
        let ok = check(good.certificate, good.key)
        #expect(ok.0 == 0 && ok.1.contains("api.test") && ok.1.contains("EC-256"), "\(ok.1)")
        #expect(check(inOrder, underIntermediate.key).0 == 0)

        let failures: [(String, String, String, String)] = [
            (good.certificate, other.key, other.key, "does not match"),
            (expired.certificate, expired.key, expired.certificate, "expired"),
            (outOfOrder, underIntermediate.key, outOfOrder, "chain out of order"),
            (noSAN.certificate, noSAN.key, noSAN.certificate, "subjectAltName"),
            (pki.directory + "/missing.pem", good.key, pki.directory + "/missing.pem", "cannot read"),
            (good.key, good.key, good.key, "certificate"),
        ]
        for (certificate, key, file, reason) in failures {
            let (status, text) = check(certificate, key)
            #expect(status == 2, "\(reason): \(text)")
            #expect(text.contains(file) && text.contains(reason) && text.contains("listen[0].tls.certificates[0]"), "\(reason): \(text)")
        }
    }
}
