/// The embedded configuration `portcullis demo` runs: the gateway on :8080 in
/// front of three in-process echo apps (visits :3001, notes :3002, books :3003).
/// The same text is in `Config/demo.yaml`.
public enum DemoConfiguration {
    public static let yaml = """
    # Portcullis demo: the gateway in front of three echo apps that answer with
    # the request they received (so you see what an unchanged app would see).
    listen: [{address: "127.0.0.1:8080"}]
    admin: {address: "127.0.0.1:9901"}
    access_log: stdout
    upstreams:
      visits: {url: "http://127.0.0.1:3001"}
      notes:  {url: "http://127.0.0.1:3002"}
      books:  {url: "http://127.0.0.1:3003"}
    routes:
      - {path: /api/visits, upstream: visits, auth: required}
      - {path: /api/notes,  upstream: notes,  auth: required}
      - {path: /api/books,  upstream: books,  auth: optional}
      - {path: /health,     upstream: books,  auth: none}
    identity:
      user_id_header: X-User-Id
    """

    public static let appPorts: [(name: String, port: UInt16)] = [("visits", 3001), ("notes", 3002), ("books", 3003)]
}
