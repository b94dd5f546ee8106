import ArgumentParser
import Foundation
import Glibc
import PortcullisAuth
import PortcullisEdgeAuth

/// `portcullis keys`: signing keys the gateway uses (`sessions.access_token.signing_keys`,
/// `identity.assertion.signing_keys`).
struct Keys: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Signing keys for session access tokens and identity assertions.",
        subcommands: [Generate.self])

    /// `portcullis keys generate FILE`: a new ES256 (P-256) private key as PEM, created with
    /// mode 0600 (never over an existing file), as `openssl genpkey -algorithm EC -pkeyopt
    /// ec_paramgen_curve:P-256` would write it. Prints the key's thumbprint (its `kid`).
    struct Generate: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Write a new ES256 (P-256) private key, PEM, mode 0600; an existing file is never replaced.")

        @Argument(help: "Where to write the key (must not exist).")
        var file: String
        @Option(name: .long, help: "ES256 (the only algorithm session access tokens use; also EdDSA or RS256 for assertions).")
        var algorithm: String = "ES256"

        func run() throws {
            guard let algorithm = JWSAlgorithm(rawValue: algorithm), [.es256, .edDSA, .rs256].contains(algorithm) else {
                throw ValidationError("--algorithm: expected ES256, EdDSA or RS256, got '\(self.algorithm)'")
            }
            let key = try SigningKey.generate(algorithm)
            guard let pem = key.privateKeyPEM else { throw ValidationError("cannot export the generated key") }
            // O_EXCL: an existing key (perhaps the one signing today) is never overwritten.
            let fd = open(file, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
            guard fd >= 0 else {
                let reason = errno == EEXIST ? "the file exists (remove it first to replace the key)" : String(cString: strerror(errno))
                FileHandle.standardError.write(Data("portcullis keys generate: \(file): \(reason)\n".utf8))
                throw ExitCode(1)
            }
            defer { close(fd) }
            let bytes = Array(pem.utf8)
            let written = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
            guard written == bytes.count, fsync(fd) == 0 else {
                unlink(file)
                FileHandle.standardError.write(Data("portcullis keys generate: \(file): \(String(cString: strerror(errno)))\n".utf8))
                throw ExitCode(1)
            }
            print("\(file): \(algorithm.rawValue) private key, mode 0600, kid \(key.thumbprint)")
        }
    }
}
