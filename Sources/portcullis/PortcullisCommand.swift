import ArgumentParser
import Foundation
import Logging
import Portcullis
import PortcullisTLS
import PortcullisIO

@main
struct PortcullisCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "portcullis",
        abstract: "An edge gateway that verifies session cookies and Bearer JWTs and forwards identity to unchanged apps.",
        subcommands: [Run.self, CheckConfig.self, Demo.self, Mint.self, Verify.self, Revoke.self],
        defaultSubcommand: nil)
}

/// Loads a configuration or exits 2 with `FILE:LINE: KEY: REASON` on standard error.
func loadOrExit(_ file: String) -> GatewayConfiguration {
    do {
        return try ConfigurationLoader.load(file: file)
    } catch {
        FileHandle.standardError.write(Data("portcullis: invalid configuration: \(error)\n".utf8))
        Foundation.exit(2)
    }
}

func bootstrapLogging(_ level: Logger.Level) -> Logger {
    LoggingSystem.bootstrap { label in JSONLogHandler(label: label, level: level) }
    return Logger(label: "portcullis")
}

struct Run: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Run the gateway with a configuration file.")
    @Option(name: .long, help: "Path to the YAML configuration.")
    var config: String

    func run() throws {
        let configuration = loadOrExit(config)
        let logger = bootstrapLogging(configuration.logLevel)
        do {
            try Gateway.runForever(configuration, logger: logger)
        } catch {
            logger.critical("startup failed", metadata: ["error": "\(error)"])
            throw ExitCode(1)
        }
    }
}

struct CheckConfig: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "check-config",
        abstract: "Validate a configuration file; exits non-zero with file, line, key and reason on error.")
    @Argument(help: "Path to the YAML configuration.")
    var file: String

    func run() throws {
        let configuration = loadOrExit(file)
        print("\(file): ok (\(configuration.listen.count) listener(s), \(configuration.proxy.upstreams.count) upstream(s), \(configuration.proxy.routes.count) route(s))")
        // Every certificate was loaded and checked by the loader; say what each listener serves.
        for (index, listen) in configuration.listen.enumerated() {
            for files in listen.tls?.certificates ?? [] {
                guard let certificate = try? TLSCertificate(certificateFile: files.certificate, keyFile: files.privateKey) else { continue }
                print("listen[\(index)] \(listen.address): \(files.certificate): \(certificate.keyDescription), names \(certificate.names.joined(separator: " ")), expires \(TLSCertificate.format(certificate.notAfter))")
            }
        }
        // Warnings do not change the exit status: the file is valid.
        for upstream in configuration.openUpstreams {
            print("warning: upstreams.\(upstream.name) (\(upstream.url.origin)) is reachable without the gateway: a caller can send it any X-User-Id directly. Lock it with request_headers, client_certificate or identity.assertion; see \(GatewayConfiguration.lockingDoc)")
        }
    }
}

struct Demo: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Run the gateway with embedded defaults in front of three demo apps (visits, notes, books).")

    func run() throws {
        let configuration: GatewayConfiguration
        do {
            configuration = try ConfigurationLoader.parse(DemoConfiguration.yaml, file: "<embedded demo>",
                                                          environment: ProcessInfo.processInfo.environment)
        } catch {
            FileHandle.standardError.write(Data("portcullis: \(error)\n".utf8))
            throw ExitCode(2)
        }
        let logger = bootstrapLogging(configuration.logLevel)
        let apps = DemoConfiguration.appPorts.map { app in
            Gateway.LocalApp(address: try! SocketAddress(parsing: "127.0.0.1:\(app.port)"), handler: EchoApp(name: app.name))
        }
        let credentials: (bearer: CredentialMinter.Credential, cookie: CredentialMinter.Credential,
                          expired: CredentialMinter.Credential, revoked: CredentialMinter.Credential)
        do { credentials = try DemoWalkthrough.credentials(configuration) } catch {
            FileHandle.standardError.write(Data("portcullis: demo credentials: \(error)\n".utf8))
            throw ExitCode(1)
        }
        let port = configuration.listen[0].address.port
        let adminToken = configuration.admin?.token ?? ""
        let adminPort = configuration.admin?.address.port ?? 9901
        print("""
        Portcullis demo: gateway on http://127.0.0.1:\(port), admin on http://127.0.0.1:\(adminPort)
        demo apps (echo what they receive): visits :3001, notes :3002, books :3003
        providers: app (HS256 Bearer tokens, as the iOS app sends) and web (NextAuth session cookie, as the browser sends)

        """)
        // Walk through the story once the listeners are up, then keep serving.
        Thread.detachNewThread {
            usleep(300_000)
            let revoke = "{\"jti\":\"\(credentials.revoked.tokenID)\"}"
            DemoWalkthrough.run([
                .init(title: "No credential on a protected route: 401 with a Bearer challenge", path: "/api/visits"),
                .init(title: "The iOS app's Bearer token: the visits app receives the verified user id",
                      path: "/api/visits/1", header: "Authorization: Bearer \(credentials.bearer.token)"),
                .init(title: "The web app's NextAuth session cookie: same route, same kind of identity",
                      path: "/api/visits", header: "Cookie: \(credentials.cookie.headerValue)"),
                .init(title: "A spoofed X-User-Id never reaches the app (public route)", path: "/api/books", header: "X-User-Id: admin"),
                .init(title: "An expired token: 401 invalid_token", path: "/api/visits", header: "Authorization: Bearer \(credentials.expired.token)"),
                .init(title: "A token that works now ...", path: "/api/notes", header: "Authorization: Bearer \(credentials.revoked.token)"),
            ], port: port)
            print("## ... is revoked through the admin API (or POST /api/v1/auth/logout with it):")
            print("  curl -si -X POST -H 'Authorization: Bearer \(adminToken)' -d '\(revoke)' http://127.0.0.1:\(adminPort)/revocations")
            if let (status, _, body) = DemoWalkthrough.fetchAdmin(port: adminPort, token: adminToken, body: revoke) {
                print("  -> \(status) \(body.trimmingCharacters(in: .whitespacesAndNewlines))\n")
            }
            DemoWalkthrough.run([
                .init(title: "... and is refused on the next request", path: "/api/notes", header: "Authorization: Bearer \(credentials.revoked.token)"),
            ], port: port)
            print("What the gateway counted (Prometheus text):")
            print("  curl -s -H 'Authorization: Bearer \(adminToken)' http://127.0.0.1:\(adminPort)/metrics | grep -E '^portcullis_(requests|auth_decisions)_total'\n")
            print("More: curl -s http://127.0.0.1:\(port)/health ; curl -s http://127.0.0.1:\(adminPort)/readyz ; Ctrl-C stops.\n")
        }
        do {
            try Gateway.runForever(configuration, localApps: apps, logger: logger)
        } catch {
            logger.critical("startup failed", metadata: ["error": "\(error)"])
            throw ExitCode(1)
        }
    }
}
