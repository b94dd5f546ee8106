internal import CHiredis

/// The one owner of a hiredis `redisReader`: bytes in, `RedisReply` values out.
/// hiredis is used only for parsing; sockets are ours. Not thread-safe: owned by
/// one connection on one loop queue. The C reader is freed in `deinit`.
final class RESPReader {
    private let reader: UnsafeMutablePointer<redisReader>

    init() {
        guard let r = redisReaderCreate() else { fatalError("redisReaderCreate: out of memory") }
        reader = r
    }

    deinit { redisReaderFree(reader) }

    /// Copies `bytes` into the reader's buffer.
    func feed(_ bytes: UnsafeRawBufferPointer) throws(RedisError) {
        guard bytes.count > 0 else { return }
        let rc = redisReaderFeed(reader, bytes.baseAddress!.assumingMemoryBound(to: CChar.self), bytes.count)
        if rc != REDIS_OK { throw .protocolViolation(errorText) }
    }

    /// The next complete reply, or nil when more bytes are needed.
    func next() throws(RedisError) -> RedisReply? {
        var raw: UnsafeMutableRawPointer?
        guard redisReaderGetReply(reader, &raw) == REDIS_OK else { throw .protocolViolation(errorText) }
        guard let raw else { return nil }
        defer { freeReplyObject(raw) }
        return Self.convert(raw.assumingMemoryBound(to: redisReply.self))
    }

    private var errorText: String {
        withUnsafeBytes(of: reader.pointee.errstr) { raw in
            String(decoding: raw.prefix(while: { $0 != 0 }), as: UTF8.self)
        }
    }

    private static func convert(_ r: UnsafePointer<redisReply>) -> RedisReply {
        let reply = r.pointee
        switch reply.type {
        case REDIS_REPLY_STRING:
            return .bulk(Array(UnsafeRawBufferPointer(start: reply.str, count: reply.len)))
        case REDIS_REPLY_STATUS:
            return .simpleString(String(decoding: UnsafeRawBufferPointer(start: reply.str, count: reply.len), as: UTF8.self))
        case REDIS_REPLY_ERROR:
            return .error(String(decoding: UnsafeRawBufferPointer(start: reply.str, count: reply.len), as: UTF8.self))
        case REDIS_REPLY_INTEGER:
            return .integer(Int64(reply.integer))
        case REDIS_REPLY_ARRAY:
            guard let elements = reply.element else { return .array([]) }
            var items: [RedisReply] = []
            items.reserveCapacity(reply.elements)
            for i in 0..<reply.elements {
                if let e = elements[i] { items.append(convert(e)) } else { items.append(.null) }
            }
            return .array(items)
        default:
            return .null
        }
    }
}
