/// Redis Cluster's key → slot mapping (the cluster specification, "Key distribution
/// model"): CRC16 (XMODEM: polynomial 0x1021, initial 0) of the key, modulo 16384; when the
/// key has a hash tag — the bytes between its first `{` and the first `}` after it, if any —
/// only the tag is hashed, so keys sharing a tag share a slot and may meet in one command or
/// script.
public enum HashSlot {
    public static let count = 16_384

    /// The slot of `key`.
    public static func of(_ key: some Collection<UInt8>) -> Int {
        Int(crc16(tag(of: Array(key))) % UInt16(count))
    }

    public static func of(_ key: String) -> Int { of(key.utf8) }

    /// The bytes that are hashed: the hash tag when the key has a non-empty one, else the key.
    static func tag(of key: [UInt8]) -> ArraySlice<UInt8> {
        guard let open = key.firstIndex(of: UInt8(ascii: "{")),
              let close = key[(open + 1)...].firstIndex(of: UInt8(ascii: "}")),
              close > open + 1 else { return key[...] }
        return key[(open + 1)..<close]
    }

    /// CRC16/XMODEM, table-driven.
    static func crc16(_ bytes: ArraySlice<UInt8>) -> UInt16 {
        var crc: UInt16 = 0
        for byte in bytes {
            crc = (crc << 8) ^ table[Int(UInt8(truncatingIfNeeded: crc >> 8) ^ byte)]
        }
        return crc
    }

    private static let table: [UInt16] = (0..<256).map { index in
        var crc = UInt16(index) << 8
        for _ in 0..<8 { crc = crc & 0x8000 != 0 ? (crc << 1) ^ 0x1021 : crc << 1 }
        return crc
    }
}

/// A `-MOVED` or `-ASK` error reply: the slot and the node that serves it (`MOVED`: from
/// now on; `ASK`: for this one command, sent after `ASKING`).
public struct ClusterRedirect: Sendable, Equatable {
    public enum Kind: Sendable, Equatable { case moved, ask }
    public let kind: Kind
    public let slot: Int
    /// The node's host as the cluster announced it; nil when it announced none (an empty or
    /// `?` endpoint: the host of the node that answered, on `port`).
    public let host: String?
    public let port: UInt16

    public init(kind: Kind, slot: Int, host: String?, port: UInt16) {
        self.kind = kind
        self.slot = slot
        self.host = host
        self.port = port
    }

    /// Parses an error reply's text (`MOVED 3999 127.0.0.1:6381`, `ASK 3999 [::1]:6381`,
    /// `MOVED 3999 :6381`); nil for any other error.
    public init?(error text: String) {
        let parts = text.split(separator: " ", omittingEmptySubsequences: true)
        guard parts.count == 3 else { return nil }
        switch parts[0] {
        case "MOVED": kind = .moved
        case "ASK": kind = .ask
        default: return nil
        }
        guard let slot = Int(parts[1]), slot >= 0, slot < HashSlot.count,
              let colon = parts[2].lastIndex(of: ":"), let port = UInt16(parts[2][parts[2].index(after: colon)...]), port > 0
        else { return nil }
        var host = Substring(parts[2][..<colon])
        if host.hasPrefix("[") && host.hasSuffix("]") { host = host.dropFirst().dropLast() }
        self.slot = slot
        self.host = host.isEmpty || host == "?" ? nil : String(host)
        self.port = port
    }
}
