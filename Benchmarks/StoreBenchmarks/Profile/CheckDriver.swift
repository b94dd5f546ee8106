// A tiny release driver for callgrind: the revocation check and nothing else
// (the Benchmark harness's malloc interposer does not run under valgrind).
// Built and run by callgrind-check.sh; see there.
//
//   CheckDriver <checks> [revoked]
//       builds the 10,000-entry view of StoreBenchmarks, then runs <checks> allowed
//       checks (jti + session + subject), or checks of a revoked jti, inside
//       `runChecks`, the function callgrind collects.
import Dispatch
import PortcullisCore
import PortcullisIO
import PortcullisStore

let now = Int64(WallClock.nowSeconds())
let loop = EventLoop(index: 0)
let store = EmbeddedRevocationStore(loops: [loop])
let done = DispatchSemaphore(value: 0)
for i in 0..<10_000 {
    let r: Revocation = i < 6000 ? .token(id: "jti-\(i)-Hk6EP6Dh8Y93mRNtsDB1Q", until: now + 3600)
        : i < 9000 ? .session(id: "session-\(i)-a1b2c3d4", until: now + 3600)
        : .subject("google:1175\(i)1234567890", before: now - 60, until: now + 3600)
    store.revoke(r) { _ in if i == 9999 { done.signal() } }
}
done.wait()
loop.queue.sync {}

// Heap strings, as the gateway holds them after parsing a token.
func heap(_ s: String) -> String { String(s.utf8.map { Character(UnicodeScalar($0)) }) }
let missJTI = heap("jti-x-Hk6EP6Dh8Y93mRNtsDB1Q")
let hitJTI = heap("jti-4321-Hk6EP6Dh8Y93mRNtsDB1Q")
let session = heap("session-x-a1b2c3d4")
let subject = heap("google:117598765432101234567")
let checks = CommandLine.arguments.count > 1 ? Int(CommandLine.arguments[1]) ?? 0 : 0
let revoked = CommandLine.arguments.count > 2 && CommandLine.arguments[2] == "revoked"

@inline(never)
func runChecks(_ view: RevocationView, _ n: Int) -> Int {
    var allowed = 0
    if revoked {
        for _ in 0..<n where view.check(tokenID: hitJTI, sessionID: nil, subject: subject, issuedAt: now - 10, now: now) == .allowed {
            allowed += 1
        }
    } else {
        for _ in 0..<n where view.check(tokenID: missJTI, sessionID: session, subject: subject, issuedAt: now - 10, now: now) == .allowed {
            allowed += 1
        }
    }
    return allowed
}

let allowed = loop.queue.sync { runChecks(store.view(loopIndex: 0), checks) }
print("checks: \(checks), allowed: \(allowed)")
