import ArgumentParser
import Foundation
import Portcullis
import PortcullisIO

/// `portcullis health`: probes the running gateway's admin listener, for images without
/// curl (a container HEALTHCHECK, a Kubernetes exec probe, a systemd watchdog script).
/// Exit 0 when the endpoint answers 200, 1 otherwise; one line says what it answered.
struct Health: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Probe the running gateway's admin listener: /readyz (default) or, with --live, /healthz. Exit 0 on 200.")

    @Option(name: .long, help: "Path to the YAML configuration of the running gateway (its admin address).")
    var config: String?
    @Option(name: .long, help: "The admin listener as HOST:PORT, instead of --config (IPv4).")
    var address: String?
    @Flag(name: .long, help: "Liveness: /healthz (the process serves) instead of readiness (/readyz).")
    var live = false

    func run() throws {
        let target: SocketAddress
        if let address {
            do { target = try SocketAddress(parsing: address) } catch { throw ValidationError("--address \(address): \(error)") }
        } else if let config {
            // Only the admin address is read: the running gateway is what is asked.
            let admin: SocketAddress?
            do { admin = try ConfigurationLoader.adminAddress(file: config) } catch {
                Console.error("portcullis: \(error)\n")
                throw ExitCode(2)
            }
            guard let admin else { throw ValidationError("\(config): admin is off; nothing to probe") }
            target = admin
        } else {
            throw ValidationError("give --config FILE or --address HOST:PORT")
        }
        let port = target.port
        // A wildcard listener is probed on loopback.
        let host = target.host == "0.0.0.0" || target.host == "::" ? "127.0.0.1" : target.host
        let path = live ? "/healthz" : "/readyz"
        guard let (status, _, body) = DemoWalkthrough.fetch(host: host, port: port, method: "GET", path: path, header: nil) else {
            Console.error("portcullis: \(path): no answer from \(host):\(port)\n")
            throw ExitCode(1)
        }
        Console.out("\(path) \(status) \(body.trimmingCharacters(in: .whitespacesAndNewlines))\n")
        if status != 200 { throw ExitCode(1) }
    }
}
