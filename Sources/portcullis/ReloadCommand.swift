import ArgumentParser
import Foundation
import Portcullis
import PortcullisIO

/// `portcullis reload`: asks the running gateway to reload its configuration file
/// (`POST /reload` on the admin listener, the same as SIGHUP) and prints its verdict:
/// exit 0 when applied, 1 when refused (the reason names `FILE:LINE: KEY: REASON`; the old
/// configuration serves on), 2 when the file is invalid here already (the gateway is not
/// asked) or the gateway cannot be reached.
struct Reload: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Reload the running gateway's configuration (as SIGHUP) and print the verdict. Exit 0 when applied, 1 when refused.")

    @Option(name: .long, help: "Path to the YAML configuration of the running gateway (its admin address and token).")
    var config: String?
    @Option(name: .long, help: "The admin listener as HOST:PORT (instead of the file's; with --token, the file is not read).")
    var address: String?
    @Option(name: .long, help: "The admin token (default: the file's admin.token, or $PORTCULLIS_ADMIN_TOKEN).")
    var token: String?

    func run() throws {
        var target: SocketAddress?
        var bearer = token ?? ProcessInfo.processInfo.environment["PORTCULLIS_ADMIN_TOKEN"]
        if let address {
            do { target = try SocketAddress(parsing: address) } catch { throw ValidationError("--address \(address): \(error)") }
        }
        if target == nil || bearer == nil {
            guard let config else { throw ValidationError("give --config FILE, or --address HOST:PORT and --token") }
            let configuration: GatewayConfiguration
            do { configuration = try ConfigurationLoader.load(file: config) } catch {
                // The running gateway would refuse it for the same reason: it is not asked.
                Console.error("portcullis: reload refused here, the gateway was not asked: \(error)\n")
                throw ExitCode(2)
            }
            guard let admin = configuration.admin else { throw ValidationError("\(config): admin is off; reload the gateway with SIGHUP") }
            if target == nil { target = admin.address }
            if bearer == nil { bearer = admin.token }
        }
        guard let target, let bearer else { throw ValidationError("admin.token is not set; reload the gateway with SIGHUP") }
        let host = target.host == "0.0.0.0" || target.host == "::" ? "127.0.0.1" : target.host
        guard let (status, _, text) = DemoWalkthrough.fetch(host: host, port: target.port, method: "POST", path: "/reload",
                                                            header: "Authorization: Bearer \(bearer)", body: "",
                                                            timeoutSeconds: 60) else {
            Console.error("portcullis: cannot reach the admin listener at \(host):\(target.port)\n")
            throw ExitCode(2)
        }
        let body = text.trimmingCharacters(in: .whitespacesAndNewlines)
        let verdict = (try? JSONSerialization.jsonObject(with: Data(body.utf8))) as? [String: Any]
        switch status {
        case 200:
            let changes = (verdict?["changes"] as? [String]) ?? []
            Console.out("reload applied: generation \(verdict?["generation"] ?? "?"), config_sha256 \(verdict?["config_sha256"] ?? "?")"
                        + (changes.isEmpty ? "\n" : "\n" + changes.map { "  \($0)\n" }.joined()))
        case 422:
            Console.out("reload refused: \(verdict?["reason"] ?? body)\n  generation \(verdict?["generation"] ?? "?") keeps serving\n")
            throw ExitCode(1)
        default:
            Console.error("portcullis: POST /reload answered \(status): \(body)\n")
            throw ExitCode(2)
        }
    }
}
