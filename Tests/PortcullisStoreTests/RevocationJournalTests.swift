import Foundation
import Testing
import PortcullisTestSupport
@testable import PortcullisStore

/// The journal's recovery of writes that failed part-way (#25.5). The full-disk and
/// file-size-limit failures themselves run end to end (JournalEndToEndTests).
@Suite struct RevocationJournalTests {
    static func directory() -> String {
        FileManager.default.temporaryDirectory.appendingPathComponent("journal-\(UUID().uuidString)").path
    }

    /// A torn last line left by a crash or a failed write is written over by the next
    /// append, never glued to: the file reads back whole without a start-up rewrite.
    @Test func theNextAppendStartsAtTheEndOfTheLastWholeLine() throws {
        let dir = Self.directory()
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        let path = dir + "/revocations.jsonl"
        let whole = RevocationJournal.encode(.token(id: "a", until: 4_000_000_000))
        for torn in [#"{"kind":"token","id":"t-"#, String(repeating: "x", count: 500)] {
            try (whole + torn).write(toFile: path, atomically: false, encoding: .utf8)
            let journal = try RevocationJournal(directory: dir)
            try journal.append(.token(id: "b", until: 4_000_000_000))
            let text = try String(contentsOfFile: path, encoding: .utf8)
            #expect(text == whole + RevocationJournal.encode(.token(id: "b", until: 4_000_000_000)), "\(text)")
            var warnings: [String] = []
            let loaded = try journal.load(now: 0, maxCredentialLifetime: 86_400) { warnings.append($0) }
            #expect(loaded == [.token(id: "a", until: 4_000_000_000), .token(id: "b", until: 4_000_000_000)])
            #expect(warnings.isEmpty)
        }
    }

    /// A journal an earlier version left with an acknowledged line glued onto a failed one:
    /// the acknowledged line is read, with a warning naming the line; anything else that is
    /// unreadable still stops the start.
    @Test func anAcknowledgedLineGluedOntoAFailedOneIsRecovered() throws {
        let dir = Self.directory()
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        let path = dir + "/revocations.jsonl"
        let first = RevocationJournal.encode(.token(id: "a", until: 4_000_000_000))
        let glued = #"{"kind":"token","id":"t-"# + RevocationJournal.encode(.subject("bob", before: 1_700_000_000, until: nil))
        let undo = RevocationJournal.encode(undo: .token("a"))
        try (first + glued + undo).write(toFile: path, atomically: false, encoding: .utf8)
        let journal = try RevocationJournal(directory: dir)
        var warnings: [String] = []
        let loaded = try journal.load(now: 0, maxCredentialLifetime: 86_400) { warnings.append($0) }
        #expect(loaded == [.subject("bob", before: 1_700_000_000, until: nil)])
        #expect(warnings.count == 1 && warnings[0].contains("revocations.jsonl:2"), "\(warnings)")

        try (first + "{\"kind\":\"token\",\"id\":\"t-garbage\n").write(toFile: path, atomically: false, encoding: .utf8)
        #expect(throws: RevocationJournal.Failure.self) {
            _ = try journal.load(now: 0, maxCredentialLifetime: 86_400) { _ in }
        }
    }
}
