import CNGHTTP2
import PortcullisCore

/// nghttp2's session callbacks, as C function pointers that find their
/// `HTTP2ServerConnection` through the session's user data: a `CallbackHandles` handle (to the
/// connection's `CallbackAnchor`), so a callback for a connection that is gone finds nil and
/// fails the session, never a freed object.
///
/// Frame accounting for the flood budgets happens here: every frame that costs work but
/// carries no request (SETTINGS, PING, PRIORITY, WINDOW_UPDATE, RST_STREAM, empty DATA)
/// and every protocol error spends from its budget; an overspent budget ends the
/// connection with GOAWAY ENHANCE_YOUR_CALM (see `HTTP2FloodGuard`).
enum HTTP2Callbacks {
    // Frame types and flags (RFC 9113 §6), as they appear in `nghttp2_frame_hd`.
    static let data: UInt8 = 0x0, headers: UInt8 = 0x1, priority: UInt8 = 0x2, rstStream: UInt8 = 0x3
    static let settings: UInt8 = 0x4, ping: UInt8 = 0x6, windowUpdate: UInt8 = 0x8
    static let endStream: UInt8 = 0x1, ack: UInt8 = 0x1

    @inline(__always)
    static func connection(_ user: UnsafeMutableRawPointer?) -> HTTP2ServerConnection? {
        HTTP2ServerConnection.callbackHandles.target(user)?.target
    }

    static let callbackFailure = NGHTTP2_ERR_CALLBACK_FAILURE.rawValue
    static let temporalFailure = NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE.rawValue

    static func install(_ callbacks: OpaquePointer) {
        // A stream past the advertised limit, or after our GOAWAY, is refused by itself
        // (RST_STREAM REFUSED_STREAM, RFC 9113 §5.1.2 and §8.7: the client may retry it) and
        // the connection goes on; its header block is still decoded (HPACK state) and dropped,
        // since no `HTTP2Stream` stands for it.
        nghttp2_session_callbacks_set_on_begin_headers_callback(callbacks) { _, frame, user in
            guard let frame else { return 0 }
            let hd = frame.pointee.hd
            guard hd.type == HTTP2Callbacks.headers && frame.pointee.headers.cat == NGHTTP2_HCAT_REQUEST else { return 0 }
            guard let connection = HTTP2Callbacks.connection(user) else { return HTTP2Callbacks.callbackFailure }
            switch connection.beginStream(hd.stream_id) {
            case .opened: return 0
            case .refused: return 0
            case .abusive: return HTTP2Callbacks.callbackFailure
            }
        }

        nghttp2_session_callbacks_set_on_header_callback(callbacks) { _, frame, name, nameLength, value, valueLength, _, user in
            guard let frame, let name, let value else { return 0 }
            guard let connection = HTTP2Callbacks.connection(user) else { return HTTP2Callbacks.callbackFailure }
            guard let stream = connection.stream(frame.pointee.hd.stream_id) else { return 0 }
            return stream.field(UnsafeRawBufferPointer(start: name, count: nameLength),
                                UnsafeRawBufferPointer(start: value, count: valueLength),
                                trailer: frame.pointee.headers.cat != NGHTTP2_HCAT_REQUEST)
        }

        // A field nghttp2 found invalid (RFC 9113 §8.2: uppercase, connection-specific, bad
        // characters, pseudo-header misuse): the stream is reset with PROTOCOL_ERROR, never
        // forwarded without the field.
        nghttp2_session_callbacks_set_on_invalid_header_callback(callbacks) { _, _, _, _, _, _, _, user in
            guard HTTP2Callbacks.connection(user)?.allow(.protocolErrors) == true else { return HTTP2Callbacks.callbackFailure }
            return HTTP2Callbacks.temporalFailure
        }

        nghttp2_session_callbacks_set_on_invalid_frame_recv_callback(callbacks) { _, frame, _, user in
            return HTTP2Callbacks.connection(user)?.allow(.protocolErrors) == true ? 0 : HTTP2Callbacks.callbackFailure
        }

        nghttp2_session_callbacks_set_on_frame_recv_callback(callbacks) { _, frame, user in
            guard let frame else { return 0 }
            guard let connection = HTTP2Callbacks.connection(user) else { return HTTP2Callbacks.callbackFailure }
            let hd = frame.pointee.hd
            switch hd.type {
            case HTTP2Callbacks.data:
                if hd.length == 0 && hd.flags & HTTP2Callbacks.endStream == 0 {
                    guard connection.allow(.emptyDataFlood) else { return HTTP2Callbacks.callbackFailure }
                }
                if hd.flags & HTTP2Callbacks.endStream != 0 { connection.stream(hd.stream_id)?.requestEnded() }
            case HTTP2Callbacks.headers:
                guard let stream = connection.stream(hd.stream_id) else { return 0 }
                if frame.pointee.headers.cat == NGHTTP2_HCAT_REQUEST {
                    stream.headersComplete(endStream: hd.flags & HTTP2Callbacks.endStream != 0)
                } else if hd.flags & HTTP2Callbacks.endStream != 0 {
                    stream.requestEnded()  // trailers: dropped (as the HTTP/1.1 chunked decoder drops them)
                }
            case HTTP2Callbacks.priority:
                guard connection.allow(.priorityFlood) else { return HTTP2Callbacks.callbackFailure }
            case HTTP2Callbacks.rstStream:
                guard connection.allow(.rapidReset) else { return HTTP2Callbacks.callbackFailure }
            case HTTP2Callbacks.settings:
                if hd.flags & HTTP2Callbacks.ack == 0 { guard connection.allow(.settingsFlood) else { return HTTP2Callbacks.callbackFailure } }
            case HTTP2Callbacks.ping:
                if hd.flags & HTTP2Callbacks.ack == 0 { guard connection.allow(.pingFlood) else { return HTTP2Callbacks.callbackFailure } }
            case HTTP2Callbacks.windowUpdate:
                guard connection.allow(.windowUpdateFlood) else { return HTTP2Callbacks.callbackFailure }
            default:
                break
            }
            return 0
        }

        nghttp2_session_callbacks_set_on_data_chunk_recv_callback(callbacks) { session, _, streamId, bytes, length, user in
            guard let bytes else { return 0 }
            guard let connection = HTTP2Callbacks.connection(user) else { return HTTP2Callbacks.callbackFailure }
            if let stream = connection.stream(streamId) {
                stream.receiveBody(UnsafeRawBufferPointer(start: bytes, count: length))
            } else {
                _ = nghttp2_session_consume_connection(session, length)
            }
            return 0
        }

        nghttp2_session_callbacks_set_on_frame_send_callback(callbacks) { _, frame, user in
            guard let frame else { return 0 }
            let hd = frame.pointee.hd
            if (hd.type == HTTP2Callbacks.data || hd.type == HTTP2Callbacks.headers) && hd.flags & HTTP2Callbacks.endStream != 0 {
                HTTP2Callbacks.connection(user)?.stream(hd.stream_id)?.responseSent()
            }
            return 0
        }

        nghttp2_session_callbacks_set_on_stream_close_callback(callbacks) { _, streamId, _, user in
            HTTP2Callbacks.connection(user)?.streamClosed(streamId)
            return 0
        }
    }

    /// The response body's data source: the stream's queued bytes, copied into the frame.
    static let readBody: nghttp2_data_source_read_callback = { _, streamId, buffer, length, flags, _, user in
        guard let buffer, let flags, let stream = HTTP2Callbacks.connection(user)?.stream(streamId) else {
            return Int(NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE.rawValue)
        }
        return stream.readBody(into: UnsafeMutableRawBufferPointer(start: buffer, count: length), flags: flags)
    }
}
