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
        version: BuildInfo.text,
        subcommands: [Run.self, CheckConfig.self, Demo.self, Mint.self, Verify.self, Revoke.self, Reload.self, Health.self, Keys.self, DemoApps.self],
        defaultSubcommand: nil)
}

/// Loads a configuration or exits 2 with `FILE:LINE: KEY: REASON` on standard error.
func loadOrExit(_ file: String) -> GatewayConfiguration {
    do {
        return try ConfigurationLoader.load(file: file)
    } catch {
        // Every error found, one line each (`FILE:LINE: KEY: REASON`), in the file's order, as
        // `haproxy -c` lists them (an error without a line last, in the order found).
        let all = error.all.enumerated().sorted { a, b in
            (a.element.line ?? Int.max, a.offset) < (b.element.line ?? Int.max, b.offset)
        }.map(\.element)
        for one in all { Console.error("portcullis: invalid configuration: \(one)\n") }
        if all.count > 1 { Console.error("portcullis: \(all.count) errors in \(file)\n") }
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
    var file: String?
    /// `check-config --config FILE` works too, the form `run` takes.
    @Option(name: .long, help: "Path to the YAML configuration (the same as FILE).")
    var config: String?
    /// `--probe`: also try what the gateway will call (the session lookup hook); off by
    /// default, so checking a file never sends traffic anywhere.
    @Flag(name: .long, help: "Also try to reach the session lookup hook (TCP, TLS with the upstream's client certificate, an HTTP answer to a GET); exit 1 when it cannot be reached.")
    var probe = false

    func validate() throws {
        switch (file, config) {
        case (nil, nil): throw ValidationError("Missing the configuration file: portcullis check-config FILE")
        case (.some, .some): throw ValidationError("Give the configuration file once: FILE or --config FILE")
        default: break
        }
    }

    func run() throws {
        let file = self.file ?? config ?? ""
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
        if let warning = configuration.sessionsWarning { print("warning: \(warning)") }
        if configuration.demo {
            print("warning: demo: true: placeholder secrets (change-me, replace-me) are accepted; never serve real users with this file")
        }
        if probe, let failure = HookProbe.run(configuration) {
            Console.error("error: \(failure)\n")
            throw ExitCode(1)
        }
    }
}

struct Demo: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Run the gateway in front of three demo apps (visits, notes, books) and a local key host, and walk through what it does.",
        discussion: "Without --config it runs the embedded demo configuration (the text of Config/demo.yaml). The walkthrough goes to standard output; the gateway's own log to standard error (deploy/demo.sh keeps it in a file).")

    @Option(name: .long, help: "The demo configuration file (default: the embedded copy of Config/demo.yaml).")
    var config: String?

    func run() throws {
        let configuration: GatewayConfiguration
        // A reload (SIGHUP, POST /reload) reads the embedded text again when no file was given.
        var source: (@Sendable () throws -> GatewayConfiguration)?
        if let config {
            configuration = loadOrExit(config)
        } else {
            let embedded: @Sendable () throws -> GatewayConfiguration = {
                try ConfigurationLoader.parse(DemoConfiguration.yaml, file: "<embedded Config/demo.yaml>",
                                              environment: ProcessInfo.processInfo.environment)
            }
            source = embedded
            do {
                configuration = try embedded()
            } catch {
                Console.error("portcullis: \(error)\n")
                throw ExitCode(2)
            }
        }
        let logger = bootstrapLogging(configuration.logLevel)
        let story: DemoWalkthrough.Story
        do { story = try DemoWalkthrough.Story(configuration) } catch {
            Console.error("portcullis: demo credentials: \(error)\n")
            throw ExitCode(1)
        }
        var apps = DemoConfiguration.appPorts.map { app in
            Gateway.LocalApp(address: try! SocketAddress(parsing: "127.0.0.1:\(app.port)"), handler: EchoApp(name: app.name))
        }
        apps.append(Gateway.LocalApp(address: try! SocketAddress(parsing: "127.0.0.1:\(DemoConfiguration.keyHostPort)"),
                                     handler: DemoKeyHost(jwks: story.googleJWKS)))
        let file = config ?? "Config/demo.yaml (its embedded copy)"
        print("""
        Portcullis demo: gateway on http://127.0.0.1:\(story.port), admin on http://127.0.0.1:\(story.adminPort)
        configuration: \(file)
        demo apps (echo what they receive): visits :3001, notes :3002, books :3003; key host :\(DemoConfiguration.keyHostPort)
        providers: app (HS256 Bearer tokens, as the iOS app sends), web (NextAuth session cookie, as the browser sends),
                   google (Google ID tokens, keys from the local key host as from Google's certs URL)

        """)
        fflush(nil)  // the story is read as it happens, also through a pipe or a file
        // Walk through the story once the listeners are up, then keep serving.
        Thread.detachNewThread {
            usleep(300_000)
            story.tell(configurationFile: file)
        }
        do {
            try Gateway.runForever(configuration, localApps: apps, logger: logger, source: source)
        } catch {
            logger.critical("startup failed", metadata: ["error": "\(error)"])
            throw ExitCode(1)
        }
    }
}
