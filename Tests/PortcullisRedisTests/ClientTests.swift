import Foundation
import Testing
import PortcullisTestSupport
import PortcullisIO
import PortcullisRedis

/// The client against real redis-server processes on loopback.
@Suite(.serialized) struct ClientTests {
    let loop = EventLoop(index: 90)

    @Test func commandsReturnTypedReplies() throws {
        let server = try RedisProcess()
        let client = RedisClient(configuration: standalone(server), loop: loop)
        client.start()
        defer { client.shutdown() }
        #expect(client.call(["SET", "greeting", "hello"]) == .success(.simpleString("OK")))
        #expect(client.call(["GET", "greeting"]) == .success(.bulk(Array("hello".utf8))))
        #expect(client.call(["GET", "missing"]) == .success(.null))
        #expect(client.call(["INCRBY", "n", "5"]) == .success(.integer(5)))
        #expect(client.call(["RPUSH", "l", "a", "b"]) == .success(.integer(2)))
        #expect(client.call(["LRANGE", "l", "0", "-1"]) == .success(.array([.bulk([97]), .bulk([98])])))
        guard case .failure(.server(let text)) = client.call(["INCR", "greeting"]) else {
            Issue.record("INCR on a string must be a server error"); return
        }
        #expect(text.hasPrefix("ERR"))

        // Binary-safe values.
        let blob: [UInt8] = [0, 13, 10, 255, 36]
        let done = Locked<RedisReply?>(nil)
        client.send(bytes: [Array("SET".utf8), Array("blob".utf8), blob]) { _ in }
        client.send(bytes: [Array("GET".utf8), Array("blob".utf8)]) { r in done.update { $0 = try? r.get() } }
        #expect(waitUntil(5) { done.get() != nil })
        #expect(done.get() == .bulk(blob))
    }

    @Test func pipelinedCommandsAreAnsweredInOrder() throws {
        let server = try RedisProcess()
        let client = RedisClient(configuration: standalone(server), loop: loop)
        client.start()
        defer { client.shutdown() }
        #expect(client.call(["PING"]) == .success(.simpleString("PONG")))

        // Many single sends in flight at once, from another thread.
        let n = 2000
        let seen = Locked<[Int64]>([Int64]())
        for _ in 0..<n {
            client.send(["INCR", "counter"]) { r in seen.update { $0.append((try? r.get())?.integer ?? -1) } }
        }
        #expect(waitUntil(10) { seen.get().count == n })
        #expect(seen.get() == (1...Int64(n)).map { $0 })

        // One batch in one write.
        let batch = Locked<[Result<RedisReply, RedisError>]>([Result<RedisReply, RedisError>]())
        client.pipeline((0..<100).map { _ in ["INCR", "counter2"] }) { results in batch.update { $0 = results } }
        #expect(waitUntil(5) { batch.get().count == 100 })
        #expect(batch.get().map { (try? $0.get())?.integer } == (1...100).map { Int64($0) })
    }

    @Test func commandsSentOnTheLoopFromCompletionsAreWrittenTogetherAndAnsweredInOrder() throws {
        let server = try RedisProcess()
        let client = RedisClient(configuration: standalone(server), loop: loop)
        client.start()
        defer { client.shutdown() }
        #expect(client.call(["PING"]) == .success(.simpleString("PONG")))
        // 50 rounds of 16 INCRs, each round sent one by one (no hop, corked into one
        // write) from the previous round's last completion, plus a pipeline per round.
        let seen = Locked<[Int64]>([Int64]())
        let pipelined = Locked<[Int64]>([Int64]())
        let finished = Locked(false)
        @Sendable func round(_ left: Int) {
            guard left > 0 else { finished.update { $0 = true }; return }
            let outstanding = Locked(16)
            for _ in 0..<16 {
                client.send(["INCR", "counter"]) { r in
                    seen.update { $0.append((try? r.get())?.integer ?? -1) }
                    var last = false
                    outstanding.update { $0 -= 1; last = $0 == 0 }
                    if last { round(left - 1) }
                }
            }
            client.pipeline([["INCR", "other"], ["INCR", "other"]]) { results in
                pipelined.update { $0 += results.map { (try? $0.get())?.integer ?? -1 } }
            }
        }
        loop.execute { round(50) }
        #expect(waitUntil(10) { finished.get() })
        #expect(seen.get() == (1...800).map { Int64($0) })
        #expect(waitUntil(2) { pipelined.get().count == 100 })
        #expect(pipelined.get() == (1...100).map { Int64($0) })
    }

    @Test func aCommandPastItsTimeoutFailsAndTheClientRecovers() throws {
        let server = try RedisProcess()
        let log = StateLog()
        let client = RedisClient(configuration: standalone(server), loop: loop, onStateChange: log.handler)
        client.start()
        defer { client.shutdown() }
        #expect(client.call(["PING"]) == .success(.simpleString("PONG")))
        let start = Date()
        // BLPOP blocks server-side for 8 s; our timeout is 150 ms: the failure comes from
        // the timeout, long before the server would answer (not a bound on timer lateness).
        #expect(client.call(["BLPOP", "nothing", "8"], timeout: 0.15, wait: 10) == .failure(.timeout))
        let elapsed = Date().timeIntervalSince(start)
        #expect(elapsed < 8, "timeout took \(elapsed)s")
        // The stuck connection is replaced; later commands work.
        #expect(waitUntil(5) { client.call(["PING"]) == .success(.simpleString("PONG")) })
    }

    @Test func passwordAuthentication() throws {
        let server = try RedisProcess(extra: ["--requirepass", "s3cret"])
        let good = RedisClient(configuration: try RedisConfiguration(url: "redis://:s3cret@127.0.0.1:\(server.port)"), loop: loop)
        good.start()
        defer { good.shutdown() }
        #expect(good.call(["PING"]) == .success(.simpleString("PONG")))

        let log = StateLog()
        var wrong = try RedisConfiguration(url: "redis://:nope@127.0.0.1:\(server.port)")
        wrong.backoff = ReconnectBackoff(initial: 0.05, maximum: 0.2)
        let bad = RedisClient(configuration: wrong, loop: loop, onStateChange: log.handler)
        bad.start()
        defer { bad.shutdown() }
        #expect(waitUntil(5) { log.isDisconnected })
        guard case .disconnected(.server(let text)) = log.last else { Issue.record("\(String(describing: log.last))"); return }
        #expect(text.contains("WRONGPASS") || text.contains("invalid"))
        usleep(300_000)
        // Retries keep failing, but the state was reported once.
        #expect(log.count(where: isDisconnectedState) == 1)
        guard case .failure(.disconnected) = bad.call(["PING"]) else { Issue.record("must not reach the server"); return }
    }

    @Test func aclUserAuthentication() throws {
        let server = try RedisProcess()
        #expect(server.cli(["ACL", "SETUSER", "gateway", "on", ">gw-pass", "~portcullis:*", "+@all"]) == "OK")
        let client = RedisClient(configuration: try RedisConfiguration(url: "redis://gateway:gw-pass@127.0.0.1:\(server.port)"), loop: loop)
        client.start()
        defer { client.shutdown() }
        #expect(client.call(["SET", "portcullis:x", "1"]) == .success(.simpleString("OK")))
        // The ACL applies: this user may not touch other keys.
        guard case .failure(.server(let text)) = client.call(["SET", "other", "1"]) else { Issue.record("ACL not applied"); return }
        #expect(text.hasPrefix("NOPERM"))
        #expect(client.call(["ACL", "WHOAMI"]) == .success(.bulk(Array("gateway".utf8))))
    }

    @Test func databaseIsSelected() throws {
        let server = try RedisProcess()
        let client = RedisClient(configuration: try RedisConfiguration(url: "redis://127.0.0.1:\(server.port)/3"), loop: loop)
        client.start()
        defer { client.shutdown() }
        #expect(client.call(["SET", "where", "db3"]) == .success(.simpleString("OK")))
        #expect(server.cli(["-n", "3", "GET", "where"]) == "db3")
        #expect(server.cli(["-n", "0", "EXISTS", "where"]) == "0")
    }

    @Test func reconnectsAfterTheServerIsKilledAndRestarted() throws {
        let server = try RedisProcess()
        let log = StateLog()
        let client = RedisClient(configuration: standalone(server), loop: loop, onStateChange: log.handler)
        client.start()
        defer { client.shutdown() }
        #expect(client.call(["SET", "k", "1"]) == .success(.simpleString("OK")))
        server.stop()
        #expect(waitUntil(5) { log.isDisconnected })
        // While down, commands fail at once instead of queueing.
        // (The typed failure is the proof: a queued command would have failed with .timeout.)
        guard case .failure(.disconnected) = client.call(["GET", "k"], timeout: 5, wait: 8) else { Issue.record("expected .disconnected"); return }
        usleep(500_000)  // several failed retries
        try server.restart()
        #expect(waitUntil(5) { log.isConnected })
        #expect(client.call(["PING"]) == .success(.simpleString("PONG")))
        #expect(log.count(where: isDisconnectedState) == 1)
        #expect(log.count(where: isConnectedState) == 2)
    }

    @Test func pubSubDeliversMessagesAndResubscribesAfterARestart() throws {
        let server = try RedisProcess()
        let messages = Locked<[RedisPubSubMessage]>([])
        let subscribedCount = Locked(0)
        let subscriber = RedisSubscriber(
            configuration: standalone(server), loop: loop, channels: ["news"], patterns: ["ev.*"],
            onMessage: { m in messages.update { $0.append(m) } },
            onSubscribed: { subscribedCount.update { $0 += 1 } })
        subscriber.start()
        defer { subscriber.shutdown() }
        let publisher = RedisClient(configuration: standalone(server), loop: loop)
        publisher.start()
        defer { publisher.shutdown() }

        #expect(waitUntil(5) { subscribedCount.get() == 1 })
        #expect(publisher.call(["PUBLISH", "news", "one"]) == .success(.integer(1)))
        #expect(publisher.call(["PUBLISH", "ev.login", "two"]) == .success(.integer(1)))
        #expect(waitUntil(5) { messages.get().count == 2 })
        #expect(messages.get()[0] == RedisPubSubMessage(channel: "news", pattern: nil, payload: Array("one".utf8)))
        #expect(messages.get()[1].pattern == "ev.*")
        #expect(messages.get()[1].channel == "ev.login")

        try server.restart()
        #expect(waitUntil(5) { subscribedCount.get() == 2 })
        #expect(waitUntil(5) { publisher.call(["PUBLISH", "news", "three"]) == .success(.integer(1)) })
        #expect(waitUntil(5) { messages.get().last?.text == "three" })
    }
}

/// A silent partition on the subscribed connection (the server frozen with SIGSTOP:
/// the TCP connection stays up, nothing answers) is noticed by the keepalive within
/// seconds, and the subscriber resubscribes once the server answers again.
@Suite(.serialized) struct SubscriberKeepaliveTests {
    let loop = EventLoop(index: 93)

    @Test func aFrozenServerIsNoticedWithinSecondsAndTheSubscriptionComesBack() throws {
        let server = try RedisProcess()
        let log = StateLog()
        let subscribed = Locked(0)
        let configuration = RedisConfiguration(topology: .standalone(try SocketAddress(parsing: "127.0.0.1:\(server.port)")),
                                               commandTimeout: 1, connectTimeout: 0.5,
                                               backoff: ReconnectBackoff(initial: 0.05, maximum: 0.3))
        let subscriber = RedisSubscriber(configuration: configuration, loop: loop, channels: ["news"],
                                         onMessage: { _ in }, onSubscribed: { subscribed.update { $0 += 1 } },
                                         onStateChange: log.handler)
        subscriber.start()
        defer { subscriber.shutdown() }
        #expect(waitUntil(5) { subscribed.get() == 1 })
        // Quiet but healthy: the keepalive must not drop a live connection.
        Thread.sleep(forTimeInterval: RedisSubscriber.keepaliveInterval * 2 + 1)
        #expect(log.count(where: isDisconnectedState) == 0, "a healthy idle subscription was dropped")

        kill(server.pid, SIGSTOP)
        let frozen = Date()
        #expect(waitUntil(10) { log.count(where: isDisconnectedState) >= 1 }, "the frozen server was not noticed")
        let noticed = Date().timeIntervalSince(frozen)
        #expect(noticed <= RedisSubscriber.keepaliveInterval + RedisSubscriber.keepaliveTimeout + 1.5, "noticed after \(noticed) s")
        kill(server.pid, SIGCONT)
        #expect(waitUntil(10) { subscribed.get() >= 2 }, "resubscribed once the server answered")
    }
}
