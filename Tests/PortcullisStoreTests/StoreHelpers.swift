import Dispatch
import PortcullisTestSupport
import Foundation
import PortcullisCore
import PortcullisIO
import PortcullisRedis
@testable import PortcullisStore

func nowSeconds() -> Int64 { Int64(WallClock.nowSeconds()) }

/// Asks the view of `loop` on that loop's queue, as the gateway does.
func verdict(_ store: RevocationStore, _ loop: EventLoop, token: String? = nil, session: String? = nil,
             subject: String = "user:1", issuedAt: Int64? = nil) -> RevocationVerdict {
    loop.queue.sync {
        store.view(loopIndex: loop.index).check(tokenID: token, sessionID: session, subject: subject,
                                                 issuedAt: issuedAt, now: nowSeconds())
    }
}

func entryCount(_ store: RevocationStore, _ loop: EventLoop) -> Int {
    loop.queue.sync { store.view(loopIndex: loop.index).entryCount }
}

/// Revokes and waits for the completion (bounded).
@discardableResult
func revokeAndWait(_ store: RevocationStore, _ r: Revocation, wait: Double = 5) -> Result<Void, StoreError>? {
    let done = DispatchSemaphore(value: 0)
    let box = Locked<Result<Void, StoreError>?>(nil)
    store.revoke(r) { result in box.update { $0 = result }; done.signal() }
    _ = done.wait(timeout: .now() + wait)
    return box.get()
}

func redisConfiguration(_ server: RedisProcess) -> RedisConfiguration {
    RedisConfiguration(topology: .standalone(try! SocketAddress(parsing: "127.0.0.1:\(server.port)")),
                       commandTimeout: 1, connectTimeout: 0.5,
                       backoff: ReconnectBackoff(initial: 0.02, maximum: 0.2))
}
