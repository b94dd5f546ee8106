// A fixed amount of Redis round trips through PortcullisRedis, for perf and strace
// (counts per command need a known number of commands). Built by redis-profile.sh.
//
//   RedisDriver <host:port> <mode> <rounds>
//     mode: thread      one GET at a time, sent from this thread, waited on a semaphore
//           loop        one GET at a time, each sent from the previous one's completion on the client's loop
//           thread16    16 pipelined GETs per round (`pipeline`), from this thread
//           loop16      16 GETs per round, sent on the loop from the previous round's last completion
import Dispatch
import PortcullisCore
import PortcullisIO
import PortcullisRedis
#if canImport(Glibc)
import Glibc
#endif

let args = CommandLine.arguments
guard args.count == 4, let address = try? SocketAddress(parsing: args[1]), let rounds = Int(args[3]) else {
    print("usage: RedisDriver <host:port> thread|loop|thread16|loop16 <rounds>")
    exit(2)
}
let mode = args[2]
let client = RedisClient(configuration: RedisConfiguration(topology: .standalone(address)), loop: EventLoop(index: 0))
client.start()
let ready = DispatchSemaphore(value: 0)
client.send(["SET", "bench:key", "0123456789abcdef0123456789abcdef"]) { _ in ready.signal() }
guard ready.wait(timeout: .now() + 2) == .success else { print("no Redis at \(address)"); exit(1) }

final class Chain: @unchecked Sendable {
    // @unchecked Sendable: touched only on the client's loop queue once started.
    let client: RedisClient
    let depth: Int
    var left: Int
    var outstanding = 0
    let done = DispatchSemaphore(value: 0)
    init(client: RedisClient, depth: Int, rounds: Int) { self.client = client; self.depth = depth; self.left = rounds }
    func next() {
        if left == 0 { done.signal(); return }
        left -= 1
        outstanding = depth
        for _ in 0..<depth {
            client.sendOnLoop(["GET", "bench:key"]) { [self] _ in
                outstanding -= 1
                if outstanding == 0 { next() }
            }
        }
    }
}

let start = MonotonicClock.nowNanoseconds()
switch mode {
case "thread", "thread16":
    let depth = mode == "thread" ? 1 : 16
    let done = DispatchSemaphore(value: 0)
    for _ in 0..<rounds {
        if depth == 1 {
            client.send(["GET", "bench:key"]) { _ in done.signal() }
        } else {
            client.pipeline(Array(repeating: ["GET", "bench:key"], count: depth)) { _ in done.signal() }
        }
        done.wait()
    }
case "loop", "loop16":
    let chain = Chain(client: client, depth: mode == "loop" ? 1 : 16, rounds: rounds)
    client.loop.execute { chain.next() }
    chain.done.wait()
default:
    print("unknown mode \(mode)")
    exit(2)
}
let elapsed = Double(MonotonicClock.nowNanoseconds() - start) / 1e9
let commands = rounds * (mode.hasSuffix("16") ? 16 : 1)
let perRound: Double = elapsed / Double(rounds) * 1e6
let rate = Int(Double(commands) / elapsed)
let tenths = Int((perRound * 10).rounded())
print("\(mode): \(commands) GETs in \(Int(elapsed * 1000)) ms: \(tenths / 10).\(tenths % 10) µs per round, \(rate) GET/s")
client.shutdown()
