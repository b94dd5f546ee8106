import Testing
@testable import PortcullisProxy

/// The cursor that finds frame boundaries in a tunnel (for the 1001 Close at shutdown):
/// every length form, masked and unmasked, empty payloads, and every way a stream can be
/// cut into reads.
@Suite struct WebSocketFrameCursorTests {
    /// One frame: FIN + `opcode`, the shortest length form, an optional mask key.
    static func frame(_ opcode: UInt8, _ payloadCount: Int, masked: Bool) -> [UInt8] {
        var out: [UInt8] = [0x80 | opcode]
        let maskBit: UInt8 = masked ? 0x80 : 0
        if payloadCount < 126 {
            out.append(maskBit | UInt8(payloadCount))
        } else if payloadCount <= 0xFFFF {
            out += [maskBit | 126, UInt8(payloadCount >> 8), UInt8(payloadCount & 0xFF)]
        } else {
            out.append(maskBit | 127)
            for shift in stride(from: 56, through: 0, by: -8) { out.append(UInt8((payloadCount >> shift) & 0xFF)) }
        }
        if masked { out += [0x11, 0x22, 0x33, 0x44] }
        out += [UInt8](repeating: 0x5A, count: payloadCount)
        return out
    }

    static let frames: [[UInt8]] = [
        frame(0x1, 5, masked: false), frame(0x2, 0, masked: true), frame(0x9, 0, masked: false),
        frame(0x2, 300, masked: true), frame(0x1, 125, masked: false), frame(0x1, 126, masked: false),
        frame(0x2, 70_000, masked: false), frame(0x8, 2, masked: true), frame(0x1, 1, masked: true),
    ]

    /// Offsets at which a frame ends in the concatenation of `frames`.
    static var ends: [Int] {
        var at = 0
        return frames.map { at += $0.count; return at }
    }

    @Test(arguments: [1, 2, 3, 7, 64, 4096, 100_000])
    func boundariesAreFoundHoweverTheStreamIsCut(readSize: Int) {
        let stream = Self.frames.flatMap { $0 }
        var cursor = WebSocketFrameCursor()
        var found: [Int] = []
        var offset = 0
        while offset < stream.count {
            let end = min(offset + readSize, stream.count)
            var piece = offset
            while piece < end {
                if cursor.atBoundary {
                    // Between frames: one byte starts the next one.
                    piece += stream[piece..<(piece + 1)].withUnsafeBytes { cursor.advance($0, stopAtBoundary: false) }
                    continue
                }
                piece += stream[piece..<end].withUnsafeBytes { cursor.advance($0, stopAtBoundary: true) }
                if cursor.atBoundary { found.append(piece) }
            }
            offset = end
        }
        #expect(found == Self.ends)
        #expect(cursor.atBoundary)
        #expect(cursor.closeFrames == 1)
    }

    /// Without stopping, a whole stream in one call ends between frames with the close counted.
    @Test func oneCallFollowsAWholeStream() {
        let stream = Self.frames.flatMap { $0 }
        var cursor = WebSocketFrameCursor()
        let used = stream.withUnsafeBytes { cursor.advance($0) }
        #expect(used == stream.count && cursor.atBoundary && cursor.closeFrames == 1)
    }

    @Test func stoppingAtBoundariesVisitsEveryFrameEnd() {
        let stream = Self.frames.flatMap { $0 }
        var cursor = WebSocketFrameCursor()
        var found: [Int] = []
        var offset = 0
        while offset < stream.count {
            if cursor.atBoundary {
                // Between frames, one byte starts the next frame.
                offset += stream[offset..<(offset + 1)].withUnsafeBytes { cursor.advance($0) }
                continue
            }
            offset += stream[offset...].withUnsafeBytes { cursor.advance($0, stopAtBoundary: true) }
            found.append(offset)
        }
        #expect(found == Self.ends)
    }

    @Test func midFrameIsNotABoundary() {
        var cursor = WebSocketFrameCursor()
        let frame = Self.frame(0x1, 10, masked: true)
        frame[0..<8].withUnsafeBytes { _ = cursor.advance($0) }  // head, mask key, 2 of 10 bytes
        #expect(!cursor.atBoundary)
        let used = frame[8...].withUnsafeBytes { cursor.advance($0, stopAtBoundary: true) }
        #expect(used == 8 && cursor.atBoundary)
        #expect(cursor.closeFrames == 0)
    }

    @Test func theGatewaysCloseFramesCarry1001() {
        let toClient = WebSocketGoingAway.toClient
        #expect(toClient[0] == 0x88 && toClient[1] & 0x80 == 0)
        #expect(toClient[2] == 0x03 && toClient[3] == 0xE9)  // 1001
        let toUpstream = WebSocketGoingAway.toUpstream()
        #expect(toUpstream[0] == 0x88 && toUpstream[1] & 0x80 != 0)
        let key = Array(toUpstream[2..<6])
        let payload = toUpstream[6...].enumerated().map { $0.element ^ key[$0.offset & 3] }
        #expect(payload[0] == 0x03 && payload[1] == 0xE9)
        #expect(String(decoding: payload[2...], as: UTF8.self) == WebSocketGoingAway.reason)
        for frame in [toClient, toUpstream] {
            var cursor = WebSocketFrameCursor()
            frame.withUnsafeBytes { _ = cursor.advance($0) }
            #expect(cursor.atBoundary && cursor.closeFrames == 1)
        }
    }
}
