import Testing
@testable import PortcullisAuth

/// A brief, deterministic mutation run over the parsers inside `swift test`
/// (the libFuzzer target in Tests/Fuzz/Auth goes much further). Nothing may
/// crash, and nothing mutated may verify.
@Suite struct RandomInputTests {
    /// xorshift64*, so failures reproduce.
    struct Generator: RandomNumberGenerator {
        var state: UInt64
        mutating func next() -> UInt64 {
            state ^= state >> 12; state ^= state << 25; state ^= state >> 27
            return state &* 2_685_821_657_736_338_717
        }
    }

    static func mutate(_ input: [UInt8], _ random: inout Generator) -> [UInt8] {
        var bytes = input
        for _ in 0..<Int.random(in: 1...4, using: &random) {
            guard !bytes.isEmpty else { break }
            let index = Int.random(in: 0..<bytes.count, using: &random)
            switch Int.random(in: 0..<5, using: &random) {
            case 0: bytes[index] = UInt8.random(in: 0...255, using: &random)
            case 1: bytes.remove(at: index)
            case 2: bytes.insert(Array("._=+/\"{}\\".utf8).randomElement(using: &random)!, at: index)
            case 3: bytes[index] ^= 1 << UInt8.random(in: 0..<8, using: &random)
            default: bytes.removeLast(Int.random(in: 0...min(8, bytes.count), using: &random))
            }
        }
        return bytes
    }

    @Test func mutatedCredentialsNeverVerify() throws {
        var app = ProviderConfiguration(name: "app", kind: .hs256)
        app.secret = AppTokenTests.secret
        var v4 = ProviderConfiguration(name: "v4", kind: .nextauth)
        v4.secret = "secret"
        var v5 = ProviderConfiguration(name: "v5", kind: .authjs)
        v5.secrets = ["secret"]
        let verifier = try CredentialVerifier(providers: [app, v4, v5], keys: [:], cacheCapacity: 0)
        let seeds = [Array(try AppTokenTests.token().utf8), Array(SessionCookieTests.v4.utf8), Array(SessionCookieTests.v5.utf8)]
        var random = Generator(state: 0x9E37_79B9_7F4A_7C15)
        var verified = 0
        for round in 0..<3000 {
            let input = Self.mutate(seeds[round % seeds.count], &random)
            let result = input.withUnsafeBytes { verifier.verifyBearer($0, providers: nil, now: AppTokenTests.now) }
            if input != seeds[round % seeds.count], result.identity != nil { verified += 1 }
            let text = String(decoding: input, as: UTF8.self)
            _ = verifier.verifySessionCookies([("authjs.session-token.0", Substring(text)), ("next-auth.session-token", Substring(text))],
                                              providers: nil, now: AppTokenTests.now)
        }
        // A mutation that only changes the unused low bits is refused by the
        // canonical base64url rule, so nothing at all should pass.
        #expect(verified == 0)
    }

    @Test func mutatedJSONNeverCrashes() {
        let seed = Array(#"{"a":[1,2.5e3,"x\u00e9",true,null,{"b":{}}],"c":"\ud83d\ude00","d":-0.0}"#.utf8)
        var random = Generator(state: 42)
        var accepted = 0
        for _ in 0..<5000 {
            let input = Self.mutate(seed, &random)
            if let document = try? JSONDocument.parsingObject(input) {
                accepted += 1
                _ = document.value(0).serialized
            }
        }
        #expect(accepted < 5000)
    }
}
