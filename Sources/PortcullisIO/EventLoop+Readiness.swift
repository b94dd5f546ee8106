import PortcullisCore
import CPortcullisSystem
import Dispatch
import Glibc

/// How a loop learns that its sockets are ready.
///
/// Each loop owns one epoll instance (`pollFD`). A `StreamSocket` is added to it
/// once, edge-triggered for input and output, and stays until it is closed (closing
/// the descriptor removes it). A thread of the loop's own blocks in `epoll_wait` on
/// `pollFD` and runs every ready socket's handlers in one pass on the loop's queue with
/// `queue.sync` (libdispatch runs a sync block on the calling thread when the serial
/// queue is free, and waits for it otherwise), so everything stays confined to the
/// queue; timers and `execute` blocks stay plain Dispatch.
///
/// Why not a `DispatchSourceRead` on `pollFD` (the second design): libdispatch's Linux
/// manager thread waits in its own epoll, re-arms the one-shot source on every wake-up
/// (an eventfd write, an `epoll_ctl`) and wakes a worker thread (a futex) to run the
/// handler: two threads woken per wake-up. Under the TLS load row (wrk -c64) scheduler
/// switches were 10% of the gateway's CPU, and under full handshakes 11%; the poller
/// thread is woken alone, and runs the handlers itself.
///
/// Why not one read and one write `DispatchSource` per socket (the first design):
/// libdispatch's Linux backend registers those `EPOLLONESHOT`, so every event costs
/// an `epoll_ctl` to re-arm and an `ioctl(FIONREAD)` to fill `data`, every
/// suspend/resume another `epoll_ctl`, and each re-arm goes through its manager
/// thread (eventfd writes, futex wake-ups). Measured with `perf stat` on the gateway
/// under the load harness's wrk -t1 -c64 (2 cores, upstream nginx `return 200`,
/// runs interleaved), per proxied request:
///
/// | design | syscalls | epoll_ctl | ioctl | sendto | context switches | CPU µs |
/// |---|---:|---:|---:|---:|---:|---:|
/// | Dispatch read + write source per socket | 13.2 | 4.0 | 2.0 | 3.0 | 0.86 | 77 |
/// | this poller (+ one send per response, see `HTTP1ServerConnection.corkOutput`) | 4.5 | 0.10 | 0 | 2.0 | 0.15 | 35 |
/// | nginx proxy workers, for reference | 5.2 | 0 | 0 | 2.0 (writev) | 0.15 | 40 |
///
/// (CPU includes `perf`'s tracepoint overhead; compare within the table only.) The
/// `epoll_ctl` that remains is libdispatch re-arming the one source per wake-up.
///
/// Tokens are a slot index and a generation, so an event collected for a socket that
/// a handler earlier in the same batch closed (and whose descriptor number a new
/// socket may already reuse) is recognised as stale and dropped.
extension EventLoop {
    static let eventBatch = 128
    /// A wake-up polls again at once (without waiting, still inside the same `queue.sync`)
    /// only after a pass that filled the whole batch, when more events are surely waiting,
    /// and at most this many times. After a partial batch the poller thread goes back to
    /// its blocking `epoll_wait`, which returns at once if events arrived meanwhile: the
    /// same one system call, where an unconditional re-poll added a second, empty one to
    /// every wake-up (resumed TLS handshakes: 3.55 `epoll_wait` per connection against
    /// nginx's 2.40). History: with the second design's Dispatch source (a re-arm per
    /// wake-up), up to 8 passes per wake-up had saved 4 µs of 35 per request.
    static let passesPerWakeUp = 8

    /// Starts the loop's poller thread (see the type comment): it blocks in `epoll_wait`
    /// on `pollFD` and runs what is ready on the loop's queue with `queue.sync`, which
    /// libdispatch executes on the calling thread when the queue is free. The thread and
    /// the loop live as long as the process.
    /// What the poller thread's argument is a handle in.
    static let pollerHandles = CallbackHandles<EventLoop>()

    func startPolling() {
        // The thread's argument is a handle (`CallbackHandles`); the thread holds the loop once
        // it found it, and runs as long as the process.
        let loop = Self.pollerHandles.register(self)
        var thread = pthread_t()
        let rc = pthread_create(&thread, nil, { raw in
            EventLoop.pollerHandles.target(raw)?.pollForever()
            return nil
        }, loop)
        precondition(rc == 0, "cannot start the poller thread of loop: \(rc)")
        pthread_detach(thread)
    }

    private func pollForever() -> Never {
        while true {
            let n = System.poll(pollFD, tokens: eventTokens, ready: eventReady, max: Self.eventBatch,
                                timeoutMilliseconds: -1)
            if n == 0 { continue }
            queue.sync { self.pollReadySockets(alreadyCollected: n) }
        }
    }

    /// Adds `socket` to the loop's poller. On `queue` only.
    func register(_ socket: StreamSocket) -> IOError? {
        let slot: Int
        if let free = freeSlots.popLast() {
            slot = free
        } else {
            slot = registered.count
            registered.append(nil)
        }
        generation &+= 1
        let token = UInt64(generation) << 32 | UInt64(slot)
        let error = socket.isListener
            ? System.registerListener(socket.fd, with: pollFD, token: token)
            : System.register(socket.fd, with: pollFD, token: token)
        if let error {
            freeSlots.append(slot)
            return error
        }
        registered[slot] = socket
        socket.token = token
        return nil
    }

    /// Forgets `socket` (its descriptor is about to be closed). On `queue` only.
    func unregister(_ socket: StreamSocket) {
        let slot = Int(truncatingIfNeeded: socket.token & 0xFFFF_FFFF)
        guard slot < registered.count, registered[slot] === socket else { return }
        registered[slot] = nil
        freeSlots.append(slot)
    }

    /// Runs `socket`'s handlers soon: at the end of the current poll pass, or in a
    /// block queued on the loop when called outside one.
    func scheduleHandlers(_ socket: StreamSocket) {
        deferred.append(socket)
        if !polling && !deferredScheduled {
            deferredScheduled = true
            queue.async { [self] in
                self.deferredScheduled = false
                self.polling = true
                self.finishPass()
                self.polling = false
            }
        }
    }

    /// Runs the handlers of the `alreadyCollected` events the poller thread waited for,
    /// then, while a pass filled the whole batch, polls again without waiting (see
    /// `passesPerWakeUp`). Bounded: what is left wakes the poller thread at once, after
    /// other work queued on the loop (timers, `execute` blocks) had its turn.
    private func pollReadySockets(alreadyCollected: Int) {
        polling = true
        defer { polling = false }
        var n = alreadyCollected
        for pass in 0..<Self.passesPerWakeUp {
            if pass > 0 {
                guard n == Self.eventBatch else { return }
                n = System.poll(pollFD, tokens: eventTokens, ready: eventReady, max: Self.eventBatch)
            }
            if n == 0 { return }
            for i in 0..<n {
                let token = eventTokens[i]
                let slot = Int(truncatingIfNeeded: token & 0xFFFF_FFFF)
                guard slot < registered.count, let socket = registered[slot], socket.token == token else { continue }
                socket.ready(eventReady[i])
            }
            finishPass()
        }
    }

    /// Runs deferred handlers and pass-end targets until neither has work: a pass-end
    /// target may resume a socket (deferring its handler), and a handler may ask for a
    /// pass-end call; both must happen before the poller sleeps.
    private func finishPass() {
        repeat {
            runDeferred()
            runPassEnd()
        } while !deferred.isEmpty || !passEndTargets.isEmpty
    }

    /// Calls the targets that asked to act once the current pass's events were handled.
    private func runPassEnd() {
        var i = 0
        while i < passEndTargets.count {
            let target = passEndTargets[i]
            i += 1
            target.passEnded()
        }
        passEndTargets.removeAll(keepingCapacity: true)
    }

    private func runDeferred() {
        var i = 0
        while i < deferred.count {
            let socket = deferred[i]
            i += 1
            socket.runDeferred()
        }
        deferred.removeAll(keepingCapacity: true)
    }
}
