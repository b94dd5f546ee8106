/// The outcome of one signature check.
enum SignatureCheck: Sendable, Equatable {
    case valid
    /// Well-formed but does not verify.
    case invalid
    /// Wrong length or out-of-range values (e.g. an ES256 `s` of zero).
    case malformed
    /// OpenSSL could not run the check (allocation failure and the like).
    case internalError
}

/// Verifies signatures for exactly one key and one algorithm. Implementations
/// set their OpenSSL state up once and are safe to call from any thread.
protocol SignatureVerifier: Sendable {
    var algorithm: JWSAlgorithm { get }
    /// Largest signature this verifier accepts, in bytes.
    var maxSignatureLength: Int { get }
    func verify(signingInput: UnsafeRawBufferPointer, signature: UnsafeRawBufferPointer) -> SignatureCheck
}
