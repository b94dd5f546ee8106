import Foundation
import Logging
import Synchronization
import PortcullisProxy
import PortcullisCore

/// A swift-log handler writing one JSON object per line to standard error:
/// `{"time":…,"level":…,"label":…,"message":…,<metadata>}`. Callers never log
/// secrets or tokens; metadata values are strings.
public struct JSONLogHandler: LogHandler {
    /// The level set at start or by the last reload (`log_level`), shared by every handler.
    private static let level = Atomic<Int>(Logger.Level.allCases.firstIndex(of: .info)!)
    /// A reload's `log_level`: applies to every logger at once.
    static func setLevel(_ level: Logger.Level) {
        Self.level.store(Logger.Level.allCases.firstIndex(of: level) ?? 0, ordering: .relaxed)
    }
    public var logLevel: Logger.Level {
        get { Logger.Level.allCases[Self.level.load(ordering: .relaxed)] }
        set { Self.setLevel(newValue) }
    }
    public var metadata: Logger.Metadata = [:]
    let label: String

    public init(label: String, level: Logger.Level) {
        self.label = label
        Self.setLevel(level)
    }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    public func log(event: LogEvent) {
        let stamp = ISO8601DateFormatter().string(from: Date())
        var line = "{\"time\":\"\(stamp)\",\"level\":\"\(event.level)\",\"label\":\(JSONText.quoted(label)),\"message\":\(JSONText.quoted(event.message.description))"
        let merged = metadata.merging(event.metadata ?? [:]) { $1 }
        for key in merged.keys.sorted() {
            line += ",\(JSONText.quoted(key)):\(JSONText.quoted(merged[key]!.description))"
        }
        line += "}\n"
        Console.error(line)
    }
}
