import Dispatch
import Foundation
import PortcullisHTTP
import PortcullisProxy
import PortcullisAuth
import PortcullisCore

/// A revocation asked for through the admin API or `portcullis revoke`.
public enum AdminRevocation: Sendable, Equatable {
    /// One token by `jti`, kept until `until` (epoch seconds; nil → the maximum credential lifetime).
    case token(id: String, until: Int64?)
    /// One session / device (`sid`), kept until `until`.
    case session(id: String, until: Int64?)
    /// Every credential of `subject` (the user id the gateway injects) issued before `before`.
    case subject(String, before: Int64)
}

/// What the admin listener can do beyond health checks; each part is optional.
public struct AdminActions: Sendable {
    public var revoke: (@Sendable (AdminRevocation, @escaping @Sendable (Result<Void, AdminError>) -> Void) -> Void)?
    /// Undoes the revocation a `DELETE /revocations` body names; true when one was enforced.
    public var undo: (@Sendable (AdminRevocation, @escaping @Sendable (Result<Bool, AdminError>) -> Void) -> Void)?
    /// JSON array text of the revocations recorded for a subject.
    public var listRevocations: (@Sendable (String, @escaping @Sendable (Result<String, AdminError>) -> Void) -> Void)?
    /// JSON text for `GET /keys`.
    public var keys: (@Sendable () -> String)?
    /// Prometheus text for `GET /metrics`, delivered later (collecting visits every loop).
    public var metrics: (@Sendable (@escaping @Sendable (String) -> Void) -> Void)?
    /// nil when ready, else why not (for `/readyz`).
    public var notReadyReason: (@Sendable () -> String?)?
    /// The identity assertion's JWKS (`GET /.well-known/portcullis/jwks.json`, no token needed).
    public var published: (any PublishedDocument)?
    /// `POST /reload`: reloads the configuration file; the verdict comes later (off the loops).
    public var reload: (@Sendable (@escaping @Sendable (ReloadVerdict) -> Void) -> Void)?
    /// What serves now, for `/readyz` and `/reload`: the generation and the loaded file's SHA-256.
    public var served: (@Sendable () -> (generation: UInt64, sha256: String))?
    /// `GET /sessions?user=`: JSON text of a user's sessions (nil: `sessions:` is off).
    public var listSessions: (@Sendable (String, @escaping @Sendable (Result<String, AdminError>) -> Void) -> Void)?
    /// `DELETE /sessions/{id}`: ends any user's session everywhere; false when there was none.
    public var endSession: (@Sendable (String, @escaping @Sendable (Result<Bool, AdminError>) -> Void) -> Void)?
    public init() {}
}

/// The outcome of one reload (SIGHUP, `POST /reload`, `portcullis reload`).
public struct ReloadVerdict: Sendable {
    /// nil: applied; else why the file was refused (`FILE:LINE: KEY: REASON`), nothing changed.
    public var refusal: String?
    /// The generation serving after it (unchanged when refused).
    public var generation: UInt64
    /// SHA-256 of the file serving after it.
    public var sha256: String
    /// What changed, one short phrase each (applied reloads).
    public var changes: [String] = []

    public var json: String {
        var fields = ["\"status\":\(JSONText.quoted(refusal == nil ? "applied" : "refused"))",
                      "\"generation\":\(generation)", "\"config_sha256\":\(JSONText.quoted(sha256))"]
        if let refusal { fields.append("\"reason\":\(JSONText.quoted(refusal))") }
        if refusal == nil { fields.append("\"changes\":[\(changes.map(JSONText.quoted).joined(separator: ","))]") }
        return "{" + fields.joined(separator: ",") + "}\n"
    }
}

public struct AdminError: Error, Sendable {
    public var status: Int
    public var message: String
    public init(status: Int, message: String) { self.status = status; self.message = message }
}

/// The admin listener (loopback by default): `/healthz` (the process runs) and
/// `/readyz` (listeners up, not draining, shared store reachable) answer without
/// a token, as load balancers expect; every other endpoint needs
/// `Authorization: Bearer <admin.token>` and is refused when no token is configured:
///
/// - `POST /revocations` with `{"jti": "…", "exp": 1735689600}`, `{"session": "…"}` or
///   `{"subject": "…", "before": 1735689600}` (credentials issued before it; by default every
///   one issued up to now, the current second included) → 201;
/// - `DELETE /revocations` with the same bodies → 200 `{"status":"unrevoked","found":…}`: the
///   revocation is undone on every instance (`exp`/`before` are not needed and not looked at);
/// - `GET /revocations?subject=…` → the subject's recorded revocations;
/// - `POST /reload` → reloads the configuration file (as SIGHUP does) and answers the verdict:
///   200 `{"status":"applied","generation":N,"config_sha256":…,"changes":[…]}` or 422
///   `{"status":"refused","reason":"FILE:LINE: KEY: REASON",…}` (the old configuration serves on);
/// - `GET /keys` → per provider: kids, fetched at, expires at, last error;
/// - `GET /metrics` → Prometheus text (also without a token when `admin.metrics_public: true`,
///   as Envoy's admin `/stats/prometheus` and oauth2-proxy's metrics address serve it).
public final class AdminHandler: LocalHandler, @unchecked Sendable {
    // @unchecked Sendable: everything mutable is behind `lock`.
    private let lock = Lock()
    private var actionsValue: AdminActions
    var actions: AdminActions { lock.withLock { actionsValue } }
    private var tokenValue: String?
    private var metricsPublicValue: Bool
    private var drainingFlag = false
    /// Set at SIGTERM (from the main queue), read by `/readyz` on the admin loop.
    public var draining: Bool {
        get { lock.withLock { drainingFlag } }
        set { lock.withLock { drainingFlag = newValue } }
    }
    /// `admin.token` (a reload may change it; the next request is checked against the new one).
    var token: String? { lock.withLock { tokenValue } }
    var metricsPublic: Bool { lock.withLock { metricsPublicValue } }

    init(token: String?, actions: AdminActions = AdminActions(), metricsPublic: Bool = false) {
        self.tokenValue = token
        self.actionsValue = actions
        self.metricsPublicValue = metricsPublic
    }

    /// What the endpoints act on (set once the gateway's parts exist, before it listens).
    func setActions(_ actions: AdminActions) {
        lock.withLock { actionsValue = actions }
    }

    /// A reload's `admin.token` and `admin.metrics_public`.
    func update(token: String?, metricsPublic: Bool) {
        lock.withLock {
            tokenValue = token
            metricsPublicValue = metricsPublic
        }
    }

    public func handle(_ request: RequestView, body: UnsafeRawBufferPointer) -> LocalResponse {
        handle(request, body: body, reply: nil) ?? .error(500, "no reply")
    }

    public func handle(_ request: RequestView, body: UnsafeRawBufferPointer, reply: LocalReply) -> LocalResponse? {
        handle(request, body: body, reply: Optional(reply))
    }

    private func handle(_ request: RequestView, body: UnsafeRawBufferPointer, reply: LocalReply?) -> LocalResponse? {
        if let published = actions.published, request.path == published.path {
            return published.answer(method: request.methodBytes)
        }
        let method = String(decoding: request.methodBytes, as: UTF8.self)
        switch request.path {
        case "/healthz":
            return .json(200, "{\"status\":\"ok\"}\n")
        case "/readyz":
            if draining { return .json(503, "{\"status\":\"draining\"}\n") }
            let served = actions.served.map { read in
                let s = read()
                return ",\"generation\":\(s.generation),\"config_sha256\":\(JSONText.quoted(s.sha256))"
            } ?? ""
            if let reason = actions.notReadyReason?() {
                return .json(503, "{\"status\":\"not ready\",\"reason\":\(JSONText.quoted(reason))\(served)}\n")
            }
            return .json(200, "{\"status\":\"ready\"\(served)}\n")
        case "/metrics" where metricsPublic && method == "GET":
            return metrics(reply)
        default:
            break
        }
        guard let token else { return .error(404, "no such admin endpoint (admin.token is not configured)") }
        var presented: [UInt8]?
        var fields = 0
        request.values(of: "authorization") { value in presented = Array(value); fields += 1 }
        // Two Authorization fields are refused, never read as the last one.
        if fields > 1 { return .error(400, "more than one Authorization field") }
        guard let presented, presented.count == token.utf8.count + 7,
              String(decoding: presented.prefix(7), as: UTF8.self).lowercased() == "bearer ",
              HMACSHA256.equal(presented.dropFirst(7), token.utf8) else {
            return .error(401, "admin token required", headers: [("www-authenticate", "Bearer realm=\"portcullis-admin\"")])
        }
        switch (method, request.path) {
        case ("GET", "/metrics"):
            return metrics(reply)
        case ("GET", "/keys"):
            guard let keys = actions.keys else { return .json(200, "{\"providers\":[]}\n") }
            guard let reply else { return .error(501, "key status is not available") }
            // The key manager is read with a short wait on its queue: never on a loop queue.
            DispatchQueue.global().async { reply.send(.json(200, keys())) }
            return nil
        case ("POST", "/revocations"):
            guard let revoke = actions.revoke, let reply else { return .error(501, "revocation is not available") }
            return Self.withRevocation(body, forUndo: false) { revocation in
                revoke(revocation) { result in
                    reply.send(Self.response(result) { .json(201, "{\"status\":\"revoked\"}\n") })
                }
            }
        case ("DELETE", "/revocations"):
            guard let undo = actions.undo, let reply else { return .error(501, "revocation is not available") }
            return Self.withRevocation(body, forUndo: true) { revocation in
                undo(revocation) { result in
                    reply.send(Self.response(result) { found in .json(200, "{\"status\":\"unrevoked\",\"found\":\(found)}\n") })
                }
            }
        case ("POST", "/reload"):
            guard let reload = actions.reload, let reply else { return .error(501, "reload is not available") }
            reload { verdict in reply.send(.json(verdict.refusal == nil ? 200 : 422, verdict.json)) }
            return nil
        case ("GET", "/revocations"):
            guard let list = actions.listRevocations, let reply else { return .error(501, "revocation is not available") }
            guard let subject = Self.queryValue(request.query, "subject"), !subject.isEmpty else {
                return .error(400, "query parameter subject is required")
            }
            list(subject) { result in
                switch result {
                case .success(let json): reply.send(.json(200, json))
                case .failure(let error): reply.send(.error(error.status, error.message))
                }
            }
            return nil
        case ("GET", "/sessions"):
            guard let list = actions.listSessions, let reply else { return .error(404, "sessions are not configured") }
            guard let user = Self.queryValue(request.query, "user"), !user.isEmpty else {
                return .error(400, "query parameter user is required")
            }
            list(user) { result in
                switch result {
                case .success(let json): reply.send(.json(200, json))
                case .failure(let error): reply.send(.error(error.status, error.message))
                }
            }
            return nil
        case ("DELETE", let path) where path.hasPrefix("/sessions/"):
            guard let end = actions.endSession, let reply else { return .error(404, "sessions are not configured") }
            let id = String(path.dropFirst("/sessions/".count))
            guard id.count == 32, id.allSatisfy(\.isHexDigit) else { return .error(404, "no such session") }
            end(id) { result in
                switch result {
                case .success(true): reply.send(.json(200, "{\"status\":\"ended\"}\n"))
                case .success(false): reply.send(.error(404, "no such session"))
                case .failure(let error): reply.send(.error(error.status, error.message))
                }
            }
            return nil
        case (_, "/metrics"), (_, "/keys"), (_, "/revocations"), (_, "/reload"), (_, "/sessions"):
            return .error(405, "method not allowed on \(request.path)")
        default:
            return .error(404, "no such admin endpoint")
        }
    }

    /// `POST` / `DELETE /revocations`: 400 with the reason for a body that names no
    /// revocation, else `act` runs with it (and answers later).
    private static func withRevocation(_ body: UnsafeRawBufferPointer, forUndo: Bool,
                                       _ act: (AdminRevocation) -> Void) -> LocalResponse? {
        switch parseRevocation(body, forUndo: forUndo) {
        case .failure(let error): return .error(400, error.message)
        case .success(let revocation): act(revocation); return nil
        }
    }

    /// A store's answer: `success` for its value, else the failure's status and message.
    private static func response<T>(_ result: Result<T, AdminError>, _ success: (T) -> LocalResponse) -> LocalResponse {
        switch result {
        case .success(let value): return success(value)
        case .failure(let error): return .error(error.status, error.message)
        }
    }

    private func metrics(_ reply: LocalReply?) -> LocalResponse? {
        guard let metrics = actions.metrics, let reply else { return .error(404, "metrics are not enabled") }
        metrics { text in
            reply.send(LocalResponse(status: 200, contentType: "text/plain; version=0.0.4; charset=utf-8", body: Array(text.utf8)))
        }
        return nil
    }

    /// `{"jti": "…", "exp"?: N}`, `{"session": "…", "exp"?: N}` or
    /// `{"subject": "…", "before"?: N}`; exactly one kind, no unknown members.
    /// `forUndo`: the same shapes for `DELETE`, where `exp`/`until`/`before` may be given and are ignored.
    static func parseRevocation(_ body: UnsafeRawBufferPointer, forUndo: Bool = false) -> Result<AdminRevocation, AdminError> {
        func bad(_ message: String) -> Result<AdminRevocation, AdminError> { .failure(AdminError(status: 400, message: message)) }
        guard !body.isEmpty else { return bad("a JSON body is required: {\"jti\":…}, {\"session\":…} or {\"subject\":…,\"before\":…}") }
        guard let object = try? JSONSerialization.jsonObject(with: Data(body)) as? [String: Any] else {
            return bad("the body is not a JSON object")
        }
        let known: Set<String> = ["jti", "session", "subject", "before", "exp", "until"]
        if let unknown = object.keys.sorted().first(where: { !known.contains($0) }) { return bad("unknown member \(unknown)") }
        struct Body: Decodable {
            var jti: String?
            var session: String?
            var subject: String?
            var before: Int64?
            var exp: Int64?
            var until: Int64?
        }
        let decoded: Body
        do { decoded = try JSONDecoder().decode(Body.self, from: Data(body)) } catch {
            return bad("jti, session and subject are strings; exp, until and before are integer seconds since the epoch")
        }
        let kinds = [decoded.jti, decoded.session, decoded.subject].compactMap { $0 }
        guard kinds.count == 1 else { return bad("give exactly one of jti, session, subject") }
        for (name, value) in [("before", decoded.before), ("exp", decoded.exp), ("until", decoded.until)] {
            if let value, value <= 0 || value >= 100_000_000_000 { return bad("\(name) must be a time in seconds since the epoch") }
        }
        let until = decoded.exp ?? decoded.until
        func valid(_ value: String) -> Bool {
            !value.isEmpty && value.utf8.count <= 512 && value.utf8.allSatisfy { $0 >= 0x20 && $0 != 0x7F }
        }
        if let id = decoded.jti {
            guard valid(id) else { return bad("jti must be a non-empty string of at most 512 printable bytes") }
            if decoded.before != nil && !forUndo { return bad("before applies to subject revocations only") }
            return .success(.token(id: id, until: until))
        }
        if let id = decoded.session {
            guard valid(id) else { return bad("session must be a non-empty string of at most 512 printable bytes") }
            if decoded.before != nil && !forUndo { return bad("before applies to subject revocations only") }
            return .success(.session(id: id, until: until))
        }
        let subject = decoded.subject!
        guard valid(subject) else { return bad("subject must be a non-empty string of at most 512 printable bytes") }
        if until != nil && !forUndo { return bad("exp/until apply to jti and session revocations") }
        // "Sign out everywhere" by default: every credential issued up to now, those issued
        // within the current second too (`iat` has whole seconds, and the check is `iat < before`).
        return .success(.subject(subject, before: decoded.before ?? Int64(Date().timeIntervalSince1970) + 1))
    }

    static func queryValue(_ query: String?, _ name: String) -> String? {
        guard let query else { return nil }
        for pair in query.split(separator: "&") {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            if parts.count == 2, parts[0] == name {
                return String(parts[1]).replacingOccurrences(of: "+", with: " ").removingPercentEncoding
            }
        }
        return nil
    }
}
