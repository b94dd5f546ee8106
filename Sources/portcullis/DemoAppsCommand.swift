import ArgumentParser
import Foundation
import Portcullis
import PortcullisAuth
import PortcullisIO

/// `portcullis demo-apps`: the demo's three echo apps (visits :3001, notes :3002, books
/// :3003) and its key host (:3004, a Google-shaped JWKS of a key made at start) without a
/// gateway, so the gateway can run elsewhere: `deploy/compose.yaml` runs them in their own
/// container in front of two gateway instances.
struct DemoApps: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "demo-apps",
        abstract: "Serve the demo apps (visits :3001, notes :3002, books :3003) and the demo key host (:3004) alone.")

    @Option(name: .long, help: "The address to listen on (0.0.0.0 in a container).")
    var host = "127.0.0.1"

    func run() throws {
        // Before any thread exists: SIGTERM/SIGINT wait for `serveLocalApps`' sigwait on every thread.
        Gateway.blockStopSignals()
        let logger = bootstrapLogging(.info)
        let key = try SigningKey.generate(.rs256)
        let jwks = "{\"keys\":[\(key.publicJWK(keyID: "demo-g1")?.serialized ?? "")]}"
        var apps: [Gateway.LocalApp] = []
        do {
            for app in DemoConfiguration.appPorts {
                apps.append(Gateway.LocalApp(address: try SocketAddress(parsing: "\(host):\(app.port)"), handler: EchoApp(name: app.name)))
            }
            apps.append(Gateway.LocalApp(address: try SocketAddress(parsing: "\(host):\(DemoConfiguration.keyHostPort)"),
                                         handler: DemoKeyHost(jwks: jwks)))
        } catch {
            throw ValidationError("--host \(host): \(error)")
        }
        do {
            try Gateway.serveLocalApps(apps, logger: logger)
        } catch {
            logger.critical("startup failed", metadata: ["error": "\(error)"])
            throw ExitCode(1)
        }
    }
}
