import PortcullisAuth
import PortcullisCore
import PortcullisIO

/// Auth decisions by provider and outcome, and revocation checks by result,
/// counted in plain integers per loop: the authenticator runs on loop
/// queues, each loop writes only its own table, and a scrape reads each
/// table on its loop (`snapshot`). No atomics or locks on the request path.
public final class AuthCounters: Sendable {
    /// What happened to one request's credential.
    public enum Outcome: Sendable, Equatable {
        case verified
        case noCredential
        case storeUnavailable
        case refused(AuthFailure.Reason)

        /// Column in a loop's table.
        var column: Int {
            switch self {
            case .verified: return 0
            case .noCredential: return 1
            case .storeUnavailable: return 2
            // A scan of ~30 enum cases: cheaper than hashing the reason's String raw value.
            case .refused(let reason): return 3 + (AuthCounters.reasons.firstIndex(of: reason) ?? 0)
            }
        }
    }

    /// Outcome labels by column: `verified`, `no_credential`, `store_unavailable`,
    /// then every refusal reason in snake case (`signature_invalid`, `expired`, …).
    public static let outcomeLabels: [String] =
        ["verified", "no_credential", "store_unavailable"] + AuthFailure.Reason.allCases.map { snakeCase($0.rawValue) }
    static let reasons = Array(AuthFailure.Reason.allCases)
    /// The access log's `auth_reason` for a refusal: the counters' own label (`expired`,
    /// `revoked`, …), by the same column (no hashing).
    static func label(_ reason: AuthFailure.Reason) -> String { outcomeLabels[Outcome.refused(reason).column] }
    static let noCredentialLabel = "no_credential"
    static let storeUnavailableLabel = "store_unavailable"
    public static let revocationLabels = ["allowed", "revoked", "unavailable"]

    final class LoopTable: @unchecked Sendable {
        // @unchecked Sendable: written and read only on its loop's queue.
        var decisions: [Int]
        var revocationChecks = [0, 0, 0]
        init(cells: Int) { decisions = [Int](repeating: 0, count: cells) }
    }

    /// Rows a table has room for (providers ever configured, over every reload, plus "none");
    /// a provider past them is counted under "none".
    static let maxRows = 65

    /// The tables and row labels every generation's counters share: a reload makes new
    /// `AuthCounters` (`sharing(providers:)`) whose providers keep their rows, so counts go on.
    final class Shared: @unchecked Sendable {
        // @unchecked Sendable: each table is confined to its loop; `labels` is under its lock.
        let tables: [LoopTable]
        let labels: LockedValue<[String]>
        init(loopCount: Int) {
            tables = (0..<loopCount).map { _ in LoopTable(cells: AuthCounters.maxRows * AuthCounters.outcomeLabels.count) }
            labels = LockedValue(["none"])
        }
        /// The row of each provider, added as needed (0: no room left).
        func rows(for providers: [String]) -> [Int] {
            labels.withLock { labels in
                providers.map { name in
                    if let row = labels.firstIndex(of: name), row > 0 { return row }
                    guard labels.count < AuthCounters.maxRows else { return 0 }
                    labels.append(name)
                    return labels.count - 1
                }
            }
        }
    }

    /// Row labels: "none" (no provider selected), then every provider configured since start.
    public var providerLabels: [String] { shared.labels.withLock { $0 } }
    /// Provider names of this generation and their rows. Found by a linear scan
    /// per decision: a handful of names, and the identity's provider string
    /// is the configured one, so `==` usually succeeds on identical storage
    /// without hashing.
    private let providers: [String]
    private let rows: [Int]
    private let shared: Shared
    private var tables: [LoopTable] { shared.tables }

    public init(loopCount: Int, providers: [String]) {
        shared = Shared(loopCount: loopCount)
        self.providers = providers
        rows = shared.rows(for: providers)
    }

    private init(shared: Shared, providers: [String]) {
        self.shared = shared
        self.providers = providers
        rows = shared.rows(for: providers)
    }

    /// Counters for a reloaded configuration's providers, adding to the same totals.
    public func sharing(providers: [String]) -> AuthCounters {
        AuthCounters(shared: shared, providers: providers)
    }

    /// On `loopIndex`'s queue.
    @inline(__always)
    func decided(loopIndex: Int, provider: String?, _ outcome: Outcome) {
        let row = provider.flatMap { name in providers.firstIndex(of: name).map { rows[$0] } } ?? 0
        tables[loopIndex].decisions[row &* Self.outcomeLabels.count &+ outcome.column] &+= 1
    }

    /// On `loopIndex`'s queue.
    @inline(__always)
    func revocationChecked(loopIndex: Int, _ decision: RevocationDecision) {
        let column: Int
        switch decision {
        case .allowed: column = 0
        case .revoked: column = 1
        case .unavailable: column = 2
        }
        tables[loopIndex].revocationChecks[column] &+= 1
    }

    /// Totals since start, summed over `loops` (read on each loop's queue in
    /// turn); `completion` runs on the last loop's queue.
    public func snapshot(loops: [EventLoop], completion: @escaping @Sendable (Snapshot) -> Void) {
        let tables = self.tables
        let providers = providerLabels
        @Sendable func visit(_ index: Int, _ decisions: [Int], _ checks: [Int]) {
            guard index < loops.count, index < tables.count else {
                var snapshot = Snapshot(revocationChecks: zip(Self.revocationLabels, checks).map { ($0, $1) })
                let columns = Self.outcomeLabels.count
                for (cell, count) in decisions.enumerated() where count != 0 && cell / columns < providers.count {
                    snapshot.decisions.append((providers[cell / columns], Self.outcomeLabels[cell % columns], count))
                }
                completion(snapshot)
                return
            }
            loops[index].execute {
                let table = tables[index]
                visit(index + 1, zip(decisions, table.decisions).map { $0 &+ $1 },
                      zip(checks, table.revocationChecks).map { $0 &+ $1 })
            }
        }
        visit(0, [Int](repeating: 0, count: tables.first?.decisions.count ?? 0), [0, 0, 0])
    }

    public struct Snapshot: Sendable {
        /// Non-zero rows only.
        public var decisions: [(provider: String, outcome: String, count: Int)] = []
        public var revocationChecks: [(result: String, count: Int)]
    }

    /// "signatureInvalid" → "signature_invalid".
    static func snakeCase(_ name: String) -> String {
        var out = ""
        for character in name {
            if character.isUppercase {
                out.append("_")
                out.append(contentsOf: character.lowercased())
            } else {
                out.append(character)
            }
        }
        return out
    }
}
