import Foundation
import Logging
import PortcullisProxy
import PortcullisCore

/// A swift-log handler writing one JSON object per line to standard error:
/// `{"time":…,"level":…,"label":…,"message":…,<metadata>}`. Callers never log
/// secrets or tokens; metadata values are strings.
public struct JSONLogHandler: LogHandler {
    public var logLevel: Logger.Level
    public var metadata: Logger.Metadata = [:]
    let label: String

    public init(label: String, level: Logger.Level) {
        self.label = label
        self.logLevel = level
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
