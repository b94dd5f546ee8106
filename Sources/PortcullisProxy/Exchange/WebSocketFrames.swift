/// Follows one direction of a WebSocket connection (RFC 6455 §5.2) frame by frame, to know
/// where a frame ends: the gateway relays a tunnel's bytes untouched, but to close it with
/// 1001 at shutdown it must put its Close frame between two frames, never inside one.
///
/// Only the framing is read (FIN/opcode byte, length, mask key); payloads are skipped, not
/// looked at, so the cost is per frame, not per byte. Masked and unmasked frames are both
/// followed (the MASK bit says which), so the same cursor serves both directions.
struct WebSocketFrameCursor {
    private enum Stage {
        case start                       // the next byte begins a frame
        case length                      // MASK bit and 7-bit length
        case extendedLength(Int)         // this many length bytes still to read
        case maskKey(Int)                // this many mask-key bytes still to read
        case payload                     // `payloadLeft` bytes to skip
    }

    private var stage = Stage.start
    private var opcode: UInt8 = 0
    private var masked = false
    private var payloadLeft: UInt64 = 0
    /// Close frames (opcode 8) that ended so far.
    private(set) var closeFrames = 0

    /// True between two frames: a frame may be inserted here.
    var atBoundary: Bool {
        if case .start = stage { return true }
        return false
    }

    /// Follows `bytes`; with `stopAtBoundary`, stops as soon as a frame ends (or at once if
    /// the stream is between frames). Returns how many bytes were followed.
    @discardableResult
    mutating func advance(_ bytes: UnsafeRawBufferPointer, stopAtBoundary: Bool = false) -> Int {
        var i = 0
        if stopAtBoundary && atBoundary { return 0 }
        while i < bytes.count {
            switch stage {
            case .start:
                opcode = bytes[i] & 0x0F
                i += 1
                stage = .length
            case .length:
                let byte = bytes[i]
                i += 1
                masked = byte & 0x80 != 0
                payloadLeft = 0
                switch byte & 0x7F {
                case 126: stage = .extendedLength(2)
                case 127: stage = .extendedLength(8)
                case let n:
                    payloadLeft = UInt64(n)
                    afterLength()
                }
            case .extendedLength(let left):
                payloadLeft = payloadLeft << 8 | UInt64(bytes[i])
                i += 1
                if left > 1 { stage = .extendedLength(left - 1) } else { afterLength() }
            case .maskKey(let left):
                let take = min(left, bytes.count - i)
                i += take
                if take == left { afterMaskKey() } else { stage = .maskKey(left - take) }
            case .payload:
                let take = Int(min(payloadLeft, UInt64(bytes.count - i)))
                i += take
                payloadLeft -= UInt64(take)
                if payloadLeft == 0 { frameEnded() }
            }
            if stopAtBoundary && atBoundary { return i }
        }
        return i
    }

    private mutating func afterLength() {
        if masked { stage = .maskKey(4) } else { afterMaskKey() }
    }

    private mutating func afterMaskKey() {
        if payloadLeft == 0 { frameEnded() } else { stage = .payload }
    }

    private mutating func frameEnded() {
        if opcode == 0x8 { closeFrames += 1 }
        stage = .start
    }
}

/// The Close frames the gateway sends when it goes away (status 1001, RFC 6455 §7.4.1).
enum WebSocketGoingAway {
    static let reason = "going away"

    /// Server to client: unmasked (§5.1).
    static var toClient: [UInt8] {
        [0x88, UInt8(2 + reason.utf8.count), 0x03, 0xE9] + Array(reason.utf8)
    }

    /// Client to server (the gateway is the upstream's client): masked with a fresh key.
    static func toUpstream() -> [UInt8] {
        var random = SystemRandomNumberGenerator()
        let key = withUnsafeBytes(of: random.next() as UInt32) { Array($0) }
        let payload = [0x03, 0xE9] + Array(reason.utf8)
        var frame: [UInt8] = [0x88, 0x80 | UInt8(payload.count)] + key
        for (i, byte) in payload.enumerated() { frame.append(byte ^ key[i & 3]) }
        return frame
    }
}
