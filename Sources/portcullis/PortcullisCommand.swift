import ArgumentParser
import Foundation
import Logging
import Portcullis
import PortcullisIO

@main
struct PortcullisCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "portcullis",
        abstract: "An edge gateway that verifies session cookies and Bearer JWTs and forwards identity to unchanged apps.",
        subcommands: [Run.self, CheckConfig.self, Demo.self, Mint.self, Verify.self],
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
        print("""
        Portcullis demo: gateway on http://127.0.0.1:8080, admin on http://127.0.0.1:9901
        demo apps (echo what they receive): visits :3001, notes :3002, books :3003

        Try:
          curl -s http://127.0.0.1:8080/health                               # public route: the app's view of the request
          curl -s -H 'X-User-Id: admin' http://127.0.0.1:8080/api/books      # a spoofed identity header never reaches the app
          curl -si http://127.0.0.1:8080/api/visits                          # protected route without a credential: 401
          curl -si 'http://127.0.0.1:8080/api/books/../visits'               # normalized first: still the protected route
          curl -si http://127.0.0.1:8080/nope                                # no route: 404
          curl -s http://127.0.0.1:9901/readyz                               # admin listener
        Stop with Ctrl-C.

        """)
        do {
            try Gateway.runForever(configuration, localApps: apps, logger: logger)
        } catch {
            logger.critical("startup failed", metadata: ["error": "\(error)"])
            throw ExitCode(1)
        }
    }
}
