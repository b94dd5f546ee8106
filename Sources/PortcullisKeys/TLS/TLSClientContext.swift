internal import COpenSSL

/// One OpenSSL client context (`SSL_CTX`): TLS 1.2+, peer verification
/// against the system trust store or a given CA file. Owns the pointer and
/// frees it in `deinit`.
///
/// Threading: configured once in `init`, then only used to create sessions,
/// which OpenSSL allows from any thread.
final class TLSClientContext: @unchecked Sendable {
    // @unchecked Sendable: `context` is immutable after init (see type comment).
    let context: OpaquePointer

    /// - Parameter caFile: a PEM bundle of trusted roots; nil → the system store.
    init(caFile: String?) throws(HTTPFetchError) {
        guard let context = SSL_CTX_new(TLS_client_method()) else {
            throw .tlsFailed(url: "", reason: "SSL_CTX_new: \(TLSErrors.drain())")
        }
        self.context = context
        SSL_CTX_set_verify(context, SSL_VERIFY_PEER, nil)
        _ = portcullis_ssl_ctx_min_tls12(context)
        let loaded = caFile.map { SSL_CTX_load_verify_locations(context, $0, nil) } ?? SSL_CTX_set_default_verify_paths(context)
        guard loaded == 1 else {
            throw .tlsFailed(url: "", reason: "cannot load trusted certificates from \(caFile ?? "the system store"): \(TLSErrors.drain())")
        }
    }

    deinit { SSL_CTX_free(context) }
}

/// The OpenSSL error queue, drained into text.
enum TLSErrors {
    static func drain() -> String {
        var parts: [String] = []
        while case let code = ERR_get_error(), code != 0 {
            var buffer = [CChar](repeating: 0, count: 256)
            ERR_error_string_n(code, &buffer, buffer.count)
            parts.append(String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self))
        }
        return parts.isEmpty ? "unknown error" : parts.joined(separator: "; ")
    }
}
