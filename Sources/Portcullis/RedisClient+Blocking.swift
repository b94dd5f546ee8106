import Dispatch
import PortcullisRedis

extension RedisClient {
    /// Runs `commands` as one pipeline and waits for the replies (bounded by `timeout`
    /// plus half a second); nil when none came. Blocks the caller: for start-up and timer
    /// work on global queues (shared TLS ticket keys, the shared assertion key), never on
    /// an event loop.
    func pipelineAndWait(_ commands: [[String]], timeout: Double) -> [Result<RedisReply, RedisError>]? {
        let done = DispatchSemaphore(value: 0)
        let box = RepliesBox()
        pipeline(commands, timeout: timeout) { replies in
            box.replies = replies
            done.signal()
        }
        guard done.wait(timeout: .now() + timeout + 0.5) == .success else { return nil }
        return box.replies
    }
}

/// Written by the reply handler (on the client's loop) before `done.signal()`, read after `wait()`.
private final class RepliesBox: @unchecked Sendable {
    var replies: [Result<RedisReply, RedisError>]?
}
