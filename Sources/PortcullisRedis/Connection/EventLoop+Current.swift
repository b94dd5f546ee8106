import Dispatch
import PortcullisIO

/// Whether the caller is already on a loop's queue, so a client can write a
/// command at once instead of hopping (a `queue.async`, and from another thread a
/// wake-up of a Dispatch worker: about 30 µs on the 2-core VM).
///
/// Each loop a client runs on is marked once with a queue-specific value (its
/// identity); `isCurrent` reads it back for the running queue. PortcullisIO's
/// `EventLoop` has no such query; this key is private to PortcullisRedis.
enum LoopMark {
    static let key = DispatchSpecificKey<ObjectIdentifier>()

    static func mark(_ loop: EventLoop) {
        loop.queue.setSpecific(key: key, value: ObjectIdentifier(loop))
    }
}

extension EventLoop {
    /// True on this loop's queue, once a client or subscriber was created for it.
    var isCurrent: Bool { DispatchQueue.getSpecific(key: LoopMark.key) == ObjectIdentifier(self) }
}
