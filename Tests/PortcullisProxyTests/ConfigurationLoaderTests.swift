import Testing
@testable import Portcullis
import PortcullisProxy

struct ConfigurationLoaderTests {
    let minimal = """
    upstreams:
      app: {url: "http://127.0.0.1:3001"}
    routes:
      - {path: /api, upstream: app}
    """

    @Test func defaultsAreSafe() throws {
        let c = try ConfigurationLoader.parse(minimal, file: "t.yaml")
        #expect(c.listen.first?.address.description == "127.0.0.1:8080")
        #expect(c.admin?.address.description == "127.0.0.1:9901")
        #expect(c.proxy.routes.first?.auth == .required)  // closed by default
        #expect(c.proxy.userIdHeader == "X-User-Id")
    }

    @Test func tokenCacheAndPublicMetricsAreRead() throws {
        #expect(try ConfigurationLoader.parse(minimal, file: "t.yaml").tokenCacheEntries == 16_384)
        #expect(try ConfigurationLoader.parse(minimal, file: "t.yaml").admin?.metricsPublic == false)
        let c = try ConfigurationLoader.parse(minimal + "\ntoken_cache: {max_entries: 0}\nadmin: {metrics_public: true}", file: "t.yaml")
        #expect(c.tokenCacheEntries == 0)
        #expect(c.admin?.metricsPublic == true)
    }

    @Test func environmentVariablesAreSubstituted() throws {
        let c = try ConfigurationLoader.parse(minimal + "\nadmin: {token: \"${TOKEN}\"}", file: "t.yaml",
                                              environment: ["TOKEN": "0123456789abcdefXYZ"])
        #expect(c.admin?.token == "0123456789abcdefXYZ")
    }

    @Test(arguments: [
        ("routes:\n  - {path: /x, upstream: nope}\nupstreams:\n  app: {url: \"http://127.0.0.1:1\"}", "routes[0].upstream"),
        ("upstreams:\n  app: {url: \"https://a:0\"}\nroutes:\n  - {path: /x, upstream: app}", "upstreams.app.url"),
        ("upstreams:\n  app: {url: \"http://127.0.0.1:1\"}\nroutes:\n  - {path: x, upstream: app}", "routes[0].path"),
        ("upstreams:\n  app: {url: \"http://127.0.0.1:1\"}\nroutes:\n  - {path: /a/../b, upstream: app}", "routes[0].path"),
        ("upstreams:\n  app: {url: \"http://127.0.0.1:1\"}\nroutes:\n  - {path: /x, upstream: app}\ntimeouts: {idle: soon}", "timeouts.idle"),
        ("upstreams:\n  app: {url: \"http://127.0.0.1:1\"}\nroutes:\n  - {path: /x, upstream: app}\nlistn: []", "listn"),
        ("upstreams:\n  app: {url: \"http://127.0.0.1:1\"}\nroutes:\n  - {path: /x, upstream: app}\ntoken_cache: {max_entries: -1}", "token_cache.max_entries"),
        ("upstreams:\n  app: {url: \"http://127.0.0.1:1\"}\nroutes:\n  - {path: /x, upstream: app}\nadmin: {metrics_public: maybe}", "admin.metrics_public"),
    ])
    func badValuesNameTheirKey(_ yaml: String, _ key: String) {
        expectRefused(yaml, key)
    }

    @Test func http2SettingsAndH2CAreRead() throws {
        let c = try ConfigurationLoader.parse(minimal + """

        listen:
          - {address: "127.0.0.1:8081", h2c: true, http2: {max_concurrent_streams: 7, max_header_list_size: 8192,
             initial_window_size: 1048576, send_timeout: 2s, idle_timeout: 5s}}
          - {address: "127.0.0.1:8082"}
        """, file: "t.yaml")
        let h2c = try #require(c.listen.first)
        #expect(h2c.h2c && h2c.offersHTTP2)
        #expect(h2c.http2.maxConcurrentStreams == 7 && h2c.http2.maxHeaderListSize == 8192)
        #expect(h2c.http2.initialWindowSize == 1_048_576 && h2c.http2.sendTimeout == 2 && h2c.http2.idleTimeout == 5)
        #expect(!c.listen[1].offersHTTP2, "a plain listener speaks HTTP/1.1 only unless h2c is set")
        #expect(c.listen[1].http2 == HTTP2Settings(), "defaults")
    }

    @Test(arguments: [
        ("{address: \"127.0.0.1:1\", http2: {max_concurrent_streams: 5}}", "listen[0].http2"),
        ("{address: \"127.0.0.1:1\", h2c: true, redirect_https: true}", "listen[0].h2c"),
        ("{address: \"127.0.0.1:1\", h2c: yes-please}", "listen[0].h2c"),
        ("{address: \"127.0.0.1:1\", h2c: true, http2: {max_concurrent_streams: 0}}", "listen[0].http2.max_concurrent_streams"),
        ("{address: \"127.0.0.1:1\", h2c: true, http2: {initial_window_size: 4294967295}}", "listen[0].http2.initial_window_size"),
        ("{address: \"127.0.0.1:1\", h2c: true, http2: {max_header_list_size: 10}}", "listen[0].http2.max_header_list_size"),
        ("{address: \"127.0.0.1:1\", h2c: true, http2: {send_timeout: never}}", "listen[0].http2.send_timeout"),
        ("{address: \"127.0.0.1:1\", h2c: true, http2: {max_streams: 5}}", "listen[0].http2.max_streams"),
    ])
    func badHTTP2SettingsNameTheirKey(_ listener: String, _ key: String) {
        expectRefused(minimal + "\nlisten:\n  - " + listener, key)
    }

    private func expectRefused(_ yaml: String, _ key: String) {
        do {
            _ = try ConfigurationLoader.parse(yaml, file: "bad.yaml")
            Issue.record("accepted: \(yaml)")
        } catch {
            #expect(error.key == key, "\(error)")
            #expect(error.description.hasPrefix("bad.yaml:"))
        }
    }
}
