import Dispatch
import PortcullisRedis
import PortcullisTLS

/// Session-ticket keys shared by every instance through Redis, so a client resumes
/// on whichever instance it reaches: `portcullis:tls:ticket-key:<epoch>` holds the
/// 80-byte key of one rotation period, hex-encoded. The first instance to need an
/// epoch's key writes a random one with `SET … NX EX`; everyone then `GET`s the winner.
/// Keys live three periods (the longest a ticket is accepted) and are secrets: Redis
/// is trusted like it is for revocations.
///
/// Threading: `key(for:)` blocks (bounded by `timeout`) and is only called by
/// `TicketKeys.refresh`, at start and from its timer, never on an event loop.
enum SharedTicketKeys {
    static func install(client: RedisClient, rotation: Double, timeout: Double = 1) {
        let keys = TicketKeys.shared
        keys.useSharedSource { epoch in key(for: epoch, client: client, rotation: rotation, timeout: timeout) }
        keys.startRotation()
    }

    static func key(for epoch: Int64, client: RedisClient, rotation: Double, timeout: Double) -> [UInt8]? {
        let name = "portcullis:tls:ticket-key:\(epoch)"
        let candidate = hex(TicketKeys.randomKey())
        let replies = client.pipelineAndWait([["SET", name, candidate, "NX", "EX", "\(Int(rotation * 3) + 60)"], ["GET", name]],
                                             timeout: timeout)
        guard let replies, replies.count == 2, case .success(let reply) = replies[1], let text = reply.string else { return nil }
        return unhex(text)
    }

    static func hex(_ bytes: [UInt8]) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count * 2)
        for b in bytes { out.append(digits[Int(b >> 4)]); out.append(digits[Int(b & 15)]) }
        return String(decoding: out, as: UTF8.self)
    }

    static func unhex(_ text: String) -> [UInt8]? {
        let utf8 = Array(text.utf8)
        guard utf8.count == TicketKeys.keyLength * 2 else { return nil }
        var out: [UInt8] = []
        out.reserveCapacity(TicketKeys.keyLength)
        var i = 0
        while i < utf8.count {
            guard let hi = UInt8(String(UnicodeScalar(utf8[i])), radix: 16),
                  let lo = UInt8(String(UnicodeScalar(utf8[i + 1])), radix: 16) else { return nil }
            out.append(hi << 4 | lo)
            i += 2
        }
        return out
    }
}
