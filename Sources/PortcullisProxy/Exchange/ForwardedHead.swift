import PortcullisCore
import PortcullisHTTP

/// The one place that writes the HTTP/1.1 request head an upstream receives, for every
/// client protocol: the request line with the normalized (and prefix-stripped) path, the
/// client's fields minus hop-by-hop, framing and identity fields (see `HeaderPolicy`),
/// exactly one `Host`, the body's framing, a WebSocket upgrade when one was asked for,
/// `X-Forwarded-*` and `X-Request-Id`, the upstream's `request_headers`, then the grant's
/// identity headers.
enum ForwardedHead {
    /// Writes the head into `buffer` (cleared first) and the request id into `requestId`.
    /// Returns true when a WebSocket upgrade was forwarded.
    ///
    /// The upstream gets the upstream URL's authority as `Host` with `host_header: upstream`
    /// (the client's stays in X-Forwarded-Host), and for an HTTP/1.0 request that had
    /// none, so it always gets exactly one Host.
    static func build(into buffer: inout ByteBuffer, _ request: RequestView, path: Substring, grant: AuthGrant?,
                      pool: UpstreamPool, context: ListenerContext, serving: ListenerServing, scheme: StaticString, peerText: String,
                      trace: RequestTrace?, requestId: inout ByteBuffer) -> Bool {
        buffer.clear()
        let bytes = request.bytes
        let trusted = serving.isTrusted(request.peer)
        let policy = serving.policy

        buffer.append(UnsafeRawBufferPointer(rebasing: bytes[request.methodRange]))
        buffer.append(" ")
        buffer.append(path)
        if let query = request.query {
            buffer.append("?")
            buffer.append(query)
        }
        buffer.append(" HTTP/1.1\r\n")

        // Fields named by Connection (other than the protected ones) are dropped too.
        var connectionTokens: [Range<Int>] = []
        for field in request.fields where HTTPBytes.equalsCaseInsensitive(bytes, field.name, "connection") {
            HTTPBytes.forEachToken(bytes, field.value) { token in
                if !policy.protectedFromConnection(bytes, token) { connectionTokens.append(token) }
            }
        }

        var forwardedFor: Range<Int>? = nil
        var forwardedProto: Range<Int>? = nil
        var forwardedHost: Range<Int>? = nil
        var clientRequestId: Range<Int>? = nil
        let dropAuthorization = grant?.dropAuthorization ?? false
        let replaceCookie = grant?.replacementCookie != nil

        fieldLoop: for field in request.fields {
            switch policy.classify(bytes, field.name) {
            case .drop:
                continue fieldLoop
            case .forwardedFor:
                if trusted { forwardedFor = field.value }
                continue fieldLoop
            case .forwardedProto:
                if trusted { forwardedProto = field.value }
                continue fieldLoop
            case .forwardedHost:
                if trusted { forwardedHost = field.value }
                continue fieldLoop
            case .requestId:
                // A trusted proxy's id is kept when it looks like one; anything else (too
                // long, quotes, control bytes: an injection into the logs) is replaced.
                if trusted && isAcceptableRequestId(UnsafeRawBufferPointer(rebasing: bytes[field.value])) {
                    clientRequestId = field.value
                }
                continue fieldLoop
            case .forwarded:
                if !trusted { continue fieldLoop }
            case .copy:
                if dropAuthorization && HTTPBytes.equalsCaseInsensitive(bytes, field.name, "authorization") { continue fieldLoop }
                if replaceCookie && HTTPBytes.equalsCaseInsensitive(bytes, field.name, "cookie") { continue fieldLoop }
            }
            for token in connectionTokens where token.count == field.name.count {
                if sameNameIgnoringCase(bytes, field.name, token) { continue fieldLoop }
            }
            buffer.append(UnsafeRawBufferPointer(rebasing: bytes[field.name]))
            buffer.append(": ")
            buffer.append(UnsafeRawBufferPointer(rebasing: bytes[field.value]))
            buffer.append("\r\n")
        }

        // Exactly one Host: the request's authority (an absolute-form target wins over the
        // Host field, RFC 9112 §3.2.2; `:authority` on HTTP/2); an HTTP/1.0 request without
        // either gets the upstream's (as nginx sends its upstream's name).
        buffer.append("host: ")
        // Normalized (`Authority`: lower case, no trailing dot, no leading zeros in the port),
        // the host routing matched; read once for Host and X-Forwarded-Host. Every authority
        // was checked on arrival, so a nil here means there is none.
        let authority = request.authority.flatMap { Authority.scan(bytes, $0) }
        if !pool.sendsUpstreamHost, let authority {
            Authority.write(bytes, authority) { buffer.append($0) }
        } else {
            buffer.append(pool.authority)
        }
        buffer.append("\r\n")
        switch request.framing {
        case .contentLength(let n):
            buffer.append("content-length: ")
            buffer.appendDecimal(n)
            buffer.append("\r\n")
        case .chunked:
            buffer.append("transfer-encoding: chunked\r\n")
        case .none, .untilClose:
            break
        }
        // Only a WebSocket handshake may be upgraded (the parser's decision, which the
        // authenticator followed too): any other protocol (h2c above all, which would leave
        // the gateway tunnelling requests it never inspects) is dropped and the request goes
        // on as plain HTTP/1.1; a list naming websocket among others keeps websocket only.
        let upgradeForwarded = request.webSocketUpgrade
        if upgradeForwarded { buffer.append("connection: upgrade\r\nupgrade: websocket\r\n") }
        buffer.append("x-forwarded-for: ")
        if let forwardedFor {
            buffer.append(UnsafeRawBufferPointer(rebasing: bytes[forwardedFor]))
            buffer.append(", ")
        }
        buffer.append(peerText)
        buffer.append("\r\nx-forwarded-proto: ")
        if let forwardedProto { buffer.append(UnsafeRawBufferPointer(rebasing: bytes[forwardedProto])) }
        else { buffer.append(scheme) }
        if let host = forwardedHost {
            buffer.append("\r\nx-forwarded-host: ")
            buffer.append(UnsafeRawBufferPointer(rebasing: bytes[host]))  // a trusted proxy's, as it sent it
        } else if let authority {
            buffer.append("\r\nx-forwarded-host: ")
            Authority.write(bytes, authority) { buffer.append($0) }
        }
        buffer.append("\r\nx-request-id: ")
        requestId.clear()
        if let clientRequestId {
            requestId.append(UnsafeRawBufferPointer(rebasing: bytes[clientRequestId]))
        } else {
            context.nextRequestId(into: &requestId)
        }
        buffer.append(requestId.readable)
        buffer.append("\r\n")
        if let trace {
            // The gateway's span is the upstream's parent (W3C Trace Context, version 00).
            buffer.append("traceparent: 00-")
            buffer.appendHexID(trace.traceID.bytes)
            buffer.append("-")
            buffer.appendHexID(trace.spanID.bytes)
            buffer.append(trace.sampled ? "-01\r\n" : "-00\r\n")
            if let state = trace.traceState, !state.isEmpty {
                buffer.append("tracestate: ")
                appendFieldValue(state, to: &buffer)
                buffer.append("\r\n")
            }
        }
        if !pool.fixedHeaderLines.isEmpty {
            pool.fixedHeaderLines.withUnsafeBytes { buffer.append($0) }
        }
        if let grant {
            if let cookie = grant.replacementCookie, !cookie.isEmpty {
                buffer.append("cookie: ")
                appendFieldValue(cookie, to: &buffer)
                buffer.append("\r\n")
            }
            for (name, value) in grant.headers {
                buffer.append(name)
                buffer.append(": ")
                appendFieldValue(value, to: &buffer)
                buffer.append("\r\n")
            }
        }
        buffer.append("\r\n")
        return upgradeForwarded
    }

    /// 1 to 128 bytes of letters, digits and `-_.:/+=` (UUIDs, ULIDs, base64, trace ids).
    static func isAcceptableRequestId(_ value: UnsafeRawBufferPointer) -> Bool {
        guard !value.isEmpty, value.count <= 128 else { return false }
        return value.allSatisfy { b in
            switch b {
            case 48...57, 65...90, 97...122, UInt8(ascii: "-"), UInt8(ascii: "_"), UInt8(ascii: "."),
                 UInt8(ascii: ":"), UInt8(ascii: "/"), UInt8(ascii: "+"), UInt8(ascii: "="):
                return true
            default:
                return false
            }
        }
    }

    /// Appends an injected value; control characters (claims come from tokens)
    /// become spaces so no value can split the head.
    ///
    /// One pass over the value's contiguous UTF-8 (a native string's own storage): checked
    /// and copied as bytes. Iterating `String.UTF8View` byte by byte cost about 1 µs per
    /// request for a 400-byte identity assertion (perf: the hottest symbol of the gateway).
    private static func appendFieldValue(_ value: String, to buffer: inout ByteBuffer) {
        let appended: Bool? = value.utf8.withContiguousStorageIfAvailable { bytes in
            var clean = true
            for byte in bytes where byte < 0x20 || byte == 0x7F { clean = false; break }
            guard clean else { return false }
            buffer.append(UnsafeRawBufferPointer(bytes))
            return true
        }
        if appended == true { return }
        buffer.append(String(decoding: value.utf8.map { $0 < 0x20 || $0 == 0x7F ? 0x20 : $0 }, as: UTF8.self))
    }

    private static func sameNameIgnoringCase(_ bytes: UnsafeRawBufferPointer, _ a: Range<Int>, _ b: Range<Int>) -> Bool {
        guard a.count == b.count else { return false }
        for i in 0..<a.count where bytes[a.lowerBound + i] | 0x20 != bytes[b.lowerBound + i] | 0x20 { return false }
        return true
    }
}
