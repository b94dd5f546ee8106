import Foundation
import Testing
@testable import PortcullisTLS

/// `CertificateFiles`: what a renewal looks like on disk, as cert-manager (a symlink swapped
/// to a new directory), certbot (a file rewritten) and an operator (a file that appears) do it.
struct CertificateFilesTests {
    @Test func seesARewriteASymlinkSwapAndAFileThatAppears() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("certfiles-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: "\(dir)/v1", withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: "\(dir)/v2", withIntermediateDirectories: true)
        try "one".write(toFile: "\(dir)/v1/tls.crt", atomically: true, encoding: .utf8)
        try "two, longer".write(toFile: "\(dir)/v2/tls.crt", atomically: true, encoding: .utf8)
        try FileManager.default.createSymbolicLink(atPath: "\(dir)/current", withDestinationPath: "\(dir)/v1")
        try "key".write(toFile: "\(dir)/tls.key", atomically: true, encoding: .utf8)
        let paths = ["\(dir)/current/tls.crt", "\(dir)/tls.key", "\(dir)/ca.pem", "\(dir)/tls.key"]
        let before = CertificateFiles(paths)
        #expect(before.signatures.count == 3 && before.signatures["\(dir)/ca.pem"] == "missing")
        #expect(before.changed(in: CertificateFiles(paths)).isEmpty, "nothing changed, nothing reported")

        // cert-manager: the directory symlink now leads to the new version.
        try FileManager.default.removeItem(atPath: "\(dir)/current")
        try FileManager.default.createSymbolicLink(atPath: "\(dir)/current", withDestinationPath: "\(dir)/v2")
        // certbot: the key rewritten in place (atomically: a new inode); the CA file appears.
        try "new key".write(toFile: "\(dir)/tls.key", atomically: true, encoding: .utf8)
        try "ca".write(toFile: "\(dir)/ca.pem", atomically: true, encoding: .utf8)
        let after = CertificateFiles(paths)
        #expect(before.changed(in: after) == ["\(dir)/ca.pem", "\(dir)/current/tls.crt", "\(dir)/tls.key"])
        #expect(after.changed(in: CertificateFiles(paths)).isEmpty)
        #expect(CertificateFiles([]).isEmpty)
    }
}
