import CPortcullisSystem
import Dispatch

/// How a loop learns that its sockets are ready.
///
/// Each loop owns one epoll instance (`pollFD`). A `StreamSocket` is added to it
/// once, edge-triggered for input and output, and stays until it is closed (closing
/// the descriptor removes it). One `DispatchSourceRead` on `pollFD` wakes the loop's
/// queue; its handler collects every ready socket with a non-blocking `epoll_wait`
/// and runs their handlers in one pass. The loop is still a Dispatch queue woken by a
/// Dispatch source, and timers, `execute` and the listeners stay plain Dispatch.
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
    /// Measured with `perf stat` under the harness load, interleaved, per request:
    /// 1 pass per wake-up: 0.34 context switches, 0.28 `epoll_ctl`, 5.0 syscalls, 35 µs CPU;
    /// up to 8: 0.18, 0.12, 4.6, 31 µs (req/s within noise in the harness itself).
    static let passesPerWakeUp = 8

    func startPolling() {
        let source = DispatchSource.makeReadSource(fileDescriptor: pollFD, queue: queue)
        source.setEventHandler { [unowned self] in self.pollReadySockets() }
        pollSource = source
        source.resume()
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
        if let error = System.register(socket.fd, with: pollFD, token: token) {
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
            queue.async { [unowned self] in
                self.deferredScheduled = false
                self.polling = true
                self.runDeferred()
                self.polling = false
            }
        }
    }

    private func pollReadySockets() {
        polling = true
        defer { polling = false }
        // Poll again while a pass finds work: events that arrived during the previous
        // pass are picked up here rather than through another wake-up of the source
        // (a re-arm, a wake of libdispatch's manager thread and of a worker: context
        // switches). Bounded: whatever is left keeps `pollFD` readable and the source
        // fires again, after other work queued on the loop (timers, accepts) had its turn.
        for _ in 0..<Self.passesPerWakeUp {
            let n = System.poll(pollFD, tokens: eventTokens, ready: eventReady, max: Self.eventBatch)
            if n == 0 { return }
            for i in 0..<n {
                let token = eventTokens[i]
                let slot = Int(truncatingIfNeeded: token & 0xFFFF_FFFF)
                guard slot < registered.count, let socket = registered[slot], socket.token == token else { continue }
                socket.ready(eventReady[i])
            }
            runDeferred()
        }
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
