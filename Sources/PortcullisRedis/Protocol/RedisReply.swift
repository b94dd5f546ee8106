/// One RESP2 reply, fully decoded and owned by Swift (no C memory behind it).
///
/// A top-level `-ERR …` reply reaches callers as `RedisError.server`; `.error` only
/// appears nested inside arrays (for example the results of `EXEC`).
public enum RedisReply: Sendable, Equatable {
    /// `+OK` and other status replies.
    case simpleString(String)
    /// An error nested in an array (top-level errors become `RedisError.server`).
    case error(String)
    case integer(Int64)
    /// A bulk string, as raw bytes (binary safe). See `string` for text.
    case bulk([UInt8])
    case array([RedisReply])
    /// `$-1` or `*-1`.
    case null

    /// Text of a bulk or status reply (UTF-8, lossy), nil otherwise.
    public var string: String? {
        switch self {
        case .simpleString(let s): return s
        case .bulk(let bytes): return String(decoding: bytes, as: UTF8.self)
        default: return nil
        }
    }

    /// The integer of an integer reply, or a bulk/status reply that holds a decimal.
    public var integer: Int64? {
        switch self {
        case .integer(let v): return v
        case .bulk, .simpleString: return string.flatMap { Int64($0) }
        default: return nil
        }
    }

    public var array: [RedisReply]? {
        if case .array(let items) = self { return items }
        return nil
    }
}
