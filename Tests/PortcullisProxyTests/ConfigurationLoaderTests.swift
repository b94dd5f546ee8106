import Testing
@testable import Portcullis

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
        do {
            _ = try ConfigurationLoader.parse(yaml, file: "bad.yaml")
            Issue.record("accepted: \(yaml)")
        } catch {
            #expect(error.key == key, "\(error)")
            #expect(error.description.hasPrefix("bad.yaml:"))
        }
    }
}
