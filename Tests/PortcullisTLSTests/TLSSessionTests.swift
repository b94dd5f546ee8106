import Dispatch
import Foundation
import PortcullisCore
import PortcullisIO
import PortcullisTestSupport
import Testing
@testable import PortcullisTLS
#if canImport(Glibc)
import Glibc
#endif

/// A client and a server `TLSSession` on the two ends of a socket pair, each on its
/// own event loop, driven only by the loops' readiness: the handshake, transfers far
/// larger than the socket buffers and TLS records both ways, and failures.
@Suite(.serialized) struct TLSSessionTests {
    /// Owns one end: reads everything into `received`, and (as the server) echoes it
    /// back with the same pending/flush back-pressure as the proxy uses.
    final class Peer: @unchecked Sendable {
        // @unchecked Sendable: touched only on `socket.loop.queue`.
        let socket: StreamSocket
        var pending = ByteBuffer()
        var received: [UInt8] = []
        var ended = false
        var failed = false
        let echo: Bool
        let done: @Sendable (Peer) -> Void

        init(socket: StreamSocket, echo: Bool, done: @escaping @Sendable (Peer) -> Void) {
            self.socket = socket
            self.echo = echo
            self.done = done
        }

        // Weak: the socket can report once more (the other side's close) after the test let
        // go of this peer; an unowned reference then crashed the whole test process.
        func start() { socket.startReading { [weak self] in self?.readable() } }

        func readable() {
            while !socket.isReadingPaused && !socket.isClosed {
                switch socket.read(into: socket.loop.readScratch) {
                case .bytes(let n):
                    let bytes = UnsafeRawBufferPointer(rebasing: socket.loop.readScratch[0..<n])
                    if echo { send(bytes) } else { received += bytes }
                    done(self)
                    if n < socket.loop.readScratch.count { return }
                case .wouldBlock: return
                case .endOfFile: ended = true; done(self); return
                case .failed: failed = true; done(self); return
                }
            }
        }

        func send(_ bytes: UnsafeRawBufferPointer) {
            let wasQueued = !pending.isEmpty
            switch socket.send(bytes, pending: &pending) {
            case .written: return
            case .failed: failed = true; done(self); return
            case .queued:
                if wasQueued { return }
                // Back-pressure on the echoing side: read no more until the peer drains.
                // (The sender keeps reading: it must take the echo while it sends.)
                if echo { socket.pauseReading() }
                socket.waitUntilWritable { [weak self] in
                    guard let self else { return }
                    switch self.socket.flush(&self.pending) {
                    case .pending: return
                    case .failed: self.failed = true; self.done(self)
                    case .drained: if self.echo { self.socket.resumeReading() }
                    }
                }
            }
        }
    }

    /// Loops live as long as the suite: sockets hold their loop unowned.
    static let serverLoop = EventLoop(index: 0)
    static let clientLoop = EventLoop(index: 1)

    static func socketPair() -> (Int32, Int32) {
        var fds: [Int32] = [0, 0]
        precondition(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0, &fds) == 0)
        return (fds[0], fds[1])
    }

    /// Runs a client sending `payload` to an echoing server; returns the client's peer once it
    /// has `payload.count` bytes back (or failed), and the sessions.
    static func roundTrip(payload: [UInt8], serverSettings: TLSServerSettings, caFile: String,
                          serverName: String) throws -> (client: Peer, server: Peer, clientSession: TLSSession, serverSession: TLSSession)? {
        let serverLoop = Self.serverLoop
        let clientLoop = Self.clientLoop
        let (a, b) = socketPair()
        let serverContext = try TLSServerContext(settings: serverSettings)
        let clientContext = try TLSClientContext(caFile: caFile)
        let finished = DispatchSemaphore(value: 0)
        nonisolated(unsafe) var result: (Peer, Peer, TLSSession, TLSSession)?
        nonisolated(unsafe) var server: Peer?
        nonisolated(unsafe) var serverSession: TLSSession?
        serverLoop.queue.sync {
            let socket = StreamSocket(fd: a, loop: serverLoop)
            serverSession = TLSSession.secureServer(socket, context: serverContext)
            server = Peer(socket: socket, echo: true) { peer in if peer.failed { finished.signal() } }
            server!.start()
        }
        clientLoop.queue.sync {
            let socket = StreamSocket(fd: b, loop: clientLoop)
            let session = try! TLSSession.secureClient(socket, context: clientContext, serverName: serverName)
            let client = Peer(socket: socket, echo: false) { peer in
                if peer.failed || peer.ended || peer.received.count >= payload.count { finished.signal() }
            }
            result = (client, server!, session, serverSession!)
            client.start()
            payload.withUnsafeBytes { client.send($0) }  // before the handshake: the write drives it
        }
        guard finished.wait(timeout: .now() + 20) == .success else { return nil }
        clientLoop.queue.sync {}
        serverLoop.queue.sync {}
        return result.map { (client: $0.0, server: $0.1, clientSession: $0.2, serverSession: $0.3) }
    }

    @Test func aClientWriteDrivesTheHandshakeAndMegabytesEchoBackIntact() throws {
        let pki = try TestPKI()
        let leaf = try pki.leaf(["api.test"])
        var payload = [UInt8](repeating: 0, count: 3 * 1024 * 1024 + 17)
        for i in payload.indices { payload[i] = UInt8(truncatingIfNeeded: i &* 2654435761 >> 13) }
        let settings = TLSServerSettings(certificates: [.init(certificate: leaf.certificate, privateKey: leaf.key)])
        let run = try #require(try Self.roundTrip(payload: payload, serverSettings: settings, caFile: pki.caCertificate,
                                                  serverName: "api.test"))
        #expect(!run.client.failed && !run.server.failed)
        #expect(run.client.received.count == payload.count)
        #expect(run.client.received == payload, "every byte back, in order")
        run.client.socket.loop.queue.sync {
            #expect(run.clientSession.isHandshakeComplete)
            #expect(run.clientSession.protocolVersion == "TLSv1.3")
        }
    }

    @Test func aWrongServerNameFailsVerificationWithTheReason() throws {
        let pki = try TestPKI()
        let leaf = try pki.leaf(["api.test"])
        let settings = TLSServerSettings(certificates: [.init(certificate: leaf.certificate, privateKey: leaf.key)])
        let run = try #require(try Self.roundTrip(payload: Array("GET / HTTP/1.1\r\n\r\n".utf8), serverSettings: settings,
                                                  caFile: pki.caCertificate, serverName: "other.test"))
        #expect(run.client.failed)
        run.client.socket.loop.queue.sync {
            #expect(run.clientSession.lastFailure?.description.contains("hostname mismatch") == true,
                    "\(String(describing: run.clientSession.lastFailure))")
        }
    }

    @Test func anUnknownAuthorityFailsVerification() throws {
        let pki = try TestPKI()
        let stranger = try TestPKI(name: "Stranger CA")
        let leaf = try stranger.leaf(["api.test"])
        let settings = TLSServerSettings(certificates: [.init(certificate: leaf.certificate, privateKey: leaf.key)])
        let run = try #require(try Self.roundTrip(payload: Array("x".utf8), serverSettings: settings,
                                                  caFile: pki.caCertificate, serverName: "api.test"))
        #expect(run.client.failed)
        run.client.socket.loop.queue.sync {
            #expect(run.clientSession.lastFailure?.operation == "certificate verification failed", "\(String(describing: run.clientSession.lastFailure))")
        }
    }

    @Test func wildcardsCoverExactlyOneLabel() {
        #expect(TLSCertificate.name("*.api.test", matches: "v2.api.test"))
        #expect(!TLSCertificate.name("*.api.test", matches: "api.test"))
        #expect(!TLSCertificate.name("*.api.test", matches: "a.b.api.test"))
        #expect(!TLSCertificate.name("*.api.test", matches: ".api.test"))
        #expect(TLSCertificate.name("api.test", matches: "api.test"))
        #expect(!TLSCertificate.name("api.test", matches: "xapi.test"))
    }

    @Test func ticketKeysSealWithTheCurrentEpochAndOpenTheTwoBefore() {
        let keys = TicketKeys.shared
        let interval = keys.rotationInterval
        let now = 1_000_000 * interval + 5
        let epoch = Int64(now / interval)
        var names: [Int64: [UInt8]] = [:]
        for e in (epoch - 3)...epoch {
            var bytes = TicketKeys.randomKey()
            bytes[0] = UInt8(truncatingIfNeeded: e)
            names[e] = Array(bytes[0..<16])
            keys.install(epoch: e, bytes: bytes)
        }
        #expect(Array(keys.sealingKey(now: now).name) == names[epoch])
        func open(_ e: Int64) -> Bool? {
            names[e]!.withUnsafeBufferPointer { keys.openingKey(name: $0.baseAddress!, now: now)?.renew }
        }
        #expect(open(epoch) == false, "current key: use the ticket")
        #expect(open(epoch - 1) == true, "previous: use and renew")
        #expect(open(epoch - 2) == true)
        #expect(open(epoch - 3) == nil, "older than two periods: a full handshake")
    }
}
