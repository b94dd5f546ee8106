import PortcullisCore

/// The TLS side of one listener: the context new connections get, swapped whole by
/// a reload (SIGHUP). A reload that fails keeps the running context and reports the
/// file and reason; established connections keep the context they started with.
///
/// Threading: any thread; the reference is behind a lock taken once per accepted
/// connection (a handshake costs far more).
public final class TLSServerEndpoint: @unchecked Sendable {
    // @unchecked Sendable: `current` only under `lock`.
    private let lock = Lock()
    private var current: TLSServerContext

    public init(settings: TLSServerSettings) throws(TLSFileError) {
        current = try TLSServerContext(settings: settings)
    }

    public var context: TLSServerContext { lock.withLock { current } }
    public var settings: TLSServerSettings { context.settings }

    /// Loads every certificate again from its files; on success new handshakes use
    /// them, on failure nothing changes and the error names the file.
    public func reload() throws(TLSFileError) {
        let fresh = try TLSServerContext(settings: settings)
        lock.withLock { current = fresh }
    }
}
