import PortcullisRedis
import PortcullisTLS

/// `store` (embedded, or Redis by URL, Sentinel or Cluster, with `tls`) and `revocation`
/// (`max_staleness`, `on_unavailable`).
extension ConfigurationLoader {
    static func store(_ storeNode: ConfigNode?, revocation: ConfigNode?) throws(ConfigurationError) -> StoreSettings {
        var store = StoreSettings()
        if var node = storeNode {
            if let n = try node.optional("redis") {
                let url = try n.string()
                do { _ = try RedisConfiguration(url: url) } catch {
                    throw n.error("expected redis[s]://[user][:password]@host:port/db (\(error))")
                }
                store.redisURL = url
            }
            // The password (and ACL user) beside the URL, as every secret: {file}, {env}, {value}
            // or a string; it wins over a password in the URL.
            if let n = try node.optional("password") { store.redisPassword = try n.secret(bare: true) }
            if let n = try node.optional("username") { store.redisUsername = try n.string() }
            // TLS to Redis (and the sentinels): implied by rediss://, needed here only to name a
            // CA file or a server name, or for TLS with sentinel or a cluster.
            if let n = try node.optional("tls") { store.redisTLS = try redisTLS(n) }
            if var n = try node.optional("sentinel") {
                store.sentinelMaster = try n.required("master").string()
                if let p = try n.optional("password") { store.sentinelPassword = try p.secret(bare: true) }
                let addresses = try n.required("addresses")
                store.sentinelAddresses = try addresses.sequence().map { item throws(ConfigurationError) in try socketAddress(item) }
                if store.sentinelAddresses.isEmpty { throw addresses.error("needs at least one sentinel address") }
                try n.finish()
            }
            if var n = try node.optional("cluster") {
                // A Redis Cluster: seed nodes (IP:port; the slot map names the rest), and the
                // nodes' AUTH and TLS here or beside them (store.password, store.tls).
                let nodes = try n.required("nodes")
                store.clusterNodes = try nodes.sequence().map { item throws(ConfigurationError) in try socketAddress(item) }
                if store.clusterNodes.isEmpty { throw nodes.error("needs at least one node address") }
                if let p = try n.optional("password") { store.redisPassword = try p.secret(bare: true) }
                if let u = try n.optional("username") { store.redisUsername = try u.string() }
                if let t = try n.optional("tls") { store.redisTLS = try redisTLS(t) }
                try n.finish()
                if store.redisURL != nil || store.sentinelMaster != nil {
                    throw node.error("store.cluster cannot be combined with store.redis or store.sentinel: set one way to reach Redis")
                }
            }
            if (store.redisPassword != nil || store.redisUsername != nil) && !store.usesRedis {
                throw node.error("password and username are Redis's: set store.redis, store.sentinel or store.cluster")
            }
            if let n = try node.optional("state_dir") {
                let path = try n.string()
                guard path.hasPrefix("/") else { throw n.error("expected an absolute directory path, got '\(path)'") }
                if store.usesRedis {
                    throw n.error("with Redis the revocations live in Redis; state_dir is for the embedded store")
                }
                store.stateDirectory = path
            }
            try node.finish()
        }
        if var node = revocation {
            if let n = try node.optional("max_staleness") { store.maxStaleness = try n.duration() }
            if let n = try node.optional("on_unavailable") {
                switch try n.string() {
                case "deny": store.denyWhenUnavailable = true
                case "allow": store.denyWhenUnavailable = false
                case let other: throw n.error("expected deny or allow, got '\(other)'")
                }
            }
            try node.finish()
        }
        return store
    }

    /// `tls: {ca_file, server_name}` towards Redis.
    private static func redisTLS(_ node: ConfigNode) throws(ConfigurationError) -> RedisConfiguration.TLS {
        var n = node
        var tls = RedisConfiguration.TLS()
        if let ca = try n.optional("ca_file") { tls.caFile = try ca.caFile() }
        tls.serverName = try n.optional("server_name")?.string()
        try n.finish()
        return tls
    }
}
