import Dispatch
import PortcullisCore

/// Something with a deadline that the loop's ticker checks (connections, pooled
/// upstream sockets). Confined to the loop's queue.
/// Something that acts once per pass of the poller, after every ready socket's handler ran
/// (an HTTP/2 connection writes what all its streams produced during the pass at once).
public protocol PassEndTarget: AnyObject {
    func passEnded()
}

public protocol DeadlineTarget: AnyObject {
    /// Monotonic nanoseconds; 0 means no deadline.
    var deadline: UInt64 { get }
    func deadlineExpired(now: UInt64)
}

/// One serial Dispatch queue that owns a set of sockets and everything attached to
/// them. Each connection is pinned to exactly one loop for its whole life, so its
/// state needs no locks: every handler runs on `queue`.
///
/// Timeouts: instead of one `DispatchSourceTimer` per connection (an allocation and a
/// timerfd update per request), each target keeps a `deadline` and one repeating
/// ticker per loop visits the registered targets. Resolution is the tick interval.
public final class EventLoop: @unchecked Sendable {
    // @unchecked Sendable: every mutable member is touched only on `queue` (documented per member).

    public let index: Int
    public let queue: DispatchQueue
    /// Scratch space for reads; used only on `queue`, never retained across events.
    public let readScratch: UnsafeMutableRawBufferPointer
    /// Scratch space for building outgoing heads; used only on `queue`.
    public var headScratch = ByteBuffer()
    /// Output gathered for one connection during one pass (see `HTTP1ServerConnection`'s
    /// corking); used only on `queue`, by one connection at a time, and empty between
    /// passes, so its storage is reused instead of allocated per response.
    public var gatherScratch = ByteBuffer()

    /// Targets with deadlines, checked by the ticker. Only on `queue`.
    private var deadlineTargets: [ObjectIdentifier: any DeadlineTarget] = [:]
    private var ticker: DispatchSourceTimer?
    private let tickNanoseconds: UInt64

    /// Monotonic time at the last event, refreshed by `now()`.
    public private(set) var lastNow: UInt64 = MonotonicClock.nowNanoseconds()

    // Readiness of this loop's stream sockets (see EventLoop+Readiness.swift). All only on `queue`.
    /// This loop's own epoll instance; every `StreamSocket` of the loop is registered once, edge-triggered.
    let pollFD: Int32
    /// Registered sockets by slot; a socket's token is its slot and a generation.
    var registered: [StreamSocket?] = []
    var freeSlots: [Int] = []
    var generation: UInt32 = 0
    /// Sockets whose handler must run because readiness was already known when
    /// reading resumed or a write wait began (an edge-triggered poller reports no new edge).
    var deferred: [StreamSocket] = []
    /// Targets to call at the end of the current pass (see `atPassEnd`).
    var passEndTargets: [any PassEndTarget] = []
    var deferredScheduled = false
    var polling = false
    let eventTokens: UnsafeMutablePointer<UInt64>
    let eventReady: UnsafeMutablePointer<UInt32>

    public init(index: Int, scratchBytes: Int = 64 * 1024, tickMilliseconds: Int = 100) {
        self.index = index
        self.queue = DispatchQueue(label: "portcullis.loop.\(index)", qos: .userInitiated)
        self.readScratch = UnsafeMutableRawBufferPointer.allocate(byteCount: scratchBytes, alignment: 16)
        self.tickNanoseconds = UInt64(tickMilliseconds) * 1_000_000
        self.pollFD = System.makePoller()
        self.eventTokens = .allocate(capacity: Self.eventBatch)
        self.eventReady = .allocate(capacity: Self.eventBatch)
        startPolling()
    }

    deinit {
        readScratch.deallocate()
        eventTokens.deallocate()
        eventReady.deallocate()
    }

    @inline(__always)
    public func now() -> UInt64 {
        lastNow = MonotonicClock.nowNanoseconds()
        return lastNow
    }

    public func execute(_ work: @escaping @Sendable () -> Void) {
        queue.async(execute: work)
    }

    /// True while the poller's handlers run on the queue (a pass); then `atPassEnd` targets
    /// are called once it ends. Outside a pass (a timer, a block from `execute`) there is none.
    public var inPass: Bool { polling }

    /// Calls `target.passEnded()` once the current pass's handlers ran. Only in a pass (`inPass`).
    public func atPassEnd(_ target: any PassEndTarget) {
        passEndTargets.append(target)
    }

    public func assertInLoop() {
        #if DEBUG
        dispatchPrecondition(condition: .onQueue(queue))
        #endif
    }

    /// Registers a target for deadline checks. On `queue` only.
    public func watchDeadline(_ target: any DeadlineTarget) {
        deadlineTargets[ObjectIdentifier(target)] = target
        if ticker == nil { startTicker() }
    }

    public func unwatchDeadline(_ target: any DeadlineTarget) {
        deadlineTargets.removeValue(forKey: ObjectIdentifier(target))
    }

    public var watchedCount: Int { deadlineTargets.count }

    private func startTicker() {
        let timer = DispatchSource.makeTimerSource(queue: queue)
        timer.schedule(deadline: .now() + .nanoseconds(Int(tickNanoseconds)),
                       repeating: .nanoseconds(Int(tickNanoseconds)),
                       leeway: .nanoseconds(Int(tickNanoseconds / 4)))
        timer.setEventHandler { [weak self] in self?.tick() }
        timer.resume()
        ticker = timer
    }

    private func tick() {
        let now = self.now()
        var expired: [any DeadlineTarget] = []
        for target in deadlineTargets.values {
            let d = target.deadline
            if d != 0 && d <= now { expired.append(target) }
        }
        for target in expired where target.deadline != 0 && target.deadline <= now {
            target.deadlineExpired(now: now)
        }
    }
}

/// A fixed set of event loops, one per core by default.
public final class EventLoopGroup: @unchecked Sendable {
    // @unchecked Sendable: `loops` is immutable after init; the round-robin counter is
    // only used by callers on a single queue (configuration time) or is advisory.
    public let loops: [EventLoop]
    private var nextIndex = 0

    public init(count: Int) {
        precondition(count > 0)
        loops = (0..<count).map { EventLoop(index: $0) }
    }

    public func next() -> EventLoop {
        let loop = loops[nextIndex % loops.count]
        nextIndex &+= 1
        return loop
    }
}
