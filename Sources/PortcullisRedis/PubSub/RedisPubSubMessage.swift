/// One message received on a subscribed channel (or pattern).
public struct RedisPubSubMessage: Sendable, Equatable {
    public var channel: String
    /// The pattern that matched, for `PSUBSCRIBE` subscriptions.
    public var pattern: String?
    public var payload: [UInt8]

    public init(channel: String, pattern: String?, payload: [UInt8]) {
        self.channel = channel
        self.pattern = pattern
        self.payload = payload
    }

    /// The payload as UTF-8 text (lossy).
    public var text: String { String(decoding: payload, as: UTF8.self) }
}
