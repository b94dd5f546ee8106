// Micro benchmarks of the revocation check (the per-request hot path) and of
// Redis round trips through PortcullisRedis, beside redis-benchmark.
//
//   PORTCULLIS_BENCHMARKS=1 swift package benchmark --target StoreBenchmarks
//
// The Redis rows start their own redis-server on a free 127.0.0.1 port (stopped at
// exit); PORTCULLIS_BENCH_REDIS=host:port uses another one. The row "Redis GET vs
// redis-benchmark" runs redis-benchmark (-c 1, -P 1 and -P 16) and the same GETs
// through our client back to back in one process and prints the table with ratios:
// on this noisy VM only a same-run ratio means anything.
//
// Measured on the 2-core shared VM (Swift 6.3.1, redis-server 7.0.15, another
// build running), wall clock p0 / p50; mallocs per sample include the harness's ~16-18:
//
//   row                                          p0        p50       mallocs/sample
//   check, 10k entries, 3 misses (jti+sess+sub)  28-30 ns  29-60 ns  16 per 1000 checks (0 per check)
//   check, 10k entries, revoked jti              23-47 ns  43-55 ns  16 per 1000 checks (0 per check)
//     (before the hash index of RevocationTable: 143-178 / 241-328 ns and 87 / 125-161 ns;
//     instructions per check: Profile/callgrind-check.sh)
//   Redis GET, 1 in flight, from another thread  105 µs    198 µs    26  (57 / 104 µs before, quieter VM)
//   Redis GET ×100 chained on the client's loop  37 µs     41 µs     3.2 per GET (per round trip)
//   Redis GET ×16 pipelined, from another thread 69 µs     88-132 µs 91
//   Redis GET ×16 one by one on the loop         43 µs     57 µs     3.1 per GET (per batch of 16)
//
// Same-run ratios, redis-benchmark / ours in GET/s (6 runs, ranges):
//   1 in flight, on the client's loop: 1.15-1.41; from another thread and waited: 1.43-1.90
//   16 in flight, one by one on the loop (corked into one write): 1.12-1.92; pipeline() from
//   another thread: 1.67-2.65.
// Before (Profile/redis-profile.sh, the earlier client interleaved with this one):
// on the loop 0.96-1.57 (sendOnLoop: no hop already), from another thread 2.4-2.7, 16 one
// by one on the loop 5.0-5.6 (one write per GET), pipeline() 1.9-2.2. What is left is
// thread hand-offs: Dispatch wakes its manager thread and then a worker per readiness
// event, and a caller on another thread adds a hop in and a wake-up out (perf stat and
// strace per GET in Profile/redis-profile.sh).
import Benchmark
import Dispatch
#if canImport(Glibc)
import Glibc
#endif
import PortcullisCore
import PortcullisIO
import PortcullisRedis
import PortcullisStore
import PortcullisTestSupport

let now = Int64(WallClock.nowSeconds())
let loop = EventLoop(index: 0)

/// A view holding 10,000 revocations (6,000 jti, 3,000 sessions, 1,000 subjects).
let store: EmbeddedRevocationStore = {
    let store = EmbeddedRevocationStore(loops: [loop])
    let done = DispatchSemaphore(value: 0)
    for i in 0..<10_000 {
        let r: Revocation = i < 6000 ? .token(id: "jti-\(i)-Hk6EP6Dh8Y93mRNtsDB1Q", until: now + 3600)
            : i < 9000 ? .session(id: "session-\(i)-a1b2c3d4", until: now + 3600)
            : .subject("google:1175\(i)1234567890", before: now - 60, until: now + 3600)
        store.revoke(r) { _ in if i == 9999 { done.signal() } }
    }
    done.wait()
    loop.queue.sync {}  // the last update has reached the view
    return store
}()

/// The Redis rows' server: PORTCULLIS_BENCH_REDIS (host:port) when set, else a
/// redis-server of our own on a free 127.0.0.1 port (killed when the process exits).
let ownRedis: RedisProcess? = {
    guard Benchmark.environment("PORTCULLIS_BENCH_REDIS") == nil, let server = try? RedisProcess() else { return nil }
    atexit { ownRedis?.stop() }  // globals are never deinitialized: stop the server on exit
    return server
}()
let redisAddress = (try? SocketAddress(parsing: Benchmark.environment("PORTCULLIS_BENCH_REDIS") ?? "127.0.0.1:\(ownRedis?.port ?? 6399)"))!

extension Benchmark {
    static func environment(_ name: String) -> String? {
        guard let v = getenv(name) else { return nil }
        return String(cString: v)
    }
}

/// A connected client, or nil when no Redis answers.
let client: RedisClient? = {
    let client = RedisClient(configuration: RedisConfiguration(topology: .standalone(redisAddress)), loop: EventLoop(index: 1))
    client.start()
    let done = DispatchSemaphore(value: 0)
    let ok = Box(false)
    client.send(["SET", "bench:key", "0123456789abcdef0123456789abcdef"]) { r in
        ok.value = (try? r.get()) != nil
        done.signal()
    }
    _ = done.wait(timeout: .now() + 2)
    return ok.value ? client : nil
}()

final class Box<T>: @unchecked Sendable {
    // @unchecked Sendable: written before a semaphore signal, read after the wait.
    var value: T
    init(_ value: T) { self.value = value }
}

/// Round trips sent from this (the benchmark's) thread, each waited for: a hop onto
/// the client's loop and a wake-up of this thread per round trip.
func roundTrips(_ client: RedisClient, _ command: [String], depth: Int, iterations: Int) {
    let done = DispatchSemaphore(value: 0)
    for _ in 0..<iterations {
        if depth == 1 {
            client.send(command) { _ in done.signal() }
        } else {
            client.pipeline(Array(repeating: command, count: depth)) { _ in done.signal() }
        }
        done.wait()
    }
}

/// `rounds` rounds of `depth` commands, each round sent one command at a time from
/// the previous round's last completion, on the client's loop (as the revocation
/// store uses the client): no thread hand-off between round trips. One hop in and
/// one wake-up out per call, amortized over the rounds.
final class LoopChain: @unchecked Sendable {
    // @unchecked Sendable: `left` and `outstanding` are touched only on the client's loop.
    let client: RedisClient
    let command: [String]
    let depth: Int
    var left = 0
    var outstanding = 0
    let done = DispatchSemaphore(value: 0)

    init(_ client: RedisClient, _ command: [String], depth: Int) {
        self.client = client
        self.command = command
        self.depth = depth
    }

    func run(rounds: Int) {
        client.loop.execute { [self] in
            left = rounds
            next()
        }
        done.wait()
    }

    private func next() {
        if left == 0 { done.signal(); return }
        left -= 1
        outstanding = depth
        for _ in 0..<depth {
            client.send(command) { [self] _ in
                outstanding -= 1
                if outstanding == 0 { next() }
            }
        }
    }
}

/// redis-benchmark and the same work through our client, back to back in this
/// process, printed as a table with ratios (the VM is too noisy to compare runs).
func compareWithRedisBenchmark(_ client: RedisClient) {
    func ours(_ body: () -> Void, commands: Int) -> Double {
        let start = MonotonicClock.nowNanoseconds()
        body()
        return Double(commands) / (Double(MonotonicClock.nowNanoseconds() - start) / 1e9)
    }
    func theirs(pipeline: Int, commands: Int) -> (Double, String) {
        let out = RedisProcess.capture(["/usr/bin/redis-benchmark", "-h", "127.0.0.1", "-p", "\(redisAddress.port)",
                                        "-c", "1", "-P", "\(pipeline)", "-t", "get", "-n", "\(commands)", "-q"], timeout: 30)
        let line = out.split(whereSeparator: { $0 == "\r" || $0 == "\n" }).last { $0.contains("requests per second") } ?? ""
        let rate = Double(line.split(separator: " ").dropFirst().first ?? "") ?? 0
        return (rate, String(line))
    }
    let n = 20_000
    let get = ["GET", "bench:key"]
    let single = LoopChain(client, get, depth: 1)
    let sixteen = LoopChain(client, get, depth: 16)
    let (rb1, rb1Line) = theirs(pipeline: 1, commands: n)
    let loop1 = ours({ single.run(rounds: n) }, commands: n)
    let thread1 = ours({ roundTrips(client, get, depth: 1, iterations: n) }, commands: n)
    let (rb16, rb16Line) = theirs(pipeline: 16, commands: 16 * n)
    let loop16 = ours({ sixteen.run(rounds: n) }, commands: 16 * n)
    let thread16 = ours({ roundTrips(client, get, depth: 16, iterations: n) }, commands: 16 * n)
    func row(_ name: String, _ rate: Double, _ reference: Double) -> String {
        let ratio = rate > 0 ? reference / rate : 0
        return "  \(name + String(repeating: " ", count: max(0, 58 - name.count))) \(Int(rate)) GET/s   redis-benchmark / ours = \((ratio * 100).rounded() / 100)"
    }
    print("""
    Redis GET through PortcullisRedis vs redis-benchmark, same server (\(redisAddress)), same run, \(n) rounds each:
      redis-benchmark -c 1 -P 1:  \(rb1Line)
    \(row("ours, 1 in flight, sent on the client's loop", loop1, rb1))
    \(row("ours, 1 in flight, sent from another thread and waited", thread1, rb1))
      redis-benchmark -c 1 -P 16: \(rb16Line)
    \(row("ours, 16 in flight, sent one by one on the client's loop", loop16, rb16))
    \(row("ours, 16 in flight, pipeline() from another thread", thread16, rb16))
    """)
    fflush(nil)  // all streams: the harness exits without flushing this one
}

func configuration(mallocBudget: Int? = nil) -> Benchmark.Configuration {
    var c = Benchmark.defaultConfiguration
    c.metrics = [.instructions, .mallocCountTotal, .wallClock, .throughput]
    c.maxDuration = .seconds(2)
    c.maxIterations = 1_000_000
    if let mallocBudget { c.thresholds = [.mallocCountTotal: .init(absolute: [.p90: mallocBudget])] }
    return c
}

let benchmarks: @Sendable () -> Void = {
    let view = store.view(loopIndex: 0)
    // Tokens as the gateway would hold them after parsing (heap strings, not literals).
    let missJTI = String("jti-x-Hk6EP6Dh8Y93mRNtsDB1Q".utf8.map { Character(UnicodeScalar($0)) })
    let hitJTI = String("jti-4321-Hk6EP6Dh8Y93mRNtsDB1Q".utf8.map { Character(UnicodeScalar($0)) })
    let session = String("session-x-a1b2c3d4".utf8.map { Character(UnicodeScalar($0)) })
    let subject = String("google:117598765432101234567".utf8.map { Character(UnicodeScalar($0)) })

    // 1,000 checks per iteration: the per-check figure is the row divided by 1,000.
    Benchmark("Revocation check ×1000, 10k entries, all allowed (jti+session+subject)",
              configuration: configuration(mallocBudget: 18)) { benchmark in
        for _ in benchmark.scaledIterations {
            for _ in 0..<1000 {
                blackHole(view.check(tokenID: missJTI, sessionID: session, subject: subject, issuedAt: now - 10, now: now))
            }
        }
    }
    Benchmark("Revocation check ×1000, 10k entries, revoked jti",
              configuration: configuration(mallocBudget: 18)) { benchmark in
        for _ in benchmark.scaledIterations {
            for _ in 0..<1000 {
                blackHole(view.check(tokenID: hitJTI, sessionID: nil, subject: subject, issuedAt: now - 10, now: now))
            }
        }
    }

    guard let client else {
        print("StoreBenchmarks: no Redis at \(redisAddress); Redis rows skipped")
        return
    }
    // Runs once, in the process that runs this row (each row runs in its own process).
    var once = configuration()
    once.maxIterations = 1
    once.warmupIterations = 0
    Benchmark("Redis GET vs redis-benchmark, same server, same run (prints a table)", configuration: once) { _ in
        compareWithRedisBenchmark(client)
    }
    Benchmark("Redis GET round trip (1 in flight, from another thread)", configuration: configuration()) { benchmark in
        roundTrips(client, ["GET", "bench:key"], depth: 1, iterations: benchmark.scaledIterations.count)
    }
    Benchmark("Redis SET round trip (1 in flight, from another thread)", configuration: configuration()) { benchmark in
        roundTrips(client, ["SET", "bench:key", "0123456789abcdef0123456789abcdef"], depth: 1, iterations: benchmark.scaledIterations.count)
    }
    let chained = LoopChain(client, ["GET", "bench:key"], depth: 1)
    Benchmark("Redis GET ×100 round trips chained on the client's loop (per 100)", configuration: configuration()) { benchmark in
        for _ in benchmark.scaledIterations { chained.run(rounds: 100) }
    }
    Benchmark("Redis GET ×16 pipelined (per batch, from another thread)", configuration: configuration()) { benchmark in
        roundTrips(client, ["GET", "bench:key"], depth: 16, iterations: benchmark.scaledIterations.count)
    }
    Benchmark("Redis SET ×16 pipelined (per batch, from another thread)", configuration: configuration()) { benchmark in
        roundTrips(client, ["SET", "bench:key", "0123456789abcdef0123456789abcdef"], depth: 16, iterations: benchmark.scaledIterations.count)
    }
    let batches = LoopChain(client, ["GET", "bench:key"], depth: 16)
    Benchmark("Redis GET ×16 sent one by one on the client's loop, ×10 batches (per 10)", configuration: configuration()) { benchmark in
        for _ in benchmark.scaledIterations { batches.run(rounds: 10) }
    }
}
