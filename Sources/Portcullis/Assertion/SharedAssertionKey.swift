import PortcullisEdgeAuth
import Dispatch
import Logging
import PortcullisAuth
import PortcullisRedis

/// A generated assertion signing key shared by every instance through Redis, so each
/// instance publishes the key the others sign with: `portcullis:assertion:signing-key:<alg>`
/// holds a PKCS #8 PEM private key. The first instance writes its key with `SET … NX`;
/// everyone then `GET`s the winner and signs with it. The key is a secret: Redis is trusted
/// as it is for revocations and TLS ticket keys. It never expires; delete it (and restart
/// or SIGHUP nothing: instances read it at start) to roll a new one, or configure
/// `signing_keys` for planned rotation.
///
/// Threading: `fetch` blocks (bounded); called at start and from a retry timer, never on a loop.
enum SharedAssertionKey {
    static func name(_ settings: AssertionSettings) -> String { "portcullis:assertion:signing-key:\(settings.algorithm.rawValue)" }

    static func fetch(client: RedisClient, settings: AssertionSettings, timeout: Double) -> Result<SigningKey, SharedKeyError> {
        let candidate: SigningKey
        do { candidate = try SigningKey.generate(settings.algorithm) } catch { return .failure(SharedKeyError(reason: "\(error)")) }
        guard let pem = candidate.privateKeyPEM else { return .failure(SharedKeyError(reason: "cannot export the generated key")) }
        let name = name(settings)
        guard let replies = client.pipelineAndWait([["SET", name, pem, "NX"], ["GET", name]], timeout: timeout), replies.count == 2 else {
            return .failure(SharedKeyError(reason: "no reply within \(timeout) s"))
        }
        let text: String
        switch replies[1] {
        case .success(let reply):
            guard let value = reply.string else { return .failure(SharedKeyError(reason: "no key stored")) }
            text = value
        case .failure(let error):
            return .failure(SharedKeyError(reason: "\(error)"))
        }
        do {
            let key = try SigningKey(privateKeyPEM: text)
            guard key.algorithm == settings.algorithm else {
                return .failure(SharedKeyError(reason: "\(name) holds a \(key.algorithm.rawValue) key"))
            }
            return .success(key)
        } catch {
            return .failure(SharedKeyError(reason: "\(name) does not hold a PEM private key"))
        }
    }

    /// Fetches now (bounded) and, until it succeeds, every `retry` seconds in the
    /// background; the locally generated key signs meanwhile. Logged once per change.
    static func install(keys: AssertionKeys, client: RedisClient, logger: Logger, timeout: Double = 2, retry: Double = 5) {
        let settings = keys.settings
        @Sendable func attempt(first: Bool) {
            switch fetch(client: client, settings: settings, timeout: timeout) {
            case .success(let key):
                keys.adopt(key)
                logger.info("identity assertion key shared through the store", metadata: ["kid": "\(key.thumbprint)"])
            case .failure(let error):
                if first {
                    logger.warning("identity assertion key not shared yet; signing with this instance's own key until the store answers",
                                   metadata: ["reason": "\(error.reason)", "retry_seconds": "\(retry)"])
                }
                DispatchQueue.global().asyncAfter(deadline: .now() + retry) { attempt(first: false) }
            }
        }
        attempt(first: true)
    }

    struct SharedKeyError: Error { var reason: String }
}
