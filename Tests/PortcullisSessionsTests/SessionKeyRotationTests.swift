import Foundation
import Logging
import PortcullisIO
import PortcullisStore
import PortcullisEdgeAuth
import Testing
@testable import PortcullisSessions

/// The session signing keys across reloads (#33.3), by the clock the service is given: a key
/// a file no longer holds verifies until one access lifetime (plus a minute) after the
/// reload, then it is gone from the verifying keys and the JWKS; a key whose file left the
/// list stops at once; a generated key survives reloads.
@Suite struct SessionKeyRotationTests {
    static let revocations = EmbeddedSessionRevocations()

    static func keyFile(_ dir: String, _ name: String) -> String {
        let path = dir + "/" + name
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/openssl")
        p.arguments = ["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", path]
        p.standardError = FileHandle.nullDevice
        try? p.run()
        p.waitUntilExit()
        return path
    }

    static func service(_ files: [String], previous: SessionService?, now: Int64) throws -> SessionService {
        var settings = SessionSettings(issuer: "https://api.example.test", accept: ["google"],
                                       refreshSecret: "0123456789abcdef0123456789abcdef-secret")
        settings.signingKeyFiles = files
        settings.accessLifetime = 900
        return try SessionService(settings: settings, store: try EmbeddedSessionStore(directory: nil), revocations: revocations,
                                  errorBody: .oauth, logger: Logger(label: "test"),
                                  previous: previous, now: now)
    }

    static func kids(_ service: SessionService, _ now: Int64) -> Set<String> {
        Set(service.verifyingKeys(now: now).map(\.thumbprint))
    }

    @Test func aReplacedKeyVerifiesUntilItsLastTokenExpiresAndARemovedOneStopsAtOnce() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("session-keys-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        let main = Self.keyFile(dir, "main.pem"), spare = Self.keyFile(dir, "spare.pem")
        let t0: Int64 = 1_800_000_000
        let first = try Self.service([main, spare], previous: nil, now: t0)
        let oldMain = first.signingKeys[0].thumbprint, spareKid = first.signingKeys[1].thumbprint
        #expect(first.retiringKeys.isEmpty && Self.kids(first, t0) == [oldMain, spareKid])

        // The main file is replaced; the spare one leaves the list.
        try FileManager.default.removeItem(atPath: main)
        _ = Self.keyFile(dir, "main.pem")
        let second = try Self.service([main], previous: first, now: t0 + 100)
        let newMain = second.signingKeys[0].thumbprint
        #expect(newMain != oldMain && second.keyID == newMain, "the new key signs")
        #expect(Self.kids(second, t0 + 100) == [newMain, oldMain], "the spare one is gone at once, the old main overlaps")
        let end = t0 + 100 + 900 + 60
        #expect(second.nextRetirement(after: t0 + 100) == end)
        #expect(Self.kids(second, end - 1).contains(oldMain))
        #expect(Self.kids(second, end) == [newMain], "gone once its last token has expired")
        #expect(second.nextRetirement(after: end) == nil)
        let document = String(decoding: second.jwks(now: end), as: UTF8.self)
        #expect(document.contains(newMain) && !document.contains(oldMain))

        // A reload that changes nothing keeps the overlap as it was (no new retirement).
        let third = try Self.service([main], previous: second, now: t0 + 200)
        #expect(third.signingKeys[0].thumbprint == newMain && third.nextRetirement(after: t0 + 200) == end)
    }

    @Test func aGeneratedKeySurvivesReloadsAndRetiresWhenFilesAreConfigured() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("session-keys-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        let first = try Self.service([], previous: nil, now: 1000)
        let generated = first.keyID
        #expect(try Self.service([], previous: first, now: 1100).keyID == generated)
        let configured = try Self.service([Self.keyFile(dir, "k.pem")], previous: first, now: 1200)
        #expect(configured.keyID != generated && Self.kids(configured, 1200).contains(generated))
        #expect(!Self.kids(configured, 1200 + 960).contains(generated))
    }
}
