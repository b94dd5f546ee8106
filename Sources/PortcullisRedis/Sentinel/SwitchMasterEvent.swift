import PortcullisIO

/// A sentinel's `+switch-master` message: `<master-name> <old-ip> <old-port> <new-ip> <new-port>`.
struct SwitchMasterEvent: Equatable {
    var masterName: String
    var newAddress: SocketAddress

    init?(payload: String) {
        let parts = payload.split(separator: " ")
        guard parts.count == 5 else { return nil }
        let host = parts[3].contains(":") ? "[\(parts[3])]" : String(parts[3])
        guard let address = try? SocketAddress(parsing: "\(host):\(parts[4])") else { return nil }
        masterName = String(parts[0])
        newAddress = address
    }
}
