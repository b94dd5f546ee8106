import PortcullisAuth
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
    public static let revocationLabels = ["allowed", "revoked", "unavailable"]

    final class LoopTable: @unchecked Sendable {
        // @unchecked Sendable: written and read only on its loop's queue.
        var decisions: [Int]
        var revocationChecks = [0, 0, 0]
        init(cells: Int) { decisions = [Int](repeating: 0, count: cells) }
    }

    /// Row labels: "none" (no provider selected), then the providers in configuration order.
    public let providerLabels: [String]
    /// Provider names in row order (row = index + 1). Found by a linear scan
    /// per decision: a handful of names, and the identity's provider string
    /// is the configured one, so `==` usually succeeds on identical storage
    /// without hashing.
    private let providers: [String]
    private let tables: [LoopTable]

    public init(loopCount: Int, providers: [String]) {
        providerLabels = ["none"] + providers
        self.providers = providers
        let cells = providerLabels.count * Self.outcomeLabels.count
        tables = (0..<loopCount).map { _ in LoopTable(cells: cells) }
    }

    /// On `loopIndex`'s queue.
    @inline(__always)
    func decided(loopIndex: Int, provider: String?, _ outcome: Outcome) {
        let row = provider.flatMap { name in providers.firstIndex(of: name).map { $0 + 1 } } ?? 0
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
                for (cell, count) in decisions.enumerated() where count != 0 {
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
