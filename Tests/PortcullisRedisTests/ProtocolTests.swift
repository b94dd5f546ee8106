import Testing
import PortcullisTestSupport
import PortcullisCore
import PortcullisIO
@testable import PortcullisRedis

/// The codec and configuration parts, fed bytes and strings: no sockets.
@Suite(.serialized) struct ProtocolTests {
    @Test func readerDecodesEveryReplyKindAcrossSplitFeeds() throws {
        let reader = RESPReader()
        let wire = Array("+OK\r\n-ERR bad\r\n:42\r\n$5\r\nhe\0lo\r\n$-1\r\n*3\r\n$1\r\na\r\n:7\r\n*0\r\n".utf8)
        // One byte at a time: the reader must keep partial replies.
        var replies: [RedisReply] = []
        for b in wire {
            try [b].withUnsafeBytes { try reader.feed($0) }
            while let r = try reader.next() { replies.append(r) }
        }
        #expect(replies == [.simpleString("OK"), .error("ERR bad"), .integer(42),
                            .bulk([104, 101, 0, 108, 111]), .null,
                            .array([.bulk([97]), .integer(7), .array([])])])
    }

    @Test func readerRejectsGarbage() throws {
        let reader = RESPReader()
        try Array("?what\r\n".utf8).withUnsafeBytes { try reader.feed($0) }
        #expect(throws: RedisError.self) { _ = try reader.next() }
    }

    @Test func encoderWritesArgvAsBulkStrings() {
        var out = ByteBuffer()
        RESPEncoder.append(["SET", "k", "vä"], to: &out)
        #expect(Array(out.readable) == Array("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$3\r\nvä\r\n".utf8))
    }

    @Test func urlCarriesUserPasswordHostPortAndDatabase() throws {
        let c = try RedisConfiguration(url: "redis://alice:p%40ss@127.0.0.1:6380/3")
        #expect(c.topology == .standalone(try SocketAddress(parsing: "127.0.0.1:6380")))
        #expect(c.username == "alice")
        #expect(c.password == "p@ss")
        #expect(c.database == 3)
        #expect(c.handshake == [["AUTH", "alice", "p@ss"], ["SELECT", "3"]])

        let d = try RedisConfiguration(url: "redis://:secret@localhost")
        #expect(d.username == nil && d.password == "secret" && d.database == 0)
        #expect(d.topology == .standalone(try SocketAddress(parsing: "127.0.0.1:6379")))
        #expect(d.handshake == [["AUTH", "secret"]])

        let e = try RedisConfiguration(url: "redis://[::1]:7000/0")
        #expect(e.password == nil && e.handshake.isEmpty)

        // A service name (Kubernetes, Compose): resolved at each connect, off the loops.
        let f = try RedisConfiguration(url: "redis://:pw@redis-master.cache.svc.cluster.local:6380/1")
        #expect(f.topology == .standaloneHost("redis-master.cache.svc.cluster.local", port: 6380) && f.tls == nil)
    }

    @Test(arguments: ["http://127.0.0.1", "redis://127.0.0.1:x", "redis://127.0.0.1/zero", "redis://bad_host:6379", "rediss://bad_host:6379", "redis://:pw@:6379"])
    func badURLsAreRefused(_ url: String) {
        #expect(throws: RedisError.self) { _ = try RedisConfiguration(url: url) }
    }

    @Test func redactedURLHidesThePassword() {
        #expect(RedisConfiguration.redacted("redis://alice:pw@127.0.0.1:1/0") == "redis://alice:***@127.0.0.1:1/0")
        #expect(RedisConfiguration.redacted("redis://127.0.0.1:1") == "redis://127.0.0.1:1")
        // Whatever the scheme (a mistyped one is reported with the URL).
        #expect(RedisConfiguration.redacted("http://alice:pw@h:1/0") == "http://alice:***@h:1/0")
        #expect(RedisConfiguration.redacted("redis:/alice:pw@h") == "***@h")
        #expect(RedisConfiguration.redacted("rediss://:pw@h") == "rediss://:***@h")
        // The userinfo ends at the last '@', as the URL is read: what could be a password is hidden.
        #expect(RedisConfiguration.redacted("redis://h:1/0?x=a@b") == "redis://h:***@b")
    }

    /// #33.6: a password holding '/', '%', '@', '?' or '#' (written as is, not escaped) is
    /// hidden whole in every form and still authenticates as written.
    @Test(arguments: ["pa/ss/word", "50%off", "p@ss@word", "p%2Fx", "a?b#c/d@e"])
    func aPasswordWithURLCharactersIsHiddenWholeAndReadAsWritten(_ password: String) throws {
        let url = "redis://:\(password)@127.0.0.1:6380/2"
        #expect(RedisConfiguration.redacted(url) == "redis://:***@127.0.0.1:6380/2")
        let withUser = "rediss://alice:\(password)@cache.internal:6380"
        #expect(RedisConfiguration.redacted(withUser) == "rediss://alice:***@cache.internal:6380")
        let configuration = try RedisConfiguration(url: url)
        let expected = password == "p%2Fx" ? "p/x" : password  // a real escape is decoded
        #expect(configuration.password == expected && configuration.database == 2)
    }

    @Test func backoffGrowsIsCappedAndJittered() {
        let b = ReconnectBackoff(initial: 0.1, maximum: 1, multiplier: 2, jitter: 0.5)
        #expect(b.delay(attempt: 0, random: 0) == 0.1)
        #expect(b.delay(attempt: 3, random: 0) == 0.8)
        #expect(b.delay(attempt: 10, random: 0) == 1)
        #expect(b.delay(attempt: 10, random: 0.999) > 0.5)
        #expect(b.delay(attempt: 10, random: 0.999) < 0.51)
    }

    @Test func switchMasterPayloadParses() {
        let e = SwitchMasterEvent(payload: "mymaster 127.0.0.1 6379 127.0.0.1 6380")
        #expect(e?.masterName == "mymaster")
        #expect(e?.newAddress.port == 6380)
        #expect(SwitchMasterEvent(payload: "junk") == nil)
    }
}
