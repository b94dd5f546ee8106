import Dispatch
import PortcullisCore
import Testing
@testable import PortcullisIO
#if canImport(Glibc)
import Glibc
#endif

/// The edge-triggered readiness contract of `StreamSocket` (EventLoop+Readiness.swift),
/// on real non-blocking socket pairs: no edge may be lost across pause/resume,
/// registration or a full send buffer.
@Suite struct StreamSocketReadinessTests {
    /// A connected non-blocking pair: `near` is driven by the loop, `far` by the test.
    private static func socketPair() -> (near: Int32, far: Int32) {
        var fds: [Int32] = [0, 0]
        let rc = socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0, &fds)
        precondition(rc == 0)
        return (fds[0], fds[1])
    }

    private static func write(_ fd: Int32, _ text: String) {
        var text = text
        text.withUTF8 { _ = Glibc.write(fd, $0.baseAddress, $0.count) }
    }

    /// Reads everything the socket has into `received`, as a read handler must.
    private static func drain(_ socket: StreamSocket, into received: inout [UInt8]) {
        while true {
            switch socket.read(into: socket.loop.readScratch) {
            case .bytes(let n):
                received += socket.loop.readScratch[0..<n]
                if n < socket.loop.readScratch.count { return }
            default: return
            }
        }
    }

    @Test func bytesThatArrivedBeforeReadingStartedAreDelivered() {
        let loop = EventLoop(index: 0)
        let (near, far) = Self.socketPair()
        defer { Glibc.close(far) }
        Self.write(far, "early")
        let got = DispatchSemaphore(value: 0)
        nonisolated(unsafe) var received: [UInt8] = []
        loop.queue.async {
            let socket = StreamSocket(fd: near, loop: loop)
            socket.startReading {
                Self.drain(socket, into: &received)
                if received.count == 5 { socket.close(); got.signal() }
            }
        }
        #expect(got.wait(timeout: .now() + 5) == .success)
        #expect(String(decoding: received, as: UTF8.self) == "early")
    }

    /// Data and FIN in one event: a reader that stops at its short read must still be
    /// told about the end of file, though no further edge will come.
    @Test func anEndOfFileBehindTheLastBytesIsDeliveredToAReaderThatStopsAtAShortRead() {
        for _ in 0..<20 {
            let loop = EventLoop(index: 0)
            let (near, far) = Self.socketPair()
            Self.write(far, "last words")
            Glibc.close(far)
            let ended = DispatchSemaphore(value: 0)
            nonisolated(unsafe) var received: [UInt8] = []
            loop.queue.async {
                let socket = StreamSocket(fd: near, loop: loop)
                socket.startReading {
                    while true {
                        switch socket.read(into: loop.readScratch) {
                        case .bytes(let n):
                            received += loop.readScratch[0..<n]
                            if n < loop.readScratch.count { return }  // "drained", by the usual rule
                        case .endOfFile:
                            socket.close()
                            ended.signal()
                            return
                        default:
                            return
                        }
                    }
                }
            }
            #expect(ended.wait(timeout: .now() + 5) == .success, "the end of file was never delivered")
            #expect(String(decoding: received, as: UTF8.self) == "last words")
        }
    }

    @Test func bytesThatArrivedWhilePausedAreDeliveredOnResume() {
        let loop = EventLoop(index: 0)
        let (near, far) = Self.socketPair()
        defer { Glibc.close(far) }
        nonisolated(unsafe) var socket: StreamSocket?
        nonisolated(unsafe) var received: [UInt8] = []
        let started = DispatchSemaphore(value: 0)
        let got = DispatchSemaphore(value: 0)
        loop.queue.async {
            let s = StreamSocket(fd: near, loop: loop)
            socket = s
            s.startReading {
                Self.drain(s, into: &received)
                if received.count == 6 { got.signal() }
            }
            s.pauseReading()
            started.signal()
        }
        #expect(started.wait(timeout: .now() + 5) == .success)
        Self.write(far, "paused")
        // While paused the edge is remembered, not delivered.
        #expect(got.wait(timeout: .now() + 0.3) == .timedOut)
        loop.queue.async { socket?.resumeReading() }
        #expect(got.wait(timeout: .now() + 5) == .success)
        loop.queue.sync { socket?.close() }
        #expect(String(decoding: received, as: UTF8.self) == "paused")
    }

    @Test func writeWaitFiresOnceThePeerDrainsAFullBuffer() {
        let loop = EventLoop(index: 0)
        let (near, far) = Self.socketPair()
        defer { Glibc.close(far) }
        nonisolated(unsafe) var socket: StreamSocket?
        let full = DispatchSemaphore(value: 0)
        let writable = DispatchSemaphore(value: 0)
        loop.queue.async {
            let s = StreamSocket(fd: near, loop: loop)
            socket = s
            let pending = ByteBufferBox()
            let chunk = [UInt8](repeating: 0x61, count: 64 * 1024)
            // Fill the kernel buffer until the send queues bytes.
            while true {
                let outcome = chunk.withUnsafeBytes { s.send($0, pending: &pending.buffer) }
                if outcome == .queued { break }
            }
            s.waitUntilWritable {
                if s.flush(&pending.buffer) == .drained { writable.signal() }
            }
            full.signal()
        }
        #expect(full.wait(timeout: .now() + 5) == .success)
        #expect(writable.wait(timeout: .now() + 0.3) == .timedOut)
        // The peer reads everything; the write wait must fire and drain.
        var buffer = [UInt8](repeating: 0, count: 256 * 1024)
        let deadline = DispatchTime.now() + 5
        var done = false
        while !done && DispatchTime.now() < deadline {
            _ = buffer.withUnsafeMutableBytes { Glibc.read(far, $0.baseAddress, $0.count) }
            done = writable.wait(timeout: .now() + 0.01) == .success
        }
        #expect(done)
        loop.queue.sync { socket?.close() }
    }

    @Test func anEventCollectedForASocketClosedEarlierInTheBatchReachesNoOne() {
        let loop = EventLoop(index: 0)
        let (nearA, farA) = Self.socketPair()
        let (nearB, farB) = Self.socketPair()
        nonisolated(unsafe) var farC: Int32 = -1
        defer { Glibc.close(farA); Glibc.close(farB); if farC >= 0 { Glibc.close(farC) } }
        // Both readable before registration: one poll collects both events.
        Self.write(farA, "x")
        Self.write(farB, "y")
        nonisolated(unsafe) var delivered: [String] = []
        let done = DispatchSemaphore(value: 0)
        loop.queue.sync {
            let a = StreamSocket(fd: nearA, loop: loop)
            let b = StreamSocket(fd: nearB, loop: loop)
            // Whichever runs first closes the other and registers a new socket, which
            // takes the closed one's slot (and likely its descriptor number).
            func first(_ me: StreamSocket, _ other: StreamSocket, _ name: String) {
                delivered.append(name)
                var r: [UInt8] = []
                Self.drain(me, into: &r)
                other.close()
                let (nearC, c2) = Self.socketPair()
                farC = c2
                let c = StreamSocket(fd: nearC, loop: loop)
                c.startReading { delivered.append("c"); c.close() }  // nothing to read: must not run
                me.close()
                loop.queue.async { done.signal() }
            }
            a.startReading { first(a, b, "a") }
            b.startReading { first(b, a, "b") }
        }
        #expect(done.wait(timeout: .now() + 5) == .success)
        #expect(done.wait(timeout: .now() + 0.3) == .timedOut)
        loop.queue.sync {}
        #expect(delivered.count == 1)
        #expect(!delivered.contains("c"))
    }
}

/// `ByteBuffer` is non-copyable; a box lets a Dispatch block and a handler share one.
private final class ByteBufferBox: @unchecked Sendable {
    var buffer = ByteBuffer()
}
