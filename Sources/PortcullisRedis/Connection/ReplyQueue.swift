/// Called with a command's reply. Runs on the connection's loop queue.
typealias ReplyHandler = (Result<RedisReply, RedisError>) -> Void

/// Commands in flight on one connection, oldest first: Redis answers in order, so
/// the next reply always belongs to the head. An entry whose handler was already
/// completed (timed out) keeps its slot, so later replies still line up.
struct ReplyQueue {
    struct Entry {
        var handler: ReplyHandler?
        /// Monotonic nanoseconds.
        var deadline: UInt64
        /// When the command was queued (monotonic nanoseconds), for `RedisCommandTimings`.
        var sentAt: UInt64
    }

    private var items: [Entry] = []
    private var head = 0

    mutating func append(_ entry: Entry) { items.append(entry) }

    mutating func popFirst() -> Entry? {
        guard head < items.count else { return nil }
        let entry = items[head]
        items[head].handler = nil
        head += 1
        if head == items.count {
            items.removeAll(keepingCapacity: items.count <= 4096)
            head = 0
        } else if head >= 1024 && head * 2 >= items.count {
            items.removeFirst(head)
            head = 0
        }
        return entry
    }

    /// Takes the handlers whose deadline passed (their slots stay) and returns the
    /// earliest deadline still pending (0 if none).
    mutating func takeExpired(now: UInt64) -> (expired: [ReplyHandler], next: UInt64) {
        var expired: [ReplyHandler] = []
        var next: UInt64 = 0
        var i = head
        while i < items.count {
            if let handler = items[i].handler {
                if items[i].deadline <= now {
                    expired.append(handler)
                    items[i].handler = nil
                } else if next == 0 || items[i].deadline < next {
                    next = items[i].deadline
                }
            }
            i += 1
        }
        return (expired, next)
    }

    mutating func removeAll() -> [ReplyHandler] {
        let handlers = items[head...].compactMap(\.handler)
        items.removeAll()
        head = 0
        return handlers
    }
}
