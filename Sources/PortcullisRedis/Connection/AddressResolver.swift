import PortcullisIO

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
