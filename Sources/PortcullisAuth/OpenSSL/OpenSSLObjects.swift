internal import COpenSSL

// Each OpenSSL pointer is owned by exactly one final class whose deinit frees
// it. Initialisers take ownership of the pointer they are given.

/// Owns an `EVP_PKEY` (public or private key).
final class EVPKey: @unchecked Sendable {
    // @unchecked Sendable: the key is never mutated after construction and
    // OpenSSL 3 allows concurrent read-only use of an EVP_PKEY (its reference
    // count is atomic); contexts made from it are per-thread (see ContextPool).
    let pointer: OpaquePointer

    init(takingOwnershipOf pointer: OpaquePointer) { self.pointer = pointer }
    deinit { EVP_PKEY_free(pointer) }

    var bits: Int { Int(EVP_PKEY_get_bits(pointer)) }

    func isA(_ name: String) -> Bool { EVP_PKEY_is_a(pointer, name) == 1 }

    /// The EC group name ("prime256v1", "secp384r1"), if this is an EC key.
    var ecGroupName: String? {
        var buffer = [CChar](repeating: 0, count: 64)
        var length = 0
        guard EVP_PKEY_get_utf8_string_param(pointer, OSSL_PKEY_PARAM_GROUP_NAME, &buffer, buffer.count, &length) == 1 else {
            OpenSSLError.clearQueue()
            return nil
        }
        return stringFromCBuffer(buffer)
    }
}

/// Owns a fetched `EVP_MD`. Fetched once per process and shared.
final class FetchedDigest: @unchecked Sendable {
    // @unchecked Sendable: fetched algorithm objects are immutable and
    // reference-counted; OpenSSL documents them as shareable across threads.
    let pointer: OpaquePointer
    let name: String
    let size: Int

    init?(_ name: String) {
        guard let pointer = EVP_MD_fetch(nil, name, nil) else { return nil }
        self.pointer = pointer
        self.name = name
        self.size = Int(EVP_MD_get_size(pointer))
    }
    deinit { EVP_MD_free(pointer) }

    static let sha256 = FetchedDigest("SHA256")!
    static let sha384 = FetchedDigest("SHA384")!
    static let sha512 = FetchedDigest("SHA512")!
}

/// Owns a fetched `EVP_MAC`. Fetched once per process and shared.
final class FetchedMAC: @unchecked Sendable {
    // @unchecked Sendable: fetched algorithm objects are immutable and shareable.
    let pointer: OpaquePointer
    init?(_ name: String) {
        guard let pointer = EVP_MAC_fetch(nil, name, nil) else { return nil }
        self.pointer = pointer
    }
    deinit { EVP_MAC_free(pointer) }

    static let hmac = FetchedMAC("HMAC")
}

/// Owns an `EVP_MD_CTX`.
final class DigestContext {
    let pointer: OpaquePointer
    init?() {
        guard let pointer = EVP_MD_CTX_new() else { return nil }
        self.pointer = pointer
    }
    deinit { EVP_MD_CTX_free(pointer) }

    /// One-shot digest into `output` (at least the digest size); returns the length.
    @inline(__always)
    func digest(_ digest: FetchedDigest, _ input: UnsafeRawBufferPointer, into output: UnsafeMutablePointer<UInt8>) -> Int? {
        guard EVP_DigestInit_ex2(pointer, digest.pointer, nil) == 1,
              EVP_DigestUpdate(pointer, input.baseAddress, input.count) == 1 else { return nil }
        var length: UInt32 = 0
        guard EVP_DigestFinal_ex(pointer, output, &length) == 1 else { return nil }
        return Int(length)
    }
}

/// Owns an `EVP_PKEY_CTX`.
final class PKeyContext {
    let pointer: OpaquePointer
    init(takingOwnershipOf pointer: OpaquePointer) { self.pointer = pointer }
    deinit { EVP_PKEY_CTX_free(pointer) }
}

/// Owns an `EVP_MAC_CTX`.
final class MACContext {
    let pointer: OpaquePointer
    init(takingOwnershipOf pointer: OpaquePointer) { self.pointer = pointer }
    deinit { EVP_MAC_CTX_free(pointer) }
}

/// Owns an `EVP_CIPHER_CTX`.
final class CipherContext {
    let pointer: OpaquePointer
    init?() {
        guard let pointer = EVP_CIPHER_CTX_new() else { return nil }
        self.pointer = pointer
    }
    deinit { EVP_CIPHER_CTX_free(pointer) }
}

/// One-shot digest for load-time and cold paths.
func digestBytes(_ digest: FetchedDigest, _ input: [UInt8]) -> [UInt8] {
    var output = [UInt8](repeating: 0, count: 64)
    let context = DigestContext()!
    let length = input.withUnsafeBytes { source in
        output.withUnsafeMutableBufferPointer { context.digest(digest, source, into: $0.baseAddress!) }
    } ?? 0
    return Array(output.prefix(length))
}

/// A Swift string from a NUL-terminated C buffer.
func stringFromCBuffer(_ buffer: [CChar]) -> String {
    let bytes = buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }
    return String(decoding: bytes, as: UTF8.self)
}
