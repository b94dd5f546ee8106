/// The configuration `portcullis demo` runs by default: the gateway on :8080 in front of
/// three in-process echo apps (visits :3001, notes :3002, books :3003) and a key host
/// (:3004). The same text is in `Config/demo.yaml` (a test keeps them equal).
public enum DemoConfiguration {
    public static let yaml = """
    # Portcullis demo: the gateway in front of three echo apps that answer with
    # the request they received (so you see what an unchanged app would see), and a
    # local key host (:3004) that serves a JWKS as Google's certs URL does.
    # The secrets below are demo values: set DEMO_APP_SECRET / DEMO_WEB_SECRET
    # to use your own. `bash deploy/demo.sh` runs the gateway with this file.
    # A demo file: its placeholder secrets (change-me) are accepted only because it says so.
    demo: true
    listen: [{address: "127.0.0.1:8080"}]
    admin: {address: "127.0.0.1:9901", token: "${PORTCULLIS_ADMIN_TOKEN:-demo-admin-token-0123456789}"}
    access_log: "${PORTCULLIS_DEMO_ACCESS_LOG:-stdout}"
    providers:
      - {name: app, type: hs256, secret: "${DEMO_APP_SECRET:-demo-app-secret-change-me-0123456789abcdef}", issuer: "visits-api"}
      - {name: web, type: nextauth, secret: "${DEMO_WEB_SECRET:-demo-web-secret-change-me-0123456789abcdef}"}
      - {name: google, type: google, audiences: ["demo-ios.apps.googleusercontent.com"],
         jwks_url: "http://127.0.0.1:3004/oauth2/v3/certs"}
    # Mobile sign-in at the edge (README: Sessions): the Google ID token is exchanged for the
    # gateway's own session; the demo listens on plain HTTP, hence require_tls: false.
    sessions:
      issuer: "http://127.0.0.1:8080"
      accept: [google]
      refresh_token: {secret: "${DEMO_SESSION_SECRET:-demo-session-secret-change-me-0123456789}", reuse_grace: 1s}
      require_tls: false
    identity:
      user_id_header: X-User-Id
      claims: {email: X-User-Email}
    upstreams:
      visits: {url: "http://127.0.0.1:3001"}
      notes:  {url: "http://127.0.0.1:3002"}
      books:  {url: "http://127.0.0.1:3003"}
    routes:
      - {path: /api/v1/auth/logout, upstream: visits, auth: required, revoke_on_success: true}
      - {path: /api/v1/auth/refresh, upstream: visits, auth: required, providers: [app],
         credential: {json_field: refreshToken}}
      - {path: /api/v1/auth/google, upstream: visits, auth: required, credential: {json_field: idToken, providers: [google]}}
      - {path: /api/visits, upstream: visits, auth: required, providers: [app, web, google]}
      - {path: /api/notes,  upstream: notes,  auth: required}
      - {path: /api/books,  upstream: books,  auth: optional}
      - {path: /health,     upstream: books,  auth: none}
    """

    public static let appPorts: [(name: String, port: UInt16)] = [("visits", 3001), ("notes", 3002), ("books", 3003)]
    /// The demo's key host: a JWKS at any path, as Google's certs URL serves one.
    public static let keyHostPort: UInt16 = 3004
}
