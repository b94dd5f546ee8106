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
            // The other sentinels this one knows, asked first so its answer is in before the
            // master's address closes the connection: a sentinel added (or a configured one
            // replaced) after start is found without a restart (Sentinel client guidelines).
            conn.enqueue(.strings(["SENTINEL", "sentinels", masterName]), timeout: timeout) { [self] result in
                if case .success(.array(let entries)) = result { learn(entries) }
            }
            conn.enqueue(.strings(["SENTINEL", "get-master-addr-by-name", masterName]), timeout: timeout) { [self] result in
                switch result {
                case .success(.array(let items)) where items.count == 2:
                    let host = items[0].string ?? ""
                    let port = items[1].string ?? ""
                    let text = host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)"
                    if let address = try? SocketAddress(parsing: text) {
                        conn.onClose = nil
                        conn.close(.shutdown)
                        promote(sentinel)
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

    private func promote(_ sentinel: SocketAddress) {
        guard let index = sentinels.firstIndex(of: sentinel), index > 0 else { return }
        let s = sentinels.remove(at: index)
        sentinels.insert(s, at: 0)
    }

    /// Adds the sentinels named in a `SENTINEL sentinels` reply (flat `ip`/`port`
    /// key-value lists) that the list does not have yet; bounded so a bad answer
    /// cannot grow it without end.
    private func learn(_ entries: [RedisReply]) {
        for entry in entries {
            guard let fields = entry.array else { continue }
            var ip: String?, port: String?
            var i = 0
            while i + 1 < fields.count {
                switch fields[i].string {
                case "ip": ip = fields[i + 1].string
                case "port": port = fields[i + 1].string
                default: break
                }
                i += 2
            }
            guard let ip, let port, sentinels.count < 32,
                  let address = try? SocketAddress(parsing: ip.contains(":") ? "[\(ip)]:\(port)" : "\(ip):\(port)"),
                  !sentinels.contains(address) else { continue }
            sentinels.append(address)
        }
    }

    /// The sentinels known now (configured plus learned), for tests and status.
    var knownSentinels: [SocketAddress] { sentinels }
}
