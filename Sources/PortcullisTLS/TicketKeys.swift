internal import COpenSSL
import Dispatch
import PortcullisCore
#if canImport(Glibc)
import Glibc
#endif

/// Session-ticket keys, one per rotation period ("epoch" = seconds since the epoch
/// divided by the rotation interval). New tickets are sealed with the current
/// epoch's key; tickets sealed with either of the two previous epochs' keys are
/// still accepted (and renewed), so a ticket lives between two and three periods.
///
/// A key is 80 bytes: a 16-byte name (sent in the ticket), a 32-byte AES-256-CBC
/// key and a 32-byte HMAC-SHA256 key (RFC 5077's recommended construction, which is
/// what OpenSSL's ticket callback expects). Without a shared source each process
/// draws its own random keys; with one (`sharedSource`, the Redis store), every
/// instance adopts the same key for an epoch, so a client resumes on any instance.
///
/// Process-wide (`shared`): OpenSSL calls the ticket callback without a way to
/// reach one context's state cheaply, and every listener of a process may share keys.
///
/// Threading: any thread; the ring is behind a lock held only for lookups.
public final class TicketKeys: @unchecked Sendable {
    // @unchecked Sendable: mutable state only under `lock`.
    public static let shared = TicketKeys()

    struct Key {
        var epoch: Int64
        var bytes: [UInt8]  // 80: name, AES key, HMAC key
        /// Drawn here while a shared source was configured but did not answer: asked
        /// again on the next refresh, and replaced by the shared key when it comes.
        var provisional = false
        var name: ArraySlice<UInt8> { bytes[0..<16] }
    }

    public static let keyLength = 80
    private let lock = Lock()
    private var keys: [Key] = []  // newest epoch first, at most 3
    private var rotation: Double = 12 * 3600
    /// Supplies the key for an epoch from shared storage (nil: keep local keys).
    /// Called off the loops by `refresh()`; never from the handshake path.
    private var sharedSource: (@Sendable (Int64) -> [UInt8]?)?

    init() {}

    /// Seconds between key changes (default 12 hours).
    public var rotationInterval: Double {
        get { lock.withLock { rotation } }
        set { lock.withLock { rotation = max(1, newValue) } }
    }

    /// Takes keys from shared storage from now on (see `refresh()`).
    public func useSharedSource(_ source: @escaping @Sendable (Int64) -> [UInt8]?) {
        lock.withLock { sharedSource = source }
    }

    /// How long a ticket stays acceptable (for the hint OpenSSL sends).
    public var ticketLifetime: Double { rotationInterval * 2 }

    func currentEpoch(_ now: Double) -> Int64 { Int64(now / rotation) }

    /// Makes sure the previous, current and next epochs have keys (the next one is
    /// ready before the change, so no handshake ever waits); with a shared source,
    /// asks it. Called at start and from `startRotation`'s timer, never on a loop.
    public func refresh(now: Double = WallClock.nowSeconds()) {
        let (epoch, source) = lock.withLock { (currentEpoch(now), sharedSource) }
        for e in [epoch - 1, epoch, epoch + 1] {
            let have = lock.withLock { keys.first { $0.epoch == e } }
            if let have, !have.provisional { continue }
            var bytes = source?(e)
            if bytes?.count != Self.keyLength { bytes = nil }
            if let bytes {
                install(epoch: e, bytes: bytes)
            } else if have == nil && e == epoch {
                install(epoch: e, bytes: Self.randomKey(), provisional: source != nil)
            }
        }
    }

    /// Refreshes on a timer (a fraction of the rotation, at most every 5 minutes).
    public func startRotation() {
        lock.withLock {
            guard rotationTimer == nil else { return }
            let period = min(300, max(1, rotation / 8))
            let timer = DispatchSource.makeTimerSource(queue: .global())
            timer.schedule(deadline: .now() + period, repeating: period, leeway: .seconds(1))
            timer.setEventHandler { [weak self] in self?.refresh() }
            timer.resume()
            rotationTimer = timer
        }
    }

    private var rotationTimer: DispatchSourceTimer?

    /// Installs the key of `epoch` (from shared storage, or tests).
    public func install(epoch: Int64, bytes: [UInt8], provisional: Bool = false) {
        precondition(bytes.count == Self.keyLength)
        lock.withLock {
            keys.removeAll { $0.epoch == epoch }
            keys.append(Key(epoch: epoch, bytes: bytes, provisional: provisional))
            keys.sort { $0.epoch > $1.epoch }
            if keys.count > 4 { keys.removeLast(keys.count - 4) }
        }
    }

    /// 80 random bytes (RAND_bytes): a new key.
    public static func randomKey() -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: keyLength)
        precondition(RAND_bytes(&bytes, Int32(keyLength)) == 1, "RAND_bytes failed")
        return bytes
    }

    /// The key to seal a new ticket with: the current epoch's (created locally when
    /// the timer has not run yet, so a handshake never waits).
    func sealingKey(now: Double) -> Key {
        let epoch = lock.withLock { currentEpoch(now) }
        if let key = lock.withLock({ keys.first { $0.epoch == epoch } }) { return key }
        // The timer fell behind: a local key for now, replaced by the shared one later.
        install(epoch: epoch, bytes: Self.randomKey(), provisional: lock.withLock { sharedSource != nil })
        return lock.withLock { keys.first { $0.epoch == epoch }! }
    }

    /// The key named in a ticket, and whether the ticket should be renewed.
    func openingKey(name: UnsafePointer<UInt8>, now: Double) -> (Key, renew: Bool)? {
        lock.withLock {
            let epoch = currentEpoch(now)
            for key in keys where key.epoch >= epoch - 2 {
                if key.bytes.withUnsafeBufferPointer({ memcmp($0.baseAddress!, name, 16) == 0 }) {
                    return (key, key.epoch < epoch)
                }
            }
            return nil
        }
    }
}

/// AES-256-CBC fetched once: `EVP_aes_256_cbc()` would make OpenSSL 3 look the
/// algorithm up in its provider store (a lock and name compares) for every ticket.
nonisolated(unsafe) private let ticketCipher: OpaquePointer = EVP_CIPHER_fetch(nil, "AES-256-CBC", nil)!  // immutable, shared read-only

/// OpenSSL's ticket callback (`SSL_CTX_set_tlsext_ticket_key_evp_cb`): 1 = use,
/// 2 = use and issue a fresh ticket, 0 = unknown key (full handshake), -1 = error.
let ticketKeyCallback: @convention(c) (OpaquePointer?, UnsafeMutablePointer<UInt8>?, UnsafeMutablePointer<UInt8>?,
                                       OpaquePointer?, OpaquePointer?, Int32) -> Int32 = { _, name, iv, cipher, mac, encrypt in
    guard let name, let iv, let cipher, let mac else { return -1 }
    let now = WallClock.nowSeconds()
    let keys = TicketKeys.shared
    if encrypt == 1 {
        let key = keys.sealingKey(now: now)
        guard RAND_bytes(iv, 16) == 1 else { return -1 }
        return key.bytes.withUnsafeBufferPointer { bytes -> Int32 in
            memcpy(name, bytes.baseAddress!, 16)
            guard EVP_EncryptInit_ex(cipher, ticketCipher, nil, bytes.baseAddress! + 16, iv) == 1,
                  portcullis_ticket_mac_init(mac, bytes.baseAddress! + 48, 32) == 1 else { return -1 }
            return 1
        }
    }
    guard let (key, renew) = keys.openingKey(name: UnsafePointer(name), now: now) else { return 0 }
    return key.bytes.withUnsafeBufferPointer { bytes -> Int32 in
        guard portcullis_ticket_mac_init(mac, bytes.baseAddress! + 48, 32) == 1,
              EVP_DecryptInit_ex(cipher, ticketCipher, nil, bytes.baseAddress! + 16, iv) == 1 else { return -1 }
        return renew ? 2 : 1
    }
}
