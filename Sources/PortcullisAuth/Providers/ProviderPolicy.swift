/// The rules one provider applies, resolved from `ProviderConfiguration`
/// with the rule book's per-kind presets. Strings are held as UTF-8 bytes so
/// the hot path compares without allocating. A class, so handing it to the
/// claim checks costs one retain rather than one per array member.
final class ProviderPolicy: Sendable {
    struct RequiredClaim: Sendable {
        let claim: ClaimPath
        let requirement: ClaimRequirement
        let valueBytes: [[UInt8]]
    }

    /// A claim named by the configuration: a top-level member, or a dotted path into
    /// nested objects (`firebase.sign_in_provider`). A member whose own name contains the
    /// dots (namespaced claims such as `https://example.com/roles`) is found first.
    struct ClaimPath: Sendable {
        let name: String
        let bytes: [UInt8]
        let indexed: ClaimIndex.Name?
        let path: [[UInt8]]

        init(_ name: String) {
            self.name = name
            bytes = Array(name.utf8)
            indexed = ClaimIndex.name(for: bytes)
            path = Self.segments(name)
        }

        /// The dotted parts when there are at least two non-empty ones, else none.
        private static func segments(_ name: String) -> [[UInt8]] {
            let parts = name.split(separator: ".", omittingEmptySubsequences: false)
            guard parts.count > 1, parts.allSatisfy({ !$0.isEmpty }) else { return [] }
            return parts.map { Array($0.utf8) }
        }
    }

    let name: String
    let kind: ProviderConfiguration.Kind
    /// Accepted `iss`; empty means not checked (hs256 without an issuer).
    let issuers: [[UInt8]]
    /// `issuers` as strings: a verified identity's `issuer` is the accepted
    /// spelling it matched (a retain, not a new string per token).
    let issuerNames: [String]
    /// Accepted `aud`; empty means not checked (hs256 without audiences).
    let audiences: [[UInt8]]
    let algorithms: Set<JWSAlgorithm>
    /// `algorithms` as `JWSAlgorithm.bit`s, for the per-token check.
    let algorithmBits: UInt16
    let leeway: Double
    let maxLifetime: Double?
    let requireIssuedAt: Bool
    let requireKeyID: Bool
    /// `azp`, when present, must be one of `audiences` (OIDC Core §3.1.3.7).
    let checkAuthorizedParty: Bool
    let subjectMaxLength: Int
    /// Firebase: `auth_time` required and not in the future.
    let checkAuthTime: Bool
    let hostedDomain: [UInt8]?
    let requiredClaims: [RequiredClaim]
    /// Lower-cased accepted `typ` values (absent is always accepted).
    let acceptedTypes: [[UInt8]]
    /// Apple sends booleans as `true` or `"true"`.
    let lenientBooleans: Bool
    let forwardedClaims: [ClaimPath]
    /// `user_id_claim`: where the user id is read (nil: `sub`).
    let userIdClaim: ClaimPath?

    static let googleIssuers = ["accounts.google.com", "https://accounts.google.com"]
    static let appleIssuer = "https://appleid.apple.com"
    static let firebaseIssuerPrefix = "https://securetoken.google.com/"
    static let firebaseSessionIssuerPrefix = "https://session.firebase.google.com/"

    init(_ configuration: ProviderConfiguration) throws(AuthConfigurationError) {
        let name = configuration.name
        func parseAlgorithms(_ defaults: [JWSAlgorithm]) throws(AuthConfigurationError) -> Set<JWSAlgorithm> {
            guard !configuration.algorithms.isEmpty else { return Set(defaults) }
            var result = Set<JWSAlgorithm>()
            for alg in configuration.algorithms {
                guard let known = JWSAlgorithm(rawValue: alg) else {
                    throw .invalidSetting(provider: name, setting: "algorithms", reason: "unknown algorithm \(alg)")
                }
                result.insert(known)
            }
            return result
        }
        func requireAudiences() throws(AuthConfigurationError) {
            if configuration.audiences.isEmpty { throw .missingSetting(provider: name, setting: "audiences") }
        }

        var issuers: [String] = []
        var audiences = configuration.audiences
        var algorithms: Set<JWSAlgorithm>
        var leeway = 60
        var maxLifetime = configuration.maxLifetimeSeconds
        var requireIssuedAt = false
        var requireKeyID = false
        var checkAuthorizedParty = false
        var subjectMaxLength = 255
        var checkAuthTime = false
        var lenientBooleans = false

        switch configuration.kind {
        case .google:
            try requireAudiences()
            issuers = ProviderPolicy.googleIssuers
            algorithms = [.rs256]
            leeway = 300
            maxLifetime = maxLifetime ?? 86_400
            requireIssuedAt = true
            requireKeyID = true
            checkAuthorizedParty = true
        case .apple:
            try requireAudiences()
            issuers = [ProviderPolicy.appleIssuer]
            algorithms = try parseAlgorithms([.rs256])
            requireKeyID = true
            lenientBooleans = true
        case .firebase, .firebaseSession:
            guard let project = configuration.projectID, !project.isEmpty else {
                throw .missingSetting(provider: name, setting: "project_id")
            }
            if configuration.kind == .firebaseSession {
                // Session cookies live from 5 minutes to 2 weeks (Admin SDK createSessionCookie).
                issuers = [ProviderPolicy.firebaseSessionIssuerPrefix + project]
                maxLifetime = maxLifetime ?? 14 * 86_400
            } else {
                issuers = [ProviderPolicy.firebaseIssuerPrefix + project]
            }
            audiences = [project]
            algorithms = [.rs256]
            leeway = 5
            requireIssuedAt = true
            requireKeyID = true
            subjectMaxLength = 128
            checkAuthTime = true
        case .hs256:
            issuers = configuration.issuer.map { [$0] } ?? []
            algorithms = try parseAlgorithms([.hs256])
            guard algorithms.allSatisfy(\.isHMAC) else {
                throw .invalidSetting(provider: name, setting: "algorithms", reason: "hs256 providers accept only HS256/HS384/HS512")
            }
            leeway = 15
            maxLifetime = maxLifetime ?? 30 * 86_400
        case .oidc:
            guard let issuer = configuration.issuer, !issuer.isEmpty else { throw .missingSetting(provider: name, setting: "issuer") }
            try requireAudiences()
            issuers = [issuer]
            algorithms = try parseAlgorithms([.rs256])
            guard !algorithms.contains(where: \.isHMAC) else {
                throw .invalidSetting(provider: name, setting: "algorithms", reason: "oidc providers verify with public keys only")
            }
            checkAuthorizedParty = true
        case .nextauth, .authjs:
            algorithms = []
            leeway = 15
        }

        self.name = name
        self.kind = configuration.kind
        self.issuers = issuers.map { Array($0.utf8) }
        self.issuerNames = issuers
        self.audiences = audiences.map { Array($0.utf8) }
        self.algorithms = algorithms
        self.algorithmBits = algorithms.reduce(0) { $0 | $1.bit }
        self.leeway = Double(configuration.leewaySeconds ?? leeway)
        self.maxLifetime = maxLifetime.map(Double.init)
        self.requireIssuedAt = requireIssuedAt
        self.requireKeyID = requireKeyID
        self.checkAuthorizedParty = checkAuthorizedParty
        self.subjectMaxLength = subjectMaxLength
        self.checkAuthTime = checkAuthTime
        self.hostedDomain = configuration.hostedDomain.map { Array($0.utf8) }
        self.requiredClaims = configuration.requiredClaims.sorted { $0.key < $1.key }.map { name, requirement in
            let values: [String]
            switch requirement {
            case .equals(let value): values = [value]
            case .oneOf(let list): values = list
            case .equalsBool, .present: values = []
            }
            return RequiredClaim(claim: ClaimPath(name), requirement: requirement, valueBytes: values.map { Array($0.utf8) })
        }
        self.acceptedTypes = (configuration.acceptedTypes ?? ["JWT"]).map { Array($0.lowercased().utf8) }
        self.lenientBooleans = lenientBooleans
        var forwardedNames = Set<String>()
        self.forwardedClaims = configuration.forwardedClaims.filter { forwardedNames.insert($0).inserted }.map(ClaimPath.init)
        if let claim = configuration.userIdClaim {
            guard !claim.isEmpty, !claim.hasPrefix("."), !claim.hasSuffix("."), !claim.contains("..") else {
                throw .invalidSetting(provider: name, setting: "user_id_claim", reason: "'\(claim)' is not a claim name or dotted path")
            }
            self.userIdClaim = claim == "sub" ? nil : ClaimPath(claim)
        } else {
            self.userIdClaim = nil
        }
        if self.leeway < 0 || self.leeway > 600 {
            throw .invalidSetting(provider: name, setting: "leeway", reason: "must be between 0 and 600")
        }
    }
}
