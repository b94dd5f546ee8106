// Micro benchmarks of the revocation check (the per-request hot path) and of a
// Redis round trip through PortcullisRedis.
//
//   redis-server --port 6399 --save "" --appendonly no --daemonize yes   # for the Redis rows
//   PORTCULLIS_BENCHMARKS=1 swift package benchmark --target StoreBenchmarks
//   redis-benchmark -p 6399 -q -t get,set -n 100000 -P 1    (and -P 16), to compare
//
// PORTCULLIS_BENCH_REDIS overrides the Redis address (default 127.0.0.1:6399);
// the Redis rows are skipped when nothing answers there.
//
// Measured on the 2-core shared VM (Swift 6.3.1, redis-server 7.0.15), wall clock, p0 / p50:
//
//   row                                          p0        p50       mallocs/sample
//   check, 10k entries, 3 misses (jti+sess+sub)  28-30 ns  29-60 ns  16 per 1000 checks (harness: 0 per check)
//   check, 10k entries, revoked jti              23-47 ns  43-55 ns  16 per 1000 checks (harness: 0 per check)
//   (before the hash index of RevocationTable: 143-178 ns / 241-328 ns and 87 / 125-161 ns;
//   instructions per check: Profile/callgrind-check.sh)
//   Redis GET, 1 in flight                       56 µs     156 µs    26
//   Redis SET, 1 in flight                       83 µs     255 µs    25
//   Redis GET ×16 pipelined, per batch           70 µs     206 µs    92
//   Redis SET ×16 pipelined, per batch           71 µs     142 µs    77
//
// redis-benchmark -q -t get,set -n 100000 -P 1: SET 27.0k/s, GET 32.4k/s (50 clients);
// with -c 1: SET 25.3k/s (p50 31 µs), GET 22.7k/s (p50 39 µs). -P 16: SET 407k/s, GET 510k/s
// (50 clients); -c 1 -P 16: SET 322k/s, GET 389k/s. Our single round trip includes a
// queue hop onto the client loop and a semaphore wake-up of the benchmark thread.
// The malloc budget (18) is the harness's own per-sample allocations.
import Benchmark
import Dispatch
#if canImport(Glibc)
import Glibc
#endif
import PortcullisCore
import PortcullisIO
import PortcullisRedis
import PortcullisStore

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

let redisAddress = (try? SocketAddress(parsing: Benchmark.environment("PORTCULLIS_BENCH_REDIS") ?? "127.0.0.1:6399"))!

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
    Benchmark("Redis GET round trip (1 in flight)", configuration: configuration()) { benchmark in
        roundTrips(client, ["GET", "bench:key"], depth: 1, iterations: benchmark.scaledIterations.count)
    }
    Benchmark("Redis SET round trip (1 in flight)", configuration: configuration()) { benchmark in
        roundTrips(client, ["SET", "bench:key", "0123456789abcdef0123456789abcdef"], depth: 1, iterations: benchmark.scaledIterations.count)
    }
    Benchmark("Redis GET ×16 pipelined (per batch)", configuration: configuration()) { benchmark in
        roundTrips(client, ["GET", "bench:key"], depth: 16, iterations: benchmark.scaledIterations.count)
    }
    Benchmark("Redis SET ×16 pipelined (per batch)", configuration: configuration()) { benchmark in
        roundTrips(client, ["SET", "bench:key", "0123456789abcdef0123456789abcdef"], depth: 16, iterations: benchmark.scaledIterations.count)
    }
}
