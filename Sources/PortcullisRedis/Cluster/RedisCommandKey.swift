/// The key a command is routed by on a Redis Cluster: the first key of a keyed command
/// (`EVAL`/`EVALSHA`/`FCALL` name theirs after `numkeys`), nil for a command that names
/// none (`PUBLISH`, `WAIT`, `ROLE`, `PING`…; `SPUBLISH` is routed by its channel, whose
/// slot's shard delivers it). A pipeline sends each keyless command to the
/// node of the keyed command before it (`WAIT` counts the replicas of that node's writes;
/// classic `PUBLISH` reaches every node from any one), or of the first keyed command.
///
/// Commands of several keys (`DEL a b`, a script with two keys) must keep them in one slot
/// (hash tags); Redis refuses the others with `CROSSSLOT`.
public enum RedisCommandKey {
    /// Commands that name no key (upper case).
    static let keyless: Set<String> = [
        "PUBLISH", "WAIT", "WAITAOF", "ROLE", "PING", "ECHO", "INFO", "TIME", "SCRIPT", "FUNCTION",
        "CLUSTER", "ASKING", "READONLY", "READWRITE", "DBSIZE", "CONFIG", "CLIENT", "SCAN", "FLUSHALL", "FLUSHDB",
        "HELLO", "AUTH", "SELECT", "COMMAND", "MULTI", "EXEC", "DISCARD", "SUBSCRIBE", "PSUBSCRIBE", "LASTSAVE",
        "SAVE", "BGSAVE", "DEBUG", "SLOWLOG", "LATENCY",
    ]

    public static func key(of arguments: [String]) -> String? {
        guard let name = arguments.first else { return nil }
        return key(name: name.uppercased(), count: arguments.count) { arguments[$0] }
    }

    static func key(of arguments: CommandArguments) -> String? {
        switch arguments {
        case .strings(let a): return key(of: a)
        case .bytes(let a):
            guard let first = a.first else { return nil }
            return key(name: String(decoding: first, as: UTF8.self).uppercased(), count: a.count) {
                String(decoding: a[$0], as: UTF8.self)
            }
        }
    }

    private static func key(name: String, count: Int, _ argument: (Int) -> String) -> String? {
        if keyless.contains(name) { return nil }
        switch name {
        case "EVAL", "EVALSHA", "EVAL_RO", "EVALSHA_RO", "FCALL", "FCALL_RO":
            guard count > 3, let keys = Int(argument(2)), keys > 0 else { return nil }
            return argument(3)
        case "XINFO", "OBJECT", "MEMORY":
            // A subcommand, then the key (`XINFO STREAM <key>`, `MEMORY USAGE <key>`).
            return count > 2 ? argument(2) : nil
        default:
            return count > 1 ? argument(1) : nil
        }
    }

    /// Each command with the key it is routed by: its own, else the keyed command's before
    /// it, else the first keyed command's ("" when none names a key: any node).
    public static func routed(_ commands: [[String]]) -> [(key: String, arguments: [String])] {
        var last = commands.lazy.compactMap { key(of: $0) }.first ?? ""
        return commands.map { command in
            if let key = key(of: command) { last = key }
            return (last, command)
        }
    }
}
