import PortcullisIO
import PortcullisTLS

/// Finds the address for the next connection attempt. Runs on the loop queue.
protocol AddressResolver: AnyObject {
    func resolve(on loop: EventLoop, completion: @escaping (Result<SocketAddress, RedisError>) -> Void)
}

/// Always the same address (a standalone server).
final class FixedAddress: AddressResolver {
    let address: SocketAddress
    init(_ address: SocketAddress) { self.address = address }
    func resolve(on loop: EventLoop, completion: @escaping (Result<SocketAddress, RedisError>) -> Void) {
        completion(.success(address))
    }
}

/// The next address of a list on every call (a subscriber to any one of several
/// sentinels). Used on one loop queue only.
final class RotatingAddresses: AddressResolver {
    private let addresses: [SocketAddress]
    private var next = 0
    init(_ addresses: [SocketAddress]) {
        precondition(!addresses.isEmpty)
        self.addresses = addresses
    }
    func resolve(on loop: EventLoop, completion: @escaping (Result<SocketAddress, RedisError>) -> Void) {
        let address = addresses[next % addresses.count]
        next &+= 1
        completion(.success(address))
    }
}

/// A host name looked up on every connect, off the loop (HostResolver); the first
/// address of each answer is used, the next on the following attempt.
final class ResolvedHost: AddressResolver, @unchecked Sendable {
    // @unchecked Sendable: `next` is touched only on the loop the resolution hops back to.
    let host: String
    let port: UInt16
    private var next = 0
    init(host: String, port: UInt16) {
        self.host = host
        self.port = port
    }
    func resolve(on loop: EventLoop, completion: @escaping (Result<SocketAddress, RedisError>) -> Void) {
        nonisolated(unsafe) let completion = completion  // runs on `loop` only (hopped below)
        HostResolver.resolve(host, port: port) { [self] result in
            loop.execute { [self] in
                switch result {
                case .success(let addresses):
                    next &+= 1
                    completion(.success(addresses[next % addresses.count]))
                case .failure(let error):
                    completion(.failure(.disconnected(reason: error.description)))
                }
            }
        }
    }
}

/// TLS towards Redis: one client context per configuration (tickets resume across
/// reconnects), and the name each connection's certificate must carry.
struct RedisTLSClient: @unchecked Sendable {
    // @unchecked Sendable: TLSClientContext is Sendable-safe (locked); the name is a value.
    let context: TLSClientContext
    /// nil: the address itself (its IP is checked).
    let serverName: String?
}

/// Every attempt fails with `reason` (a configuration that cannot work, reported
/// through the connection state like any other failure).
final class FailingResolver: AddressResolver {
    let reason: String
    init(reason: String) { self.reason = reason }
    func resolve(on loop: EventLoop, completion: @escaping (Result<SocketAddress, RedisError>) -> Void) {
        completion(.failure(.disconnected(reason: reason)))
    }
}
