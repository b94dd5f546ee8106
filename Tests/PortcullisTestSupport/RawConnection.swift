import Foundation
#if canImport(Glibc)
import Glibc
#endif

public struct TestFailure: Error, CustomStringConvertible {
    public let description: String
    public init(_ d: String) { description = d }
}

/// A blocking loopback TCP client for exact bytes (smuggling cases, pipelining).
public final class RawConnection: @unchecked Sendable {
    // @unchecked Sendable: a test hands a connection to one other thread at a time (a writer).
    public let fd: Int32

    /// Bytes read past the last message `readMessage` returned.
    private var pending: [UInt8] = []

    public init(port: UInt16, timeout: Double = 5) throws {
        guard let fd = Loopback.connect(port: port) else { throw TestFailure("connect to \(port) failed") }
        self.fd = fd
        setTimeout(timeout)
    }

    /// Wraps a connected socket (an accepted one); the connection closes it.
    public init(fd: Int32, timeout: Double = 5) {
        self.fd = fd
        setTimeout(timeout)
    }

    private func setTimeout(_ timeout: Double) {
        var tv = timeval(tv_sec: Int(timeout), tv_usec: Int((timeout - Double(Int(timeout))) * 1e6))
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
    }

    public func send(_ text: String) {
        var bytes = Array(text.utf8)
        var sent = 0
        while sent < bytes.count {
            let n = bytes.withUnsafeMutableBytes { Glibc.send(fd, $0.baseAddress! + sent, $0.count - sent, Int32(MSG_NOSIGNAL)) }
            if n <= 0 { return }
            sent += n
        }
    }

    /// Reads until the peer closes or the timeout passes.
    public func readAll() -> String {
        var out = [UInt8]()
        var buf = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = recv(fd, &buf, buf.count, 0)
            if n <= 0 { break }
            out.append(contentsOf: buf[0..<n])
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// Reads until the received text contains `marker`, the peer closes or the timeout passes.
    public func read(until marker: String) -> String {
        var out = [UInt8]()
        var buf = [UInt8](repeating: 0, count: 65536)
        while !String(decoding: out, as: UTF8.self).contains(marker) {
            let n = recv(fd, &buf, buf.count, 0)
            if n <= 0 { break }
            out.append(contentsOf: buf[0..<n])
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// Reads exactly `count` responses framed by Content-Length (no chunked support needed here).
    public func readResponses(_ count: Int) -> [HTTPResponse] {
        var data = [UInt8]()
        var responses: [HTTPResponse] = []
        var buf = [UInt8](repeating: 0, count: 65536)
        while responses.count < count {
            if let (response, used) = HTTPResponse.parse(data) {
                responses.append(response)
                data.removeFirst(used)
                continue
            }
            let n = recv(fd, &buf, buf.count, 0)
            if n <= 0 { break }
            data.append(contentsOf: buf[0..<n])
        }
        return responses
    }

    /// True when the peer closed the connection (read returns 0) within the timeout.
    public func peerClosed() -> Bool {
        var buf = [UInt8](repeating: 0, count: 1024)
        while true {
            let n = recv(fd, &buf, buf.count, 0)
            if n == 0 { return true }
            if n < 0 { return false }
        }
    }

    public func send(bytes: [UInt8]) {
        var sent = 0
        while sent < bytes.count {
            let n = bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress! + sent, $0.count - sent, Int32(MSG_NOSIGNAL)) }
            if n <= 0 { return }
            sent += n
        }
    }

    /// Sends from `bytes` without blocking until the socket has stayed unwritable for
    /// `stall` seconds (the peer stopped taking bytes) or everything left; returns the count sent.
    public func sendUntilStalled(_ bytes: [UInt8], from start: Int = 0, stall: Double = 0.5) -> Int {
        var sent = start
        while sent < bytes.count {
            let n = bytes.withUnsafeBytes {
                Glibc.send(fd, $0.baseAddress! + sent, min(65536, $0.count - sent), Int32(MSG_NOSIGNAL | MSG_DONTWAIT))
            }
            if n > 0 { sent += n; continue }
            if n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) {
                var p = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
                if poll(&p, 1, Int32(stall * 1000)) == 0 { return sent - start }
                continue
            }
            break
        }
        return sent - start
    }

    /// True when nothing arrives within `seconds` (and the peer did not close).
    public func staysQuiet(for seconds: Double) -> Bool {
        if !pending.isEmpty { return false }
        var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        return poll(&p, 1, Int32(seconds * 1000)) == 0
    }

    /// Reads one HTTP/1.x message (a request or a response): the head as text and the
    /// body, decoded when chunked (`rawBody` keeps the bytes as sent). `bodyless` is for
    /// responses to HEAD and 1xx/204/304; `untilClose` reads a response without framing to EOF.
    public func readMessage(bodyless: Bool = false) -> HTTPMessage? {
        while HTTPResponse.findHeadEnd(pending) == nil {
            guard fill() else { return nil }
        }
        let end = HTTPResponse.findHeadEnd(pending)!
        let head = String(decoding: pending[0..<end], as: UTF8.self)
        pending.removeFirst(end + 4)
        var message = HTTPMessage(head: head)
        if bodyless || message.status.map({ $0 < 200 || $0 == 204 || $0 == 304 }) == true {
            return message
        }
        if message.header("transfer-encoding")?.lowercased() == "chunked" {
            var raw: [UInt8] = []
            while true {
                guard let line = takeLine() else { return nil }
                raw += line + [13, 10]
                let sizeText = String(decoding: line, as: UTF8.self).split(separator: ";").first ?? ""
                guard let size = Int(sizeText.trimmingCharacters(in: .whitespaces), radix: 16) else { return nil }
                if size == 0 {
                    while let trailer = takeLine() {  // trailers up to the empty line
                        raw += trailer + [13, 10]
                        if trailer.isEmpty { break }
                    }
                    break
                }
                guard let data = take(size + 2) else { return nil }
                raw += data
                message.body += data[0..<size]
            }
            message.rawBody = raw
        } else if let length = message.header("content-length").flatMap({ Int($0) }) {
            guard let data = take(length) else { return nil }
            message.body = data
            message.rawBody = data
        } else if message.status != nil {
            while fill() {}
            message.body = pending
            message.rawBody = pending
            pending = []
        }
        return message
    }

    /// Reads exactly `count` bytes (fewer when the peer closes or the timeout passes).
    public func read(count: Int) -> [UInt8] {
        take(count) ?? { let all = pending; pending = []; return all }()
    }

    private func fill() -> Bool {
        var buf = [UInt8](repeating: 0, count: 65536)
        let n = recv(fd, &buf, buf.count, 0)
        if n <= 0 { return false }
        pending += buf[0..<n]
        return true
    }

    private func take(_ count: Int) -> [UInt8]? {
        while pending.count < count { guard fill() else { return nil } }
        let out = Array(pending[0..<count])
        pending.removeFirst(count)
        return out
    }

    private func takeLine() -> [UInt8]? {
        while true {
            if let i = pending.indices.dropLast().first(where: { pending[$0] == 13 && pending[$0 + 1] == 10 }) {
                let line = Array(pending[0..<i])
                pending.removeFirst(i + 2)
                return line
            }
            guard fill() else { return nil }
        }
    }

    /// Closes once: a second close could hit a descriptor number another test reopened.
    public func close() {
        guard !isClosed else { return }
        isClosed = true
        Glibc.close(fd)
    }
    private var isClosed = false
    deinit { close() }
}

public struct HTTPResponse {
    public var status: Int
    public var headers: [(String, String)]
    public var body: String

    public func header(_ name: String) -> String? {
        headers.first { $0.0.lowercased() == name.lowercased() }?.1
    }

    public static func parse(_ data: [UInt8]) -> (HTTPResponse, Int)? {
        guard let end = findHeadEnd(data) else { return nil }
        let head = String(decoding: data[0..<end], as: UTF8.self)
        var lines = head.components(separatedBy: "\r\n")
        let statusLine = lines.removeFirst().split(separator: " ")
        guard statusLine.count >= 2, let status = Int(statusLine[1]) else { return nil }
        var headers: [(String, String)] = []
        for line in lines where !line.isEmpty {
            let parts = line.split(separator: ":", maxSplits: 1)
            headers.append((String(parts[0]), parts.count > 1 ? parts[1].trimmingCharacters(in: .whitespaces) : ""))
        }
        let length = Int(headers.first { $0.0.lowercased() == "content-length" }?.1 ?? "0") ?? 0
        let total = end + 4 + length
        guard data.count >= total else { return nil }
        return (HTTPResponse(status: status, headers: headers, body: String(decoding: data[(end + 4)..<total], as: UTF8.self)), total)
    }

    public static func findHeadEnd(_ data: [UInt8]) -> Int? {
        guard data.count >= 4 else { return nil }
        for i in 0...(data.count - 4) where data[i] == 13 && data[i + 1] == 10 && data[i + 2] == 13 && data[i + 3] == 10 {
            return i
        }
        return nil
    }
}

/// One HTTP/1.x message as a test peer read it.
public struct HTTPMessage {
    /// The start line and fields, without the final CRLFCRLF.
    public let head: String
    public var body: [UInt8] = []
    public var rawBody: [UInt8] = []

    public init(head: String) { self.head = head }

    public var startLine: String { head.components(separatedBy: "\r\n")[0] }
    /// The status of a response (nil for a request).
    public var status: Int? {
        guard startLine.hasPrefix("HTTP/") else { return nil }
        let parts = startLine.split(separator: " ")
        return parts.count > 1 ? Int(parts[1]) : nil
    }
    public var fields: [(name: String, value: String)] {
        head.components(separatedBy: "\r\n").dropFirst().compactMap { line in
            guard let colon = line.firstIndex(of: ":") else { return nil }
            return (String(line[..<colon]), line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces))
        }
    }
    /// Every value of `name` (any case), in order.
    public func values(_ name: String) -> [String] {
        fields.filter { $0.name.lowercased() == name.lowercased() }.map(\.value)
    }
    public func header(_ name: String) -> String? { values(name).first }
    public var bodyText: String { String(decoding: body, as: UTF8.self) }
}

/// A scripted upstream on 127.0.0.1: the test accepts each connection and reads and
/// writes exact bytes on it (for behaviour a real app cannot be made to show on cue).
public final class ScriptedUpstream: @unchecked Sendable {
    // @unchecked Sendable: `accepted` is guarded by `lock`.
    public let port: UInt16
    private let listenFD: Int32
    private let lock = NSLock()
    private var accepted: [Int32] = []
    private var total = 0

    public init() throws {
        let listenFD = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        self.listenFD = listenFD
        var one: Int32 = 1
        setsockopt(listenFD, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listenFD, $0, len) } }
        guard bound == 0, listen(listenFD, 64) == 0 else { Glibc.close(listenFD); throw TestFailure("cannot listen on 127.0.0.1") }
        _ = withUnsafeMutablePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(listenFD, $0, &len) } }
        port = UInt16(bigEndian: addr.sin_port)
        let fd = listenFD
        Thread.detachNewThread { [weak self] in
            while true {
                let client = Glibc.accept(fd, nil, nil)
                guard client >= 0 else { return }
                guard let self else { Glibc.close(client); return }
                self.lock.lock()
                self.accepted.append(client)
                self.total += 1
                self.lock.unlock()
            }
        }
    }

    /// Connections accepted so far.
    public var acceptedCount: Int { lock.lock(); defer { lock.unlock() }; return total }

    /// The next accepted connection, waiting up to `timeout` seconds.
    public func accept(timeout: Double = 5) throws -> RawConnection {
        let end = Date().addingTimeInterval(timeout)
        while Date() < end {
            lock.lock()
            if !accepted.isEmpty {
                let fd = accepted.removeFirst()
                lock.unlock()
                return RawConnection(fd: fd)
            }
            lock.unlock()
            usleep(2_000)
        }
        throw TestFailure("the gateway opened no connection to the upstream within \(timeout) s")
    }

    deinit {
        shutdown(listenFD, Int32(SHUT_RDWR))
        Glibc.close(listenFD)
        lock.lock()
        for fd in accepted { Glibc.close(fd) }
        lock.unlock()
    }
}
