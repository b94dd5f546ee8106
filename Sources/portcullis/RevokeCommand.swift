import ArgumentParser
import Foundation
import Portcullis

/// `portcullis revoke`: the admin API's `POST /revocations` (with `--undo`, its
/// `DELETE /revocations`) from the command line, sent to the running gateway named by the
/// configuration (its admin listener and token), so embedded and Redis stores behave the same.
struct Revoke: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Revoke a token (jti), a session, or every credential of a subject, on the running gateway (--undo: lift it).")

    @Option(name: .long, help: "Path to the YAML configuration of the running gateway.")
    var config: String
    @Option(name: .long, help: "A token's jti (or, for tokens without one, the credential hash).")
    var jti: String?
    @Option(name: .long, help: "A session / device id (sid).")
    var session: String?
    @Option(name: .long, help: "A subject: the user id the gateway injects. Revokes credentials issued before --before.")
    var subject: String?
    @Option(name: .long, help: "With --subject: seconds since the epoch (default: now, the current second included).")
    var before: Int64?
    @Option(name: .long, help: "With --jti/--session: keep the revocation until (seconds since the epoch; default: 30 days).")
    var until: Int64?
    @Flag(name: .long, help: "Undo the revocation of --jti, --session or --subject instead, on every instance.")
    var undo = false

    func run() throws {
        let configuration = loadOrExit(config)
        guard let admin = configuration.admin else { throw ValidationError("\(config): admin is off; revocation needs the admin listener") }
        guard let token = admin.token else { throw ValidationError("\(config): admin.token is not set") }
        let given = [jti, session, subject].compactMap { $0 }
        guard given.count == 1 else { throw ValidationError("give exactly one of --jti, --session, --subject") }
        var object: [String: Any] = [:]
        if let jti { object["jti"] = jti }
        if let session { object["session"] = session }
        if let subject { object["subject"] = subject; if let before, !undo { object["before"] = before } }
        if let until, subject == nil, !undo { object["exp"] = until }
        let body = String(decoding: try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]), as: UTF8.self)
        guard let (status, _, text) = DemoWalkthrough.fetch(host: admin.address.host, port: admin.address.port, method: undo ? "DELETE" : "POST",
                                                            path: "/revocations", header: "Authorization: Bearer \(token)", body: body) else {
            Console.error("portcullis: cannot reach the admin listener at \(admin.address)\n")
            throw ExitCode(1)
        }
        print("\(status) \(text.trimmingCharacters(in: .whitespacesAndNewlines))")
        if status != (undo ? 200 : 201) { throw ExitCode(1) }
    }
}
