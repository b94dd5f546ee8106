#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// NUL-terminated C strings with process lifetime for `OSSL_PARAM` names
/// and values. OpenSSL keeps the name *pointer* inside the parameter (it
/// does not copy it), and a Swift string bridged to `const char *` is only
/// valid for the duration of one call, so short names such as "n" would
/// dangle. These are allocated once and never freed.
enum ParameterNames {
    nonisolated(unsafe) static let rsaN = strdup("n")!
    nonisolated(unsafe) static let rsaE = strdup("e")!
    nonisolated(unsafe) static let group = strdup("group")!
    nonisolated(unsafe) static let publicKey = strdup("pub")!
    nonisolated(unsafe) static let digest = strdup("digest")!
    nonisolated(unsafe) static let key = strdup("key")!
    nonisolated(unsafe) static let salt = strdup("salt")!
    nonisolated(unsafe) static let info = strdup("info")!
    nonisolated(unsafe) static let prime256v1 = strdup("prime256v1")!
    nonisolated(unsafe) static let secp384r1 = strdup("secp384r1")!
    nonisolated(unsafe) static let sha256 = strdup("SHA256")!
    nonisolated(unsafe) static let sha384 = strdup("SHA384")!
    nonisolated(unsafe) static let sha512 = strdup("SHA512")!

    static func digestName(_ name: String) -> UnsafeMutablePointer<CChar> {
        switch name {
        case "SHA384": return sha384
        case "SHA512": return sha512
        default: return sha256
        }
    }
}
