import Dispatch
import Foundation
import Testing
@testable import Portcullis

/// Signals that arrive while the gateway starts are kept and acted on once it runs
/// (a SIGHUP sent as soon as the admin port answered was lost before).
@Suite struct SignalStateTests {
    final class Counter: @unchecked Sendable {
        let lock = NSLock()
        var reloads = 0
        var stops: [Int32] = []
    }

    @Test func aReloadBeforeStartRunsOnceAfterInstall() {
        let state = SignalState()
        let counter = Counter()
        let done = DispatchSemaphore(value: 0)
        state.reload()
        state.reload()  // coalesced: one reload reads every file again
        state.install(reload: {
            counter.lock.withLock { counter.reloads += 1 }
            done.signal()
        }, stop: { _ in })
        #expect(done.wait(timeout: .now() + 5) == .success)
        state.reload()
        #expect(done.wait(timeout: .now() + 5) == .success)
        #expect(counter.lock.withLock { counter.reloads } == 2)
    }

    @Test func aStopBeforeStartIsDeliveredAfterInstall() {
        let state = SignalState()
        let counter = Counter()
        let done = DispatchSemaphore(value: 0)
        state.stop(SIGTERM)
        state.stop(SIGINT)  // the first one decides
        state.install(reload: {}, stop: { sig in
            counter.lock.withLock { counter.stops.append(sig) }
            done.signal()
        })
        // Delivered on the main queue; the test runner's main thread may be busy, so drain it here if needed.
        var delivered = done.wait(timeout: .now() + 1) == .success
        if !delivered {
            RunLoop.main.run(until: Date().addingTimeInterval(0.5))
            delivered = done.wait(timeout: .now() + 4) == .success
        }
        #expect(delivered)
        #expect(counter.lock.withLock { counter.stops } == [SIGTERM])
    }
}
