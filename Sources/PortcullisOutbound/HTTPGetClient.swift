import Dispatch
import PortcullisIO
import PortcullisTLS

/// A small outbound HTTP/1.1 GET client for key documents, driven by a
/// PortcullisIO event loop. One connection per request (`Connection: close`);
/// no redirects, no pooling: key hosts are asked a few times an hour.
///
/// Bodies framed by `Content-Length`, `chunked` or connection close are
/// accepted up to `HTTPFetchOptions.maxBodyBytes`. `https://` runs TLS 1.2+
/// (OpenSSL over memory BIOs on the same non-blocking socket) with SNI, peer
/// verification against the system store or `HTTPFetchOptions.caFile`, and a
/// host name (or IP) check.
///
/// Threading: `get` may be called from any thread; the exchange runs on
/// `loop.queue` and `completion` is called there, exactly once.
public struct HTTPGetClient: Sendable {
    public let options: HTTPFetchOptions
    private let tls: TLSContextSlot

    public init(options: HTTPFetchOptions = HTTPFetchOptions()) {
        self.options = options
        self.tls = TLSContextSlot(caFile: options.caFile, clientCertificate: options.clientCertificate)
    }

    /// GETs `url` (text form); an unparsable URL fails through `completion`.
    public func get(_ url: String, on loop: EventLoop,
                    completion: @escaping @Sendable (Result<HTTPFetchResponse, HTTPFetchError>) -> Void) {
        do {
            get(try FetchURL(parsing: url), on: loop, completion: completion)
        } catch {
            loop.execute { completion(.failure(error)) }
        }
    }

    /// GETs `url`.
    public func get(_ url: FetchURL, on loop: EventLoop,
                    completion: @escaping @Sendable (Result<HTTPFetchResponse, HTTPFetchError>) -> Void) {
        start(url, post: nil, on: loop, completion: completion)
    }

    /// POSTs a JSON `body` (with extra `headers`) to `url`: the session lookup hook asks the
    /// app who a verified identity is; trace batches go to the collector. Same connection
    /// rules as `get`.
    public func post(_ url: String, body: [UInt8], headers: [(name: String, value: String)], on loop: EventLoop,
                     completion: @escaping @Sendable (Result<HTTPFetchResponse, HTTPFetchError>) -> Void) {
        do {
            start(try FetchURL(parsing: url), post: (body, headers), on: loop, completion: completion)
        } catch {
            loop.execute { completion(.failure(error)) }
        }
    }

    /// One exchange on `loop`: the TLS context made on first `https://` use, the proxy the
    /// environment names for `url`.
    private func start(_ url: FetchURL, post: (body: [UInt8], headers: [(name: String, value: String)])?, on loop: EventLoop,
                       completion: @escaping @Sendable (Result<HTTPFetchResponse, HTTPFetchError>) -> Void) {
        let options = self.options
        let tls = self.tls
        loop.execute {
            var context: TLSClientContext?
            if url.scheme == .https {
                switch tls.context() {
                case .success(let made): context = made
                case .failure(.tlsFailed(_, let reason)): completion(.failure(.tlsFailed(url: url.description, reason: reason))); return
                case .failure(let error): completion(.failure(error)); return
                }
            }
            GetExchange(url: url, options: options, loop: loop, tls: context, proxy: options.proxies.proxy(for: url),
                        post: post, completion: completion).start()
        }
    }
}

/// The client's TLS context, made on first `https://` use (loading the trust
/// store costs a few milliseconds that plain-HTTP users need not pay).
final class TLSContextSlot: @unchecked Sendable {
    // @unchecked Sendable: `made` is read and written only inside `lock.sync`.
    private let caFile: String?
    private let clientCertificate: ClientCertificateFiles?
    private let lock = DispatchQueue(label: "portcullis.keys.tls-context")
    private var made: Result<TLSClientContext, HTTPFetchError>?

    init(caFile: String?, clientCertificate: ClientCertificateFiles? = nil) {
        self.caFile = caFile
        self.clientCertificate = clientCertificate
    }

    func context() -> Result<TLSClientContext, HTTPFetchError> {
        lock.sync { () -> Result<TLSClientContext, HTTPFetchError> in
            if let made { return made }
            let result: Result<TLSClientContext, HTTPFetchError>
            do {
                let certificate = try clientCertificate.map { try TLSCertificate.client(certificateFile: $0.certificate, keyFile: $0.key) }
                result = .success(try TLSClientContext(caFile: caFile, certificate: certificate))
            } catch {
                result = .failure(.tlsFailed(url: "", reason: "\(error)"))
            }
            made = result
            return result
        }
    }
}
