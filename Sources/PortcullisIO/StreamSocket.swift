import Dispatch
import PortcullisCore
#if canImport(Glibc)
import Glibc
#endif

/// A non-blocking TCP socket pinned to one event loop, with Dispatch read and write
/// sources. Owns its file descriptor: the descriptor is closed after both sources
/// have been cancelled (libdispatch requires that order).
///
/// Threading: every method must be called on `loop.queue`. Handlers run there too.
///
/// Back-pressure: `pauseReading()` suspends the read source (the kernel's socket
/// buffer then fills and TCP flow control pushes back on the peer);
/// `waitUntilWritable(_:)` arms the write source only while output is pending.
public final class StreamSocket: @unchecked Sendable {
    // @unchecked Sendable: confined to `loop.queue` (see type comment).

    public let fd: Int32
    public unowned let loop: EventLoop
    private var readSource: DispatchSourceRead?
    private var readSuspended = false
    private var writeSource: DispatchSourceWrite?
    private var writeSuspended = true
    private var writeHandler: (() -> Void)?
    public private(set) var isClosed = false
    private var liveSources = 0

    public init(fd: Int32, loop: EventLoop) {
        self.fd = fd
        self.loop = loop
    }

    deinit {
        if !isClosed { System.close(fd) }
    }

    /// Starts delivering readable events to `handler`.
    public func startReading(_ handler: @escaping () -> Void) {
        precondition(readSource == nil)
        let source = DispatchSource.makeReadSource(fileDescriptor: fd, queue: loop.queue)
        source.setEventHandler(handler: handler)
        liveSources += 1
        source.setCancelHandler { [self] in sourceCancelled() }
        readSource = source
        source.resume()
    }

    public var isReadingPaused: Bool { readSuspended }

    public func pauseReading() {
        guard let source = readSource, !readSuspended else { return }
        source.suspend()
        readSuspended = true
    }

    public func resumeReading() {
        guard let source = readSource, readSuspended else { return }
        readSuspended = false
        source.resume()
    }

    /// Calls `handler` when the socket becomes writable, repeatedly, until
    /// `stopWaitingForWritable()` is called.
    public func waitUntilWritable(_ handler: @escaping () -> Void) {
        guard !isClosed else { return }
        writeHandler = handler
        if writeSource == nil {
            let source = DispatchSource.makeWriteSource(fileDescriptor: fd, queue: loop.queue)
            source.setEventHandler { [unowned self] in self.writeHandler?() }
            liveSources += 1
            source.setCancelHandler { [self] in sourceCancelled() }
            writeSource = source
            writeSuspended = false
            source.resume()
        } else if writeSuspended {
            writeSuspended = false
            writeSource!.resume()
        }
    }

    public func stopWaitingForWritable() {
        guard let source = writeSource, !writeSuspended else { return }
        source.suspend()
        writeSuspended = true
        writeHandler = nil
    }

    @inline(__always)
    public func read(into buffer: UnsafeMutableRawBufferPointer) -> IOResult {
        System.read(fd, into: buffer)
    }

    @inline(__always)
    public func write(_ buffer: UnsafeRawBufferPointer) -> IOResult {
        System.write(fd, buffer)
    }

    /// What happened to bytes handed to `send(_:pending:)`.
    public enum SendOutcome { case written, queued, failed }

    /// Writes `bytes` now if nothing is queued; whatever the kernel does not take
    /// goes to the end of `pending` (bytes already queued keep their order).
    /// `.queued` means the caller must arm `waitUntilWritable` and call `flush`.
    public func send(_ bytes: UnsafeRawBufferPointer, pending: inout ByteBuffer) -> SendOutcome {
        if !pending.isEmpty {
            pending.append(bytes)
            return .queued
        }
        switch System.write(fd, bytes) {
        case .bytes(let n) where n == bytes.count:
            return .written
        case .bytes(let n):
            pending.append(UnsafeRawBufferPointer(rebasing: bytes[n...]))
        case .wouldBlock, .endOfFile:
            pending.append(bytes)
        case .failed:
            return .failed
        }
        return .queued
    }

    /// What `flush(_:)` achieved.
    public enum FlushOutcome { case drained, pending, failed }

    /// Writes queued bytes until done or the kernel pushes back. On `.drained` the
    /// write source is disarmed and the buffer's storage released.
    public func flush(_ pending: inout ByteBuffer) -> FlushOutcome {
        while !pending.isEmpty {
            switch System.write(fd, pending.readable) {
            case .bytes(let n): pending.consume(n)
            case .wouldBlock, .endOfFile: return .pending
            case .failed: return .failed
            }
        }
        stopWaitingForWritable()
        pending.releaseIfEmpty()
        return .drained
    }

    /// Half-closes the write side (sends FIN) so the peer sees the end of a response.
    public func shutdownWrite() { _ = Glibc.shutdown(fd, Int32(SHUT_WR)) }

    /// Cancels the sources; the descriptor is closed once they are gone.
    public func close() {
        guard !isClosed else { return }
        isClosed = true
        writeHandler = nil
        if liveSources == 0 {
            System.close(fd)
            return
        }
        if let source = readSource {
            source.setEventHandler(handler: nil)
            if readSuspended { readSuspended = false; source.resume() }
            source.cancel()
        }
        if let source = writeSource {
            source.setEventHandler(handler: nil)
            if writeSuspended { writeSuspended = false; source.resume() }
            source.cancel()
        }
        readSource = nil
        writeSource = nil
    }

    private func sourceCancelled() {
        liveSources -= 1
        if liveSources == 0 { System.close(fd) }
    }
}
