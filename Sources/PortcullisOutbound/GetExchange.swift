import PortcullisCore
import PortcullisHTTP
import PortcullisIO
import PortcullisTLS

/// One GET, from connect to the last body byte, as a state machine on one
/// event loop. Nothing here blocks: connect, write and read are driven by the
/// socket's Dispatch sources, timeouts by the loop's deadline ticker, and name
/// resolution (when needed) runs on the resolver's own queue.
///
/// Lifetime: the socket's handlers, the loop's deadline table and a pending
/// resolution hold the exchange; `finish` clears all three, so it is freed
/// once the completion has run.
final class GetExchange: DeadlineTarget, @unchecked Sendable {
    // @unchecked Sendable: every member is touched only on `loop.queue`; the
    // only cross-queue hop (resolution) re-enters through `loop.execute`.

    /// `tunneling`: through a proxy to an `https://` URL, the `CONNECT`'s answer is awaited.
    private enum Phase { case resolving, connecting, tunneling, reading, finished }

    private let url: FetchURL
    private let options: HTTPFetchOptions
    private let loop: EventLoop
    private var completion: ((Result<HTTPFetchResponse, HTTPFetchError>) -> Void)?

    private var phase = Phase.resolving
    private var addresses: [SocketAddress] = []
    private var addressIndex = 0
    private var lastConnectError: HTTPFetchError?
    private var socket: StreamSocket?
    private var outbound = ByteBuffer()
    /// `https://`: the socket is secured by the one TLS layer (PortcullisTLS).
    private let tlsContext: TLSClientContext?

    private var inbound: [UInt8] = []
    private var headParser = ResponseHeadParser()
    private var status = 0
    private var headers: [(name: String, value: String)] = []
    private var framing: BodyFraming?
    private var remaining = 0
    private var chunked: ChunkedDecoder
    private var body: [UInt8] = []

    private var totalDeadline: UInt64 = 0
    private var connectDeadline: UInt64 = 0
    var deadline: UInt64 { connectDeadline == 0 ? totalDeadline : min(connectDeadline, totalDeadline) }

    /// A POST's body (JSON) and extra header fields; nil: a GET.
    private let post: (body: [UInt8], headers: [(name: String, value: String)])?
    /// The egress proxy (`HTTPS_PROXY`…) this request goes through; nil: direct.
    private let proxy: EgressProxy?
    /// Where the socket connects: the proxy, or the URL's host.
    private var connectHost: String { proxy?.host ?? url.host }
    private var connectPort: UInt16 { proxy?.port ?? url.port }

    init(url: FetchURL, options: HTTPFetchOptions, loop: EventLoop, tls: TLSClientContext?, proxy: EgressProxy? = nil,
         post: (body: [UInt8], headers: [(name: String, value: String)])? = nil,
         completion: @escaping (Result<HTTPFetchResponse, HTTPFetchError>) -> Void) {
        self.url = url
        self.post = post
        self.proxy = proxy
        self.tlsContext = tls
        self.options = options
        self.loop = loop
        self.completion = completion
        self.chunked = ChunkedDecoder(limits: HTTPLimits(maxBodyBytes: options.maxBodyBytes))
    }

    /// On `loop.queue`.
    func start() {
        loop.assertInLoop()
        totalDeadline = loop.now() &+ Self.nanoseconds(options.totalTimeout)
        loop.watchDeadline(self)
        if let literal = HostResolver.literal(connectHost, port: connectPort) {
            addresses = literal
            connectNext()
            return
        }
        HostResolver.resolve(connectHost, port: connectPort) { [self] result in
            loop.execute { [self] in
                guard phase == .resolving else { return }  // timed out meanwhile
                switch result {
                case .success(let found): addresses = found; connectNext()
                case .failure(let error): finish(.failure(.resolutionFailed(host: error.host, reason: error.reason)))
                }
            }
        }
    }

    // MARK: Connect

    private func connectNext() {
        guard addressIndex < addresses.count else {
            finish(.failure(lastConnectError ?? .connectFailed(address: proxy.map { "\($0) (proxy)" } ?? url.hostHeader, reason: "no address")))
            return
        }
        let address = addresses[addressIndex]
        addressIndex += 1
        phase = .connecting
        switch Connector.start(to: address, on: loop) {
        case .connected(let socket):
            self.socket = socket
            connected()
        case .inProgress(let socket):
            self.socket = socket
            connectDeadline = loop.now() &+ Self.nanoseconds(options.connectTimeout)
            socket.waitUntilWritable { [self] in connectWritable(address) }
        case .failed(let error):
            lastConnectError = .connectFailed(address: address.description, reason: error.description)
            connectNext()
        }
    }

    private func connectWritable(_ address: SocketAddress) {
        guard phase == .connecting, let socket else { return }
        socket.stopWaitingForWritable()
        if let error = Connector.finishConnect(socket) {
            socket.close()
            self.socket = nil
            connectDeadline = 0
            lastConnectError = .connectFailed(address: address.description, reason: error.description)
            connectNext()
            return
        }
        connected()
    }

    private func connected() {
        connectDeadline = 0
        guard let socket else { return }
        if let proxy, url.scheme == .https {
            // A tunnel first: CONNECT, then TLS with the target through it.
            var connect = ByteBuffer()
            connect.append("CONNECT ")
            connect.append(url.hostHeaderWithPort)
            connect.append(" HTTP/1.1\r\nHost: ")
            connect.append(url.hostHeaderWithPort)
            connect.append("\r\nUser-Agent: ")
            connect.append(options.userAgent)
            if let authorization = proxy.authorization {
                connect.append("\r\nProxy-Authorization: ")
                connect.append(authorization)
            }
            connect.append("\r\n\r\n")
            phase = .tunneling
            outbound.append(connect.readable)
            socket.startReading { [self] in readable() }
            flushOutbound()
            return
        }
        socket.startReading { [self] in readable() }
        sendRequest()
    }

    /// The proxy's answer to CONNECT: a 2xx opens the tunnel; anything else ends the fetch,
    /// naming the proxy and its status.
    private func tunnelAnswer(_ bytes: UnsafeRawBufferPointer) {
        inbound.append(contentsOf: bytes)
        guard let end = inbound.withUnsafeBytes({ Self.headEnd($0) }) else {
            if inbound.count > 16 * 1024 { finish(.failure(.malformedResponse(url: url.description, reason: "the proxy's CONNECT answer is too long"))) }
            return
        }
        let line = String(decoding: inbound.prefix { $0 != 0x0D && $0 != 0x0A }, as: UTF8.self)
        let parts = line.split(separator: " ")
        guard parts.count >= 2, parts[0].hasPrefix("HTTP/1."), let status = Int(parts[1]), (200..<300).contains(status) else {
            finish(.failure(.connectFailed(address: "\(proxy.map(\.description) ?? "-") (proxy)",
                                           reason: "the proxy answered CONNECT \(url.hostHeaderWithPort) with '\(line)'")))
            return
        }
        guard inbound.count == end else {
            finish(.failure(.malformedResponse(url: url.description, reason: "bytes from the proxy after its CONNECT answer")))
            return
        }
        inbound = []
        sendRequest()
    }

    /// The index just past the first blank line ("\r\n\r\n"), if any.
    private static func headEnd(_ p: UnsafeRawBufferPointer) -> Int? {
        guard p.count >= 4 else { return nil }
        for i in 0...(p.count - 4) where p[i] == 0x0D && p[i + 1] == 0x0A && p[i + 2] == 0x0D && p[i + 3] == 0x0A { return i + 4 }
        return nil
    }

    /// The request itself (over the tunnel when there is one; to an HTTP proxy in absolute form).
    private func sendRequest() {
        guard let socket else { return }
        var request = ByteBuffer()
        request.append(post == nil ? "GET " : "POST ")
        if proxy != nil && url.scheme == .http {
            request.append("http://")
            request.append(url.hostHeaderWithPort)
        }
        request.append(url.pathAndQuery)
        request.append(" HTTP/1.1\r\nHost: ")
        request.append(url.hostHeader)
        request.append("\r\nUser-Agent: ")
        request.append(options.userAgent)
        request.append("\r\nAccept: application/json, */*;q=0.5\r\nConnection: close\r\n")
        if let authorization = proxy?.authorization, url.scheme == .http {
            request.append("Proxy-Authorization: ")
            request.append(authorization)
            request.append("\r\n")
        }
        if let post {
            request.append("Content-Type: application/json\r\nContent-Length: ")
            request.append(String(post.body.count))
            request.append("\r\n")
            for field in post.headers {
                request.append(field.name)
                request.append(": ")
                request.append(field.value)
                request.append("\r\n")
            }
        }
        request.append("\r\n")
        if let post { post.body.withUnsafeBytes { request.append($0) } }
        if let tlsContext {
            // The one TLS layer: the socket carries plaintext from here on, and the
            // request's first write drives the handshake.
            do {
                try TLSSession.secureClient(socket, context: tlsContext, serverName: url.host)
            } catch {
                finish(.failure(.tlsFailed(url: url.description, reason: "\(error)")))
                return
            }
        }
        phase = .reading
        outbound.append(request.readable)
        flushOutbound()
    }

    /// Sends queued bytes; waits for writability when the kernel pushes back.
    private func flushOutbound() {
        guard phase != .finished, let socket else { return }
        switch socket.flush(&outbound) {
        case .drained:
            break
        case .pending:
            socket.waitUntilWritable { [self] in flushOutbound() }
        case .failed:
            finish(.failure((socket.security as? TLSSession)?.lastFailure.map { .tlsFailed(url: url.description, reason: $0.description) }
                            ?? .connectionLost(url: url.description, reason: "write failed")))
        }
    }

    // MARK: Read

    private func readable() {
        guard phase == .reading || phase == .tunneling, let socket else { return }
        let scratch = loop.readScratch
        while phase == .reading || phase == .tunneling {
            let tunneling = phase == .tunneling
            switch socket.read(into: scratch) {
            case .bytes(let n):
                if tunneling {
                    tunnelAnswer(UnsafeRawBufferPointer(rebasing: scratch[0..<n]))
                } else {
                    received(UnsafeRawBufferPointer(rebasing: scratch[0..<n]))
                }
                if n < scratch.count { return }
            case .wouldBlock:
                return
            case .endOfFile:
                endOfInput()
                return
            case .failed(let code):
                finish(.failure(failure(reading: code)))
                return
            }
        }
    }

    /// A read failure: the TLS reason when the handshake or a record failed.
    private func failure(reading code: Int32) -> HTTPFetchError {
        if let tls = socket?.security as? TLSSession, let reason = tls.lastFailure {
            return .tlsFailed(url: url.description, reason: reason.description)
        }
        return .connectionLost(url: url.description, reason: IOError("read", errno: code).description)
    }

    private func received(_ bytes: UnsafeRawBufferPointer) {
        guard framing == nil else { receivedBody(bytes); return }
        inbound.append(contentsOf: bytes)
        while framing == nil {
            var head = ResponseHead()
            let parsed = inbound.withUnsafeBytes { headParser.parse($0, requestMethod: .get, into: &head) }
            switch parsed {
            case .incomplete:
                return
            case .failure(let error):
                finish(.failure(.malformedResponse(url: url.description, reason: error.reason)))
                return
            case .complete:
                let rest = Array(inbound[head.headLength...])
                if head.status < 200 {  // 1xx: an interim head, the real one follows
                    inbound = rest
                    headParser.reset()
                    continue
                }
                status = head.status
                headers = inbound.withUnsafeBytes { p in
                    head.fields.map { (Self.text(p, $0.name), Self.text(p, $0.value)) }
                }
                inbound = []
                framing = head.framing
                switch head.framing {
                case .none:
                    finish(.success(response))
                    return
                case .contentLength(let length):
                    guard length <= options.maxBodyBytes else {
                        finish(.failure(.bodyTooLarge(url: url.description, limit: options.maxBodyBytes)))
                        return
                    }
                    remaining = length
                    body.reserveCapacity(length)
                    if length == 0 { finish(.success(response)); return }
                case .chunked, .untilClose:
                    break
                }
                if !rest.isEmpty { rest.withUnsafeBytes { receivedBody($0) } }
            }
        }
    }

    private func receivedBody(_ bytes: UnsafeRawBufferPointer) {
        guard phase == .reading, let framing else { return }
        switch framing {
        case .none:
            return
        case .contentLength:
            let take = min(remaining, bytes.count)
            body.append(contentsOf: UnsafeRawBufferPointer(rebasing: bytes[0..<take]))
            remaining -= take
            if remaining == 0 { finish(.success(response)) }
        case .chunked:
            var consumed = 0
            switch chunked.decode(bytes, consumed: &consumed, onData: { body.append(contentsOf: $0) }) {
            case .needMore:
                return
            case .done:
                finish(.success(response))
            case .failure(let error) where error.status == 413:
                finish(.failure(.bodyTooLarge(url: url.description, limit: options.maxBodyBytes)))
            case .failure(let error):
                finish(.failure(.malformedResponse(url: url.description, reason: error.reason)))
            }
        case .untilClose:
            guard body.count + bytes.count <= options.maxBodyBytes else {
                finish(.failure(.bodyTooLarge(url: url.description, limit: options.maxBodyBytes)))
                return
            }
            body.append(contentsOf: bytes)
        }
    }

    private func endOfInput() {
        if phase == .tunneling {
            finish(.failure(.connectFailed(address: "\(proxy.map(\.description) ?? "-") (proxy)",
                                           reason: "the proxy closed the connection before answering CONNECT")))
            return
        }
        guard phase == .reading else { return }
        if let socket, socket.security != nil, !socket.isHandshakeComplete {
            finish(.failure(.tlsFailed(url: url.description, reason: "connection closed during the handshake")))
            return
        }
        switch framing {
        case .untilClose?:
            finish(.success(response))
        case nil:
            finish(.failure(.connectionLost(url: url.description, reason: "closed before the response head was complete")))
        default:
            finish(.failure(.connectionLost(url: url.description, reason: "closed before the body was complete")))
        }
    }

    // MARK: End

    private var response: HTTPFetchResponse { HTTPFetchResponse(status: status, headers: headers, body: body) }

    func deadlineExpired(now: UInt64) {
        guard phase != .finished else { return }
        let connectExpired = phase == .connecting && connectDeadline != 0 && connectDeadline <= now
        let address = addresses.isEmpty ? url.hostHeader : addresses[addressIndex - 1].description
        if now >= totalDeadline {
            finish(.failure(connectExpired ? .connectTimedOut(address: address, seconds: options.connectTimeout)
                                           : .timedOut(url: url.description, seconds: options.totalTimeout)))
            return
        }
        guard connectExpired else { return }
        // Only this address's connect ran out: try the next one, if any.
        socket?.close()
        socket = nil
        connectDeadline = 0
        lastConnectError = .connectTimedOut(address: address, seconds: options.connectTimeout)
        connectNext()
    }

    private func finish(_ result: Result<HTTPFetchResponse, HTTPFetchError>) {
        guard phase != .finished else { return }
        phase = .finished
        loop.unwatchDeadline(self)
        socket?.close()
        socket = nil
        inbound = []
        let completion = self.completion
        self.completion = nil
        completion?(result)
    }

    private static func text(_ p: UnsafeRawBufferPointer, _ range: Range<Int>) -> String {
        String(decoding: UnsafeRawBufferPointer(rebasing: p[range]), as: UTF8.self)
    }

    private static func nanoseconds(_ seconds: Double) -> UInt64 { UInt64(max(0, seconds) * 1e9) }
}
