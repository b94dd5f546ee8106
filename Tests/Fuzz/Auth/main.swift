// libFuzzer target for the PortcullisAuth parsers: base64url, the strict JSON
// parser, compact JWS/JWE splitting, header checks, JWE decryption paths and
// cookie chunk joining. Built together with the module's sources (see
// Tests/Fuzz/run-auth-fuzz.sh), so internal types are reachable.
//
// Byte 0 of the input selects the entry point; the rest is the payload.

let fuzzSecret = "fuzz-secret-that-is-at-least-32-bytes-long"

let fuzzVerifier: CredentialVerifier = {
    var app = ProviderConfiguration(name: "app", kind: .hs256)
    app.secret = fuzzSecret
    var v4 = ProviderConfiguration(name: "v4", kind: .nextauth)
    v4.secret = "secret"
    var v5 = ProviderConfiguration(name: "v5", kind: .authjs)
    v5.secrets = ["secret", "another"]
    var oidc = ProviderConfiguration(name: "oidc", kind: .oidc)
    oidc.issuer = "i"
    oidc.audiences = ["a"]
    oidc.algorithms = ["ES256", "EdDSA"]
    let keys = try! KeySet(jwksJSON: #"{"keys":[{"kty":"EC","kid":"e","crv":"P-256","x":"f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU","y":"x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"},{"kty":"OKP","kid":"d","crv":"Ed25519","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}]}"#)
    return try! CredentialVerifier(providers: [app, v4, v5, oidc], keys: ["oidc": keys], cacheCapacity: 64)
}()

/// Checks an invariant and traps (so libFuzzer records the input) when it fails.
@inline(__always)
func invariant(_ condition: Bool, _ message: StaticString) {
    if !condition { fatalError("invariant violated: \(message)") }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
    guard size > 0 else { return 0 }
    let selector = data[0] % 6
    let payload = UnsafeRawBufferPointer(start: data + 1, count: size - 1)
    let bytes = Array(payload)
    switch selector {
    case 0:
        // Base64url: decode, and a successful decode must re-encode to the same text.
        if let decoded = Base64URL.decode(bytes) {
            invariant(Array(Base64URL.encode(decoded).utf8) == bytes, "base64url is canonical")
        }
    case 1:
        // JSON: parse; on success every string and number token decodes.
        if let document = try? JSONDocument.parsingObject(bytes) {
            for index in 0..<document.tokenCount {
                switch document[index].kind {
                case .string: invariant(document.string(index) != nil, "string decodes")
                case .number: invariant(document.number(index) != nil, "number decodes")
                default: break
                }
            }
            _ = document.value(0).serialized
        }
    case 2, 3:
        // A bearer credential through the whole verifier (JWS or JWE).
        let result = fuzzVerifier.verifyBearer(payload, providers: nil, now: 1_700_000_100)
        if case .failed(let failure) = result {
            invariant(!failure.description.contains("\""), "descriptions are header-safe")
        }
    case 4:
        // Cookies: split the payload into name=value pairs on ';'.
        let text = String(decoding: bytes, as: UTF8.self)
        let pairs: [(name: Substring, value: Substring)] = text.split(separator: ";").map { pair in
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            return (parts[0], parts.count > 1 ? parts[1] : "")
        }
        _ = fuzzVerifier.verifySessionCookies(pairs, providers: nil, now: 1_700_000_100)
    default:
        // A JWE body after a valid v4 header: exercises segment decoding and AES-GCM.
        let header = Array("eyJhbGciOiJkaXIiLCJlbmMiOiJBMjU2R0NNIn0.".utf8)
        let token = header + bytes
        _ = token.withUnsafeBytes { fuzzVerifier.verifyBearer($0, providers: ["v4"], now: 1_700_000_100) }
    }
    return 0
}
