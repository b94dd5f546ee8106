import Dispatch
import PortcullisCore
#if canImport(Glibc)
import Glibc
#endif

/// A non-blocking TCP socket pinned to one event loop. Owns its file descriptor.
///
/// Threading: every method must be called on `loop.queue`. Handlers run there too.
///
/// Readiness comes from the loop's edge-triggered poller (EventLoop+Readiness.swift):
/// the socket is registered once, on the first `startReading` or `waitUntilWritable`,
/// and remembers what the last edges said (`readReady`, `writeReady`) until a read or
/// write finds the kernel empty or full. So pausing, resuming and waiting for
/// writability are flag changes, never system calls; a handler is re-run (soon, on
/// the loop, never from inside the call) when reading resumes or a write wait begins
/// while readiness is already known.
///
/// Contract for the read handler: read until `read` reports `.wouldBlock`, a short
/// read (fewer bytes than the buffer holds, which on a TCP socket means the receive
/// queue was emptied), end of file or an error — or pause reading. A handler that
/// returns otherwise is not called again until new bytes arrive.
///
/// Back-pressure: `pauseReading()` stops calling the read handler (the kernel's
/// socket buffer then fills and TCP flow control pushes back on the peer);
/// `waitUntilWritable(_:)` calls its handler while output is pending.
///
/// Measured against the first design (one Dispatch read and write source per
/// socket): see the table in EventLoop+Readiness.swift.
public final class StreamSocket: @unchecked Sendable {
    // @unchecked Sendable: confined to `loop.queue` (see type comment).

    public let fd: Int32
    public let loop: EventLoop
    private var readHandler: (() -> Void)?
    private var writeHandler: (() -> Void)?
    private var readPaused = false
    /// The last edge said readable and no read has since found the socket drained.
    private var readReady = false
    /// The last edge said writable and no write has since found the socket full.
    private var writeReady = false
    /// The poller said the peer closed its side. From then on a short read does not
    /// mean drained: the end of file behind the last bytes still has to be read, and
    /// no further edge will announce it (data and FIN often arrive in one event).
    private var peerClosed = false
    private var isRegistered = false
    /// Queued with the loop to run handlers (see `EventLoop.scheduleHandlers`).
    private var isScheduled = false
    /// The loop's token for this socket while registered.
    var token: UInt64 = 0
    public private(set) var isClosed = false
    /// TLS (or another record layer) between the kernel and the owner; nil for plain TCP.
    public private(set) var security: (any StreamSecurity)?
    /// A secured write needs the peer's bytes first (a client's handshake): the
    /// write handler also runs on readable edges until it has them.
    private var writeWantsRead = false

    public init(fd: Int32, loop: EventLoop) {
        self.fd = fd
        self.loop = loop
        self.isListener = false
    }

    /// A listening descriptor: registered level-triggered for input only, so the poller
    /// reports it on every wait while connections are queued and its handler can accept
    /// one per report, never calling `accept` just to learn that the queue is empty.
    public init(listening fd: Int32, loop: EventLoop) {
        self.fd = fd
        self.loop = loop
        self.isListener = true
    }

    /// Registered level-triggered for input only (see `init(listening:loop:)`).
    let isListener: Bool

    /// Stops or restarts the poller's reports for a listener (a listener that cannot
    /// accept for lack of descriptors would otherwise be reported on every wait).
    @discardableResult
    public func setListening(_ on: Bool) -> IOError? {
        precondition(isListener)
        guard isRegistered, !isClosed else { return nil }
        return System.setListening(fd, with: loop.pollFD, token: token, on)
    }

    deinit {
        if !isClosed {
            security?.close()
            System.close(fd)
        }
    }

    /// Puts a record layer (TLS) between this socket and its owner. Called once,
    /// before the first read or write; from then on `read`, `write`, `send`, `flush`
    /// and `shutdownWrite` carry plaintext through the layer (see `StreamSecurity`).
    public func secure(with layer: any StreamSecurity) {
        precondition(security == nil, "a socket is secured once")
        security = layer
    }

    /// Registers with the loop's poller once. A failure (out of memory in the kernel)
    /// is reported to the handlers as readiness: their next read or write fails.
    private func registerIfNeeded() {
        guard !isRegistered, !isClosed else { return }
        isRegistered = true
        if loop.register(self) != nil {
            readReady = true
            writeReady = true
            schedule()
        }
    }

    private func schedule() {
        guard !isScheduled else { return }
        isScheduled = true
        loop.scheduleHandlers(self)
    }

    /// Starts delivering readable events to `handler`.
    public func startReading(_ handler: @escaping () -> Void) {
        precondition(readHandler == nil)
        readHandler = handler
        registerIfNeeded()
        if readReady && !readPaused { schedule() }
    }

    /// Drops the read handler (another owner takes the socket over and starts reading).
    public func stopReading() {
        readHandler = nil
        readPaused = false
    }

    public var isReadingPaused: Bool { readPaused }

    public func pauseReading() {
        readPaused = true
    }

    public func resumeReading() {
        guard readPaused else { return }
        readPaused = false
        if readReady && readHandler != nil { schedule() }
    }

    /// Calls `handler` when the socket becomes writable, repeatedly, until
    /// `stopWaitingForWritable()` is called.
    public func waitUntilWritable(_ handler: @escaping () -> Void) {
        guard !isClosed else { return }
        writeHandler = handler
        registerIfNeeded()
        if writeReady { schedule() }
    }

    public func stopWaitingForWritable() {
        writeHandler = nil
    }

    /// An edge from the poller.
    func ready(_ bits: UInt32) {
        if bits & 4 != 0 { peerClosed = true }
        if bits & 2 != 0 { writeReady = true }
        if bits & 1 != 0 { readReady = true }
        runHandlers()
    }

    /// Runs what `schedule()` queued.
    func runDeferred() {
        isScheduled = false
        runHandlers()
    }

    /// Write first, so that output drained here can make room before more is read.
    /// Ciphertext a record layer queued goes before anything the owner writes.
    private func runHandlers() {
        if let security, writeReady, security.hasQueuedOutput, !isClosed {
            _ = security.flushQueuedOutput()  // a failure shows in the owner's next read or write
        }
        if writeReady || (writeWantsRead && readReady), let handler = writeHandler, !isClosed {
            writeWantsRead = false
            handler()
        }
        if readReady, !readPaused, let handler = readHandler, !isClosed { handler() }
    }

    /// Reads plaintext: from the kernel, or through the record layer when secured.
    @inline(__always)
    public func read(into buffer: UnsafeMutableRawBufferPointer) -> IOResult {
        guard let security else { return rawRead(into: buffer) }
        return secureRead(security, into: buffer)
    }

    /// Writes plaintext: to the kernel, or through the record layer when secured.
    @inline(__always)
    public func write(_ buffer: UnsafeRawBufferPointer) -> IOResult {
        guard let security else { return rawWrite(buffer) }
        return secureWrite(security, buffer)
    }

    /// One `read(2)` on the descriptor, keeping `readReady` true to the kernel: a
    /// short read or `EAGAIN` means the receive queue is empty. Record layers read
    /// their ciphertext through this.
    @inline(__always)
    public func rawRead(into buffer: UnsafeMutableRawBufferPointer) -> IOResult {
        let result = System.read(fd, into: buffer)
        switch result {
        case .bytes(let n) where n < buffer.count:
            // With the peer gone, the handler must run once more to read the end of file.
            if peerClosed { schedule() } else { readReady = false }
        case .wouldBlock: readReady = false
        default: break
        }
        return result
    }

    /// One `send(2)` on the descriptor, keeping `writeReady` true to the kernel.
    @inline(__always)
    public func rawWrite(_ buffer: UnsafeRawBufferPointer) -> IOResult {
        let result = System.write(fd, buffer)
        switch result {
        case .bytes(let n) where n < buffer.count: writeReady = false
        case .wouldBlock: writeReady = false
        default: break
        }
        return result
    }

    private func secureRead(_ security: any StreamSecurity, into buffer: UnsafeMutableRawBufferPointer) -> IOResult {
        let result = security.read(into: buffer)
        afterSecureCall(security)
        switch result {
        case .bytes(let n):
            // Decrypted bytes still held, or a socket not known to be drained: the
            // caller stops at a short read, so its handler must run again by itself.
            if security.hasBufferedInput { readReady = true }
            if readReady && n < buffer.count { schedule() }
            return .bytes(n)
        case .wantRead:
            readReady = false
            return .wouldBlock
        case .wantWrite:
            return .wouldBlock
        case .closed:
            return .endOfFile
        case .failed:
            return .failed(EPROTO)
        }
    }

    private func secureWrite(_ security: any StreamSecurity, _ buffer: UnsafeRawBufferPointer) -> IOResult {
        let result = security.write(buffer)
        afterSecureCall(security)
        switch result {
        case .bytes(let n): return .bytes(n)
        case .wantWrite: return .wouldBlock
        case .wantRead:
            writeWantsRead = true
            return .wouldBlock
        case .closed, .failed: return .failed(EPIPE)
        }
    }

    /// After the layer ran: queued ciphertext leaves on the next writable edge, and
    /// a write that waited for the handshake runs once the handshake is done.
    private func afterSecureCall(_ security: any StreamSecurity) {
        if security.hasQueuedOutput && writeReady { schedule() }
        if writeWantsRead && writeHandler != nil && security.isHandshakeComplete {
            writeWantsRead = false
            schedule()
        }
    }

    /// Input waits that no handler read yet: a readable edge not drained, the peer's end of
    /// stream, or plaintext the record layer holds. No system call.
    public var hasUnreadInput: Bool {
        readReady || peerClosed || (security?.hasBufferedInput ?? false)
    }

    /// The descriptor has nothing more to read: the read handler waits for the next
    /// report from the poller.
    public func markReadDrained() { readReady = false }

    /// The record layer's handshake is complete (always true for a plain socket).
    public var isHandshakeComplete: Bool { security?.isHandshakeComplete ?? true }

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
        switch write(bytes) {
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
    /// write wait ends and the buffer's storage is released.
    public func flush(_ pending: inout ByteBuffer) -> FlushOutcome {
        if let security, security.hasQueuedOutput {
            switch security.flushQueuedOutput() {
            case .bytes: break
            case .failed, .closed: return .failed
            case .wantRead, .wantWrite: return .pending
            }
        }
        while !pending.isEmpty {
            switch write(pending.readable) {
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
    public func shutdownWrite() {
        security?.shutdown()
        _ = Glibc.shutdown(fd, Int32(SHUT_WR))
    }

    /// Closes the descriptor (which also removes it from the loop's poller) and drops
    /// the handlers. Events already collected for it are recognised as stale. A record layer
    /// first says goodbye (TLS `close_notify`, RFC 8446 §6.1) with one non-blocking write:
    /// a peer that stopped reading cannot hold the close, and one that reads sees a clean end
    /// (OpenSSL 3 clients drop a session that ended without it, so no resumption).
    public func close() {
        guard !isClosed else { return }
        isClosed = true
        readHandler = nil
        writeHandler = nil
        if isRegistered { loop.unregister(self) }
        if let security {
            security.shutdown()
            security.close()
        }
        System.close(fd)
    }
}
