/// A listener's HTTP/2 settings (`listen[].http2`). HTTP/2 is offered on a TLS listener
/// whose `tls.alpn` lists `h2`, and with prior knowledge (h2c) on a plain listener with
/// `h2c: true`; these settings apply to both.
///
/// ```yaml
/// http2: {max_concurrent_streams: 100, max_header_list_size: 16384, initial_window_size: 65535,
///         send_timeout: 10s, idle_timeout: 30s}
/// ```
public struct HTTP2Settings: Sendable, Equatable {
    /// SETTINGS_MAX_CONCURRENT_STREAMS: streams the client may have open at once; a
    /// stream beyond it is refused (RST_STREAM REFUSED_STREAM or PROTOCOL_ERROR).
    public var maxConcurrentStreams = 100
    /// SETTINGS_MAX_HEADER_LIST_SIZE, enforced on the decoded size (name + value + 32 per
    /// field, RFC 9113 §6.5.2), so an HPACK bomb counts at its decoded size. A request past
    /// it is answered 431; one past four times it ends the connection (ENHANCE_YOUR_CALM).
    public var maxHeaderListSize = 16384
    /// SETTINGS_INITIAL_WINDOW_SIZE for request bodies. The client's windows are reopened
    /// only as the upstream takes the bytes, so a stream buffers at most this much.
    public var initialWindowSize = 65535
    /// A response that cannot make progress this long (the client's window stays at zero,
    /// or its socket takes nothing) is reset, or the connection closed.
    public var sendTimeout: Double = 10
    /// A connection without open streams this long gets GOAWAY and is closed.
    public var idleTimeout: Double = 30

    public init() {}
}
