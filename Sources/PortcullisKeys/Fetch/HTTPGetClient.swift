import PortcullisIO

/// A small outbound HTTP/1.1 GET client for key documents, driven by a
/// PortcullisIO event loop. One connection per request (`Connection: close`);
/// no redirects, no pooling: key hosts are asked a few times an hour.
///
/// Bodies framed by `Content-Length`, `chunked` or connection close are
/// accepted up to `HTTPFetchOptions.maxBodyBytes`. `https://` URLs fail with
/// `HTTPFetchError.tlsUnsupported` until the TLS client lands.
///
/// Threading: `get` may be called from any thread; the exchange runs on
/// `loop.queue` and `completion` is called there, exactly once.
public struct HTTPGetClient: Sendable {
    public var options: HTTPFetchOptions

    public init(options: HTTPFetchOptions = HTTPFetchOptions()) {
        self.options = options
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
        let options = self.options
        loop.execute {
            guard url.scheme == .http else {
                completion(.failure(.tlsUnsupported(url: url.description)))
                return
            }
            GetExchange(url: url, options: options, loop: loop, completion: completion).start()
        }
    }
}
