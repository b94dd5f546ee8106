import PortcullisIO

/// Asks the sentinels, one after another, for the current master's address
/// (`SENTINEL get-master-addr-by-name <name>`). The first sentinel that answers
/// moves to the front of the list, as the Sentinel client guidelines advise.
/// A sentinel that does not know the master, refuses, or times out is skipped.
///
/// Threading: used on one loop queue.
final class SentinelDiscovery: AddressResolver {
    let masterName: String
    private var sentinels: [SocketAddress]
    private let password: String?
    private let timeout: Double
    /// Sentinels are spoken to over TLS when the data connections are.
    private let tls: RedisTLSClient?

    init(masterName: String, sentinels: [SocketAddress], password: String?, timeout: Double, tls: RedisTLSClient? = nil) {
        self.tls = tls
        precondition(!sentinels.isEmpty, "Sentinel topology needs at least one sentinel")
        self.masterName = masterName
        self.sentinels = sentinels
        self.password = password
        self.timeout = timeout
    }

    func resolve(on loop: EventLoop, completion: @escaping (Result<SocketAddress, RedisError>) -> Void) {
        query(0, on: loop, lastError: nil, completion: completion)
    }

    private func query(_ index: Int, on loop: EventLoop, lastError: RedisError?,
                       completion: @escaping (Result<SocketAddress, RedisError>) -> Void) {
        guard index < sentinels.count else {
            let why = lastError.map { ": last error \($0)" } ?? ""
            completion(.failure(.disconnected(reason: "no sentinel gave the address of master '\(masterName)'\(why)")))
            return
        }
        let sentinel = sentinels[index]
        let conn = RedisConnection(address: sentinel, loop: loop, reconnectOnTimeout: false, tls: tls)
        conn.onClose = { [self] error in query(index + 1, on: loop, lastError: error, completion: completion) }
        conn.connect(timeout: timeout) { [self] in
            if let password { conn.enqueue(.strings(["AUTH", password]), timeout: timeout) { _ in } }
            conn.enqueue(.strings(["SENTINEL", "get-master-addr-by-name", masterName]), timeout: timeout) { [self] result in
                switch result {
                case .success(.array(let items)) where items.count == 2:
                    let host = items[0].string ?? ""
                    let port = items[1].string ?? ""
                    let text = host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)"
                    if let address = try? SocketAddress(parsing: text) {
                        conn.onClose = nil
                        conn.close(.shutdown)
                        promote(index)
                        completion(.success(address))
                    } else {
                        conn.close(.protocolViolation("sentinel \(sentinel) named master '\(text)', not a numeric address"))
                    }
                case .success:
                    conn.close(.server("sentinel \(sentinel) does not know master '\(masterName)'"))
                case .failure(let error):
                    conn.close(error)
                }
            }
            conn.flush()
        }
    }

    private func promote(_ index: Int) {
        guard index > 0 else { return }
        let s = sentinels.remove(at: index)
        sentinels.insert(s, at: 0)
    }
}
