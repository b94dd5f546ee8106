internal import COpenSSL

/// HMAC-SHA-256 and a constant-time comparison, for MACs the gateway issues itself (the
/// session refresh tokens).
public enum HMACSHA256 {
    public static func mac(key: [UInt8], _ data: [UInt8]) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: 32)
        var length: UInt32 = 0
        _ = key.withUnsafeBytes { k in
            data.withUnsafeBytes { d in
                HMAC(EVP_sha256(), k.baseAddress, Int32(k.count), d.baseAddress?.assumingMemoryBound(to: UInt8.self), d.count,
                     &out, &length)
            }
        }
        return out
    }

    /// True when `a` and `b` are equal, in a time that depends only on their lengths.
    public static func equal(_ a: some Collection<UInt8>, _ b: some Collection<UInt8>) -> Bool {
        guard a.count == b.count else { return false }
        var difference: UInt8 = 0
        for (x, y) in zip(a, b) { difference |= x ^ y }
        return difference == 0
    }
}
