// libFuzzer target for the HTTP/2 server path: `HTTP2ServerConnection` and its streams on
// nghttp2, from the bytes after the client preface to the exchanges they open. Built by
// Tests/Fuzz/run-h2-fuzz.sh with `-sanitize=fuzzer,address` (that build defines
// PORTCULLIS_FUZZ; libFuzzer provides `main`). A normal build makes a replay tool instead:
// `PortcullisHTTP2Fuzz FILE...` runs each file once (a reproducer from the artifacts).
//
// Each input is one connection: a socket pair stands in for the client's TCP socket, the
// client preface is prepended, and the input is the rest of what the client sends, in one
// read. Requests are answered by a local handler (no upstream I/O, so every input is
// deterministic): routing, §8.2 checks, body flow control, responses and resets all run.
// Invariants checked after each input: the connection closes cleanly and leaves no open
// connection, request or deadline behind.
//
// The harness reaches the proxy's internals (@testable), which only debug builds allow; a
// release build of the package compiles this target to a stub that says so.
#if DEBUG
@testable import PortcullisProxy
import PortcullisHTTP
import PortcullisIO
#if canImport(Glibc)
import Glibc
#endif

final class FuzzAnswer: LocalHandler {
    func handle(_ request: RequestView, body: UnsafeRawBufferPointer) -> LocalResponse {
        LocalResponse.json(request.path.count % 2 == 0 ? 200 : 404, "{\"bytes\":\(body.count)}")
    }
}

final class FuzzAuthenticator: RequestAuthenticator {
    func authenticate(_ request: RequestView, route: Route, resumption: AuthResumption) -> AuthOutcome { .anonymous }
    func authenticate(_ request: RequestView, route: Route, body: UnsafeRawBufferPointer,
                      resumption: AuthResumption) -> AuthOutcome { .anonymous }
}

enum Harness {
    static let loop = EventLoop(index: 0)
    static let context: ListenerContext = {
        var configuration = ProxyConfiguration(routes: [RouteConfiguration(pathPrefix: "/", upstream: "app", auth: .none)],
                                               upstreams: [])
        configuration.limits.maxBodyBytes = 64 * 1024
        var settings = HTTP2Settings()
        settings.maxConcurrentStreams = 16
        settings.maxHeaderListSize = 4096
        return ListenerContext(loop: loop, mode: .local(FuzzAnswer()), configuration: configuration,
                               routes: RouteTable(configuration.routes, upstreamNames: ["app"]), pools: [],
                               authenticator: FuzzAuthenticator(), accessLog: nil, http2: settings, h2c: true)
    }()
    static let peer = try! SocketAddress(parsing: "127.0.0.1:40000")
    static let preface = Array("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".utf8)

    static func run(_ input: UnsafeRawBufferPointer) {
        var fds: [Int32] = [0, 0]
        guard socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0, &fds) == 0 else { return }
        var bytes = preface
        bytes.append(contentsOf: input)
        loop.queue.sync {
            let socket = StreamSocket(fd: fds[0], loop: loop)
            context.openConnections += 1
            let connection = HTTP2ServerConnection(context: context, socket: socket, peer: peer,
                                                   settings: context.serving.http2!, transport: .h2c)
            bytes.withUnsafeBytes { connection.start(initialBytes: $0) }
            if !connection.isClosed { connection.close() }
            precondition(context.openConnections == 0, "a connection was not accounted for")
            precondition(context.activeRequests == 0, "a request outlived its connection")
            precondition(context.http2Connections.isEmpty, "a closed connection stayed registered")
            precondition(loop.watchedCount == 0, "a deadline outlived its connection")
        }
        close(fds[1])
    }
}

#if PORTCULLIS_FUZZ
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    Harness.run(UnsafeRawBufferPointer(start: data, count: size))
    return 0
}

@_silgen_name("LLVMFuzzerRunDriver")
func LLVMFuzzerRunDriver(_ argc: UnsafeMutablePointer<CInt>, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>,
                         _ callback: @convention(c) (UnsafePointer<UInt8>, Int) -> CInt) -> CInt

/// SwiftPM links an executable's entry point under this name; libFuzzer runs from here.
@_cdecl("PortcullisHTTP2Fuzz_main")
public func fuzzMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    var count = argc
    var arguments = argv
    return LLVMFuzzerRunDriver(&count, &arguments) { data, size in fuzz(data, size) }
}
#else
@main
struct Replay {
    static func main() {
        for path in CommandLine.arguments.dropFirst() {
            guard let file = fopen(path, "rb") else { print("cannot open \(path)"); continue }
            var input: [UInt8] = []
            var chunk = [UInt8](repeating: 0, count: 65536)
            while true {
                let n = fread(&chunk, 1, chunk.count, file)
                if n <= 0 { break }
                input.append(contentsOf: chunk[0..<n])
            }
            fclose(file)
            input.withUnsafeBytes { Harness.run($0) }
            print("\(path): ok (\(input.count) bytes)")
        }
    }
}
#endif
#else
@main
struct Replay {
    static func main() { print("PortcullisHTTP2Fuzz needs a debug build (it uses @testable import)") }
}
#endif
