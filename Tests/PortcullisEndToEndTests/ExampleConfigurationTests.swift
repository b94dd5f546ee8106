import Foundation
import PortcullisTestSupport
import Testing

/// The configurations we ship stay valid as the loader changes: `Config/portcullis.yaml`,
/// `Config/demo.yaml` and every file in `Config/examples/` pass `portcullis check-config`
/// (both spellings of its argument) once the files and environment variables they name
/// exist. They are made here: the `/etc/portcullis`, `/run/secrets` and `/var/lib/portcullis`
/// paths are moved into a temporary folder, where each `X.pem` with an `X.key` beside it
/// becomes a certificate and key from a test CA (a client certificate when the name says
/// "client"), `*-ca.pem` the CA's certificate, `assertion-*.pem` an EC private key, and any
/// other file a secret; each `${NAME}` without a default is set to a random 48-character value.
@Suite(.serialized) struct ExampleConfigurationTests {
    static let root = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    static let files: [String] = {
        let examples = (try? FileManager.default.contentsOfDirectory(atPath: root.appendingPathComponent("Config/examples").path)) ?? []
        return ["Config/portcullis.yaml", "Config/demo.yaml"]
            + examples.filter { $0.hasSuffix(".yaml") }.sorted().map { "Config/examples/\($0)" }
    }()

    @Test func theExamplesAreAllThere() {
        // The five teams' configurations: a missing file would silently shrink the test below.
        #expect(Self.files.count >= 7, "\(Self.files)")
    }

    @Test(arguments: files)
    func passesCheckConfig(_ relative: String) throws {
        let original = try String(contentsOf: Self.root.appendingPathComponent(relative), encoding: .utf8)
        let pki = try TestPKI()
        let dir = pki.directory + "/config"
        var text = original
        for (from, to) in [("/etc/portcullis/", "\(dir)/etc/"), ("/run/secrets/", "\(dir)/secrets/"),
                           ("/var/lib/portcullis", "\(dir)/var")] {
            text = text.replacingOccurrences(of: from, with: to)
        }
        for sub in ["etc", "secrets", "var"] {
            try FileManager.default.createDirectory(atPath: "\(dir)/\(sub)", withIntermediateDirectories: true)
        }
        let escaped = NSRegularExpression.escapedPattern(for: dir)
        let paths = Set(Self.matches(of: "\(escaped)/(etc|secrets)/[A-Za-z0-9._-]+", in: text))
        for path in paths.sorted() where !path.hasSuffix(".key") {
            let name = (path as NSString).lastPathComponent
            let stem = String(path.dropLast(4))
            if name.hasSuffix(".pem") && name.hasPrefix("assertion") {
                _ = try pki.run(["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", path])
            } else if name.hasSuffix("-ca.pem") {
                try FileManager.default.copyItem(atPath: pki.caCertificate, toPath: path)
            } else if name.hasSuffix(".pem") {
                let leaf = try pki.leaf(["example.test"], clientAuth: name.contains("client"))
                try FileManager.default.copyItem(atPath: leaf.certificate, toPath: path)
                if paths.contains(stem + ".key") { try FileManager.default.copyItem(atPath: leaf.key, toPath: stem + ".key") }
            } else {
                try (Self.randomValue() + "\n").write(toFile: path, atomically: true, encoding: .utf8)
            }
        }
        var environment: [String: String] = [:]
        for name in Self.matches(of: #"\$\{([A-Z][A-Z0-9_]*)\}"#, in: text, group: 1)
            + Self.matches(of: #"\benv: *([A-Z][A-Z0-9_]*)"#, in: text, group: 1) {
            environment[name] = Self.randomValue()
        }
        let file = "\(dir)/\((relative as NSString).lastPathComponent)"
        try text.write(toFile: file, atomically: true, encoding: .utf8)
        for arguments in [["check-config", file], ["check-config", "--config", file]] {
            let (status, out, err) = E2E.run(E2E.binary, arguments, environment: environment)
            #expect(status == 0, "\(relative): \(arguments[1]): \(err)")
            #expect(out.contains(": ok ("), "\(relative): \(out)")
        }
    }

    /// docs/fitting-the-five-apps.md's commands are one script in the repository: it runs
    /// each app's shipped file through this binary against local stand-ins (key hosts, the
    /// app, a TLS app behind client certificates) and checks every request the document
    /// lists. From a fresh clone, nothing outside the repository.
    @Test func theFiveAppsWalkthroughRunsFromTheRepository() {
        let (status, out, err) = E2E.run("/bin/bash", [Self.root.appendingPathComponent("docs/five-apps/try.sh").path],
                                         timeout: 240, environment: ["PORTCULLIS": E2E.binary])
        #expect(status == 0, "\(out.suffix(3000))\(err.suffix(1000))")
        #expect(out.contains("== 9 app(s), ") && out.contains(" checks, 0 failed"), "\(out.suffix(3000))")
        // The move to `sessions:` of every app that wrote its sign-in by hand, from its file.
        for app in ["rvu-tracker", "paperboxd", "golfai", "foliomind"] {
            #expect(out.contains("== \(app)-sessions (Config/examples/\(app).yaml, its sessions block on"))
        }
        for app in ["rvu-tracker", "paperboxd", "golfai", "foliomind", "vcnotebook"] {
            #expect(out.contains("== \(app) (Config/examples/\(app).yaml)"))
        }
        #expect(!out.contains("FAIL"), "\(out.suffix(3000))")
    }

    /// The examples for apps behind a platform's proxy believe that proxy's forwarded headers
    /// (`trusted_proxies`), else the app sees the proxy as the client and `http` (#26.5).
    @Test(arguments: [("Config/examples/foliomind.yaml", "172.16.0.0/12"), ("Config/examples/vcnotebook.yaml", "10.0.0.0/8")])
    func platformExamplesTrustTheirProxy(_ file: String, _ range: String) throws {
        let text = try String(contentsOf: Self.root.appendingPathComponent(file), encoding: .utf8)
        let line = text.split(separator: "\n").first { $0.hasPrefix("trusted_proxies:") }
        #expect(line?.contains("\"\(range)\"") == true, "\(file): \(String(describing: line))")
    }

    @Test func checkConfigWantsExactlyOneFile() {
        let (none, _, noneErr) = E2E.run(E2E.binary, ["check-config"])
        #expect(none != 0 && noneErr.contains("Missing the configuration file"), "\(noneErr)")
        let demo = Self.root.appendingPathComponent("Config/demo.yaml").path
        let (both, _, bothErr) = E2E.run(E2E.binary, ["check-config", demo, "--config", demo])
        #expect(both != 0 && bothErr.contains("once"), "\(bothErr)")
    }

    static func matches(of pattern: String, in text: String, group: Int = 0) -> [String] {
        guard let regex = try? NSRegularExpression(pattern: pattern) else { return [] }
        let range = NSRange(text.startIndex..., in: text)
        return regex.matches(in: text, range: range).compactMap { Range($0.range(at: group), in: text).map { String(text[$0]) } }
    }

    static func randomValue() -> String {
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")
        return String((0..<48).map { _ in alphabet.randomElement()! })
    }
}

/// Every duration in a configuration is bounded when it is read: an absurd one is refused
/// with the file, line, key and reason (one beyond a `UInt64` of nanoseconds killed
/// `check-config` with SIGILL).
@Suite struct ConfigurationBoundsTests {
    @Test(arguments: [
        ("timeouts: {idle: 99999999999999999999999d}", "timeouts.idle"),
        ("timeouts: {header: 1e300s}", "timeouts.header"),
        ("keys: {min_refetch_interval: 36501d}", "keys.min_refetch_interval"),
    ])
    func outOfRangeDurationsAreRefusedWithTheirKey(_ line: String, _ key: String) {
        let errors = E2E.configErrors("""
        upstreams:
          app: {url: "http://127.0.0.1:1", response_timeout: 30s}
        routes:
          - {path: /, upstream: app, auth: none}
        \(line)
        """)
        #expect(errors.contains(key) && errors.contains("at most 100 years"), "\(errors)")
    }

    @Test func outOfRangeDurationsOfProvidersAndUpstreamsToo() {
        let errors = E2E.configErrors("""
        providers:
          - {name: app, type: hs256, secret: "0123456789abcdef0123456789abcdef", leeway: 99999999999999999999999d}
        upstreams:
          app: {url: "http://127.0.0.1:1"}
        routes:
          - {path: /, upstream: app, auth: none}
        """)
        #expect(errors.contains("leeway") && errors.contains("at most 100 years"), "\(errors)")
        let upstream = E2E.configErrors("""
        upstreams:
          app: {url: "http://127.0.0.1:1", response_timeout: 99999999999999999999999d}
        routes:
          - {path: /, upstream: app, auth: none}
        """)
        #expect(upstream.contains("response_timeout") && upstream.contains("at most 100 years"), "\(upstream)")
    }
}
