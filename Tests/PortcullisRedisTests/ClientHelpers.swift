import Dispatch
import PortcullisTestSupport
import PortcullisIO
import PortcullisRedis

extension RedisClient {
    /// Sends and waits (on the test thread, never on a loop queue) at most `wait` seconds.
    func call(_ arguments: [String], timeout: Double? = nil, wait: Double = 5) -> Result<RedisReply, RedisError> {
        let done = DispatchSemaphore(value: 0)
        let box = Locked<Result<RedisReply, RedisError>?>(nil)
        send(arguments, timeout: timeout) { result in
            box.update { $0 = result }
            done.signal()
        }
        guard done.wait(timeout: .now() + wait) == .success else {
            return .failure(.disconnected(reason: "test: no completion within \(wait)s"))
        }
        return box.get()!
    }

    /// The address in use, read on the loop queue.
    var currentAddress: SocketAddress? {
        loop.queue.sync { connectedAddress }
    }
}

/// Records state changes for assertions.
final class StateLog: @unchecked Sendable {
    // @unchecked Sendable: state in a Locked box.
    let states = Locked<[RedisConnectionState]>([])
    var handler: @Sendable (RedisConnectionState) -> Void {
        { [states] s in states.update { $0.append(s) } }
    }
    var last: RedisConnectionState? { states.get().last }
    var isConnected: Bool { if case .connected = last { return true } else { return false } }
    var isDisconnected: Bool { if case .disconnected = last { return true } else { return false } }
    func count(where predicate: (RedisConnectionState) -> Bool) -> Int { states.get().filter(predicate).count }
}

func isDisconnectedState(_ s: RedisConnectionState) -> Bool { if case .disconnected = s { return true } else { return false } }
func isConnectedState(_ s: RedisConnectionState) -> Bool { if case .connected = s { return true } else { return false } }

func standalone(_ server: RedisProcess, commandTimeout: Double = 2) -> RedisConfiguration {
    RedisConfiguration(topology: .standalone(try! SocketAddress(parsing: "127.0.0.1:\(server.port)")),
                       commandTimeout: commandTimeout, connectTimeout: 1,
                       backoff: ReconnectBackoff(initial: 0.02, maximum: 0.2))
}
