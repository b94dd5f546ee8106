import Testing
import COpenSSL
@testable import PortcullisAuth

/// RFC 7515 Appendix A, RFC 8037 Appendix A.4, RFC 7518 Appendix B.3.
@Suite struct PublishedVectorTests {
    static let payloadB64 = "eyJpc3MiOiJqb2UiLA0KICJleHAiOjEzMDA4MTkzODAsDQogImh0dHA6Ly9leGFtcGxlLmNvbS9pc19yb290Ijp0cnVlfQ"
    static let rsaN = "ofgWCuLjybRlzo0tZWJjNiuSfb4p4fAkd_wWJcyQoTbji9k0l8W26mPddxHmfHQp-Vaw-4qPCJrcS2mJPMEzP1Pt0Bm4d4QlL-yRT-SFd2lZS-pCgNMsD1W_YpRPEwOWvG6b32690r2jZ47soMZo9wGzjb_7OMg0LOL-bSf63kpaSHSXndS5z5rexMdbBYUsLA9e-KXBdQOS-UTo7WTBEMa2R2CapHg665xsmtdVMTBQY4uDZlxvb3qCo5ZwKh9kG4LT6_I5IhlJH7aGhyxXFvUK-DWNmoudF8NAco9_h9iaGNj8q2ethFkMLs91kzk2PAcDTW9gb54h4FRWyuXpoQ"

    /// RFC 4231 §4.2-4.5, 4.7, 4.8 (test case 5 truncates the output, which
    /// JWS never does): short keys, a key of exactly the data's size, and
    /// 131-byte keys that must be hashed first (RFC 2104 §2).
    @Test(arguments: [
        (Array(repeating: UInt8(0x0B), count: 20), Array("Hi There".utf8),
         ["b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7",
          "afd03944d84895626b0825f4ab46907f15f9dadbe4101ec682aa034c7cebc59cfaea9ea9076ede7f4af152e8b2fa9cb6",
          "87aa7cdea5ef619d4ff0b4241a1d6cb02379f4e2ce4ec2787ad0b30545e17cdedaa833b7d6b8a702038b274eaea3f4e4be9d914eeb61f1702e696c203a126854"]),
        (Array("Jefe".utf8), Array("what do ya want for nothing?".utf8),
         ["5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843",
          "af45d2e376484031617f78d2b58a6b1b9c7ef464f5a01b47e42ec3736322445e8e2240ca5e69e2c78b3239ecfab21649",
          "164b7a7bfcf819e2e395fbe73b56e0a387bd64222e831fd610270cd7ea2505549758bf75c05a994a6d034f65f8f0e6fdcaeab1a34d4a6b4b636e070a38bce737"]),
        (Array(repeating: UInt8(0xAA), count: 20), Array(repeating: UInt8(0xDD), count: 50),
         ["773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe",
          "88062608d3e6ad8a0aa2ace014c8a86f0aa635d947ac9febe83ef4e55966144b2a5ab39dc13814b94e3ab6e101a34f27",
          "fa73b0089d56a284efb0f0756c890be9b1b5dbdd8ee81a3655f83e33b2279d39bf3e848279a722c806b485a47e67c807b946a337bee8942674278859e13292fb"]),
        (Array(repeating: UInt8(0xAA), count: 131), Array("Test Using Larger Than Block-Size Key - Hash Key First".utf8),
         ["60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54",
          "4ece084485813e9088d2c63a041bc5b44f9ef1012a2b588f3cd11f05033ac4c60c2ef6ab4030fe8296248df163f44952",
          "80b24263c7c1a3ebb71493c1dd7be8b49b46d1f41b4aeec1121b013783f8f3526b56d037e05f2598bd0fd2215d6a1e5295e64f73f63f0aec8b915a985d786598"]),
        (Array(repeating: UInt8(0xAA), count: 131),
         Array("This is a test using a larger than block-size key and a larger than block-size data. The key needs to be hashed before being used by the HMAC algorithm.".utf8),
         ["9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2",
          "6617178e941f020d351e2f254e8fd32c602420feb0b8fb9adccebb82461e99c5a678cc31e799176d3860e6110c46523e",
          "e37b6a775dc87dbaa4dfa9f96e5e3ffddebd71f8867289865df5a32d20cdc944b6022cac3c4982b10d5eeb55c3e4de15134676fb6de0446065c97440fa8c6a58"]),
    ])
    func rfc4231HMAC(key: [UInt8], data: [UInt8], expected: [String]) throws {
        for (digest, hex) in zip([FetchedDigest.sha256, .sha384, .sha512], expected) {
            let context = try #require(HMACContext(key: key, digest: digest))
            // Twice through the same context: the keyed state is reused, not consumed.
            for _ in 0..<2 {
                var output = [UInt8](repeating: 0, count: 64)
                let ok = data.withUnsafeBytes { input in
                    output.withUnsafeMutableBufferPointer { context.begin() && context.update(input) && context.finish(into: $0.baseAddress!) }
                }
                #expect(ok)
                #expect(output.prefix(digest.size).map { String(format: "%02x", $0) }.joined() == hex, "\(digest.name)")
            }
        }
    }

    /// Key lengths around both block sizes (64 for SHA-256, 128 for
    /// SHA-384/512: copied up to the block, hashed above it) and input
    /// lengths around the padding boundaries, against OpenSSL's own one-shot
    /// HMAC (`EVP_Q_mac`); parts fed separately give the same MAC.
    @Test func hmacMatchesOpenSSLForEveryKeyAndInputShape() throws {
        for digest in [FetchedDigest.sha256, .sha384, .sha512] {
            for keyLength in [1, 31, 32, 63, 64, 65, 100, 127, 128, 129, 200] {
                let key = (0..<keyLength).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) }
                let context = try #require(HMACContext(key: key, digest: digest))
                for dataLength in [0, 1, 55, 56, 64, 111, 112, 128, 249, 1000] {
                    let data = (0..<dataLength).map { UInt8(truncatingIfNeeded: $0 &* 13 &+ 1) }
                    var expected = [UInt8](repeating: 0, count: 64), expectedLength = 0
                    let reference = key.withUnsafeBytes { k in
                        data.withUnsafeBytes { d in
                            expected.withUnsafeMutableBufferPointer { out in
                                EVP_Q_mac(nil, "HMAC", nil, digest.name, nil, k.baseAddress, k.count,
                                          d.baseAddress?.assumingMemoryBound(to: UInt8.self), d.count, out.baseAddress, 64, &expectedLength)
                            }
                        }
                    }
                    #expect(reference != nil)
                    var whole = [UInt8](repeating: 0, count: 64), split = [UInt8](repeating: 0, count: 64)
                    let ok = data.withUnsafeBytes { d -> Bool in
                        let half = d.count / 2
                        let wholeOK = whole.withUnsafeMutableBufferPointer { context.begin() && context.update(d) && context.finish(into: $0.baseAddress!) }
                        let splitOK = split.withUnsafeMutableBufferPointer {
                            context.begin() && context.update(UnsafeRawBufferPointer(rebasing: d[0..<half]))
                                && context.update(UnsafeRawBufferPointer(rebasing: d[half...])) && context.finish(into: $0.baseAddress!)
                        }
                        return wholeOK && splitOK
                    }
                    #expect(ok)
                    #expect(expectedLength == digest.size)
                    #expect(whole.prefix(digest.size) == expected.prefix(digest.size), "\(digest.name) key \(keyLength) data \(dataLength)")
                    #expect(split.prefix(digest.size) == expected.prefix(digest.size), "\(digest.name) key \(keyLength) data \(dataLength), in two parts")
                }
            }
        }
        // The empty key (a block of zeros): HMAC-SHA256("", "") is a well-known value.
        let empty = try #require(HMACContext(key: [], digest: .sha256))
        var output = [UInt8](repeating: 0, count: 64)
        #expect(output.withUnsafeMutableBufferPointer { empty.begin() && empty.update(UnsafeRawBufferPointer(start: nil, count: 0)) && empty.finish(into: $0.baseAddress!) })
        #expect(output.prefix(32).map { String(format: "%02x", $0) }.joined() == "b613679a0814d9ec772f95d778c35fc5ff1697c493715653c6c712144292c5ad")
    }

    @Test func rfc7515A1HS256() throws {
        let key = try VerificationKey(hmacSecret: Base64URL.decode("AyM1SysPpbyDfgZld3umj1qzKObwVMkoqQ-EstJQLr_T-1qS0gZH75aKtMN3Yj0iPS4hcgUuTwjAzZr1Z9CAow")!)
        let token = "eyJ0eXAiOiJKV1QiLA0KICJhbGciOiJIUzI1NiJ9.\(Self.payloadB64).dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"
        #expect(signatureCheck(token, key: key) == .valid)
        #expect(signatureCheck(token.replacingOccurrences(of: "dBjf", with: "dBjg"), key: key) == .invalid)
        // The header (with CRLF whitespace) and payload parse with the strict parser.
        var bytes = Array(token.utf8)
        let parsed = bytes.withUnsafeMutableBytes { raw in JWSToken.parse(UnsafeRawBufferPointer(raw), segments: CompactSegments(UnsafeRawBufferPointer(raw))!) }
        let jws = try parsed.get()
        #expect(jws.algorithm == .hs256)
        #expect(jws.document.number(jws.document.member(jws.payload, "exp")!) == 1_300_819_380)
    }

    @Test func rfc7515A2RS256() throws {
        let keys = try KeySet(jwksJSON: #"{"keys":[{"kty":"RSA","n":"\#(Self.rsaN)","e":"AQAB"}]}"#)
        let token = "eyJhbGciOiJSUzI1NiJ9.\(Self.payloadB64).cC4hiUPoj9Eetdgtv3hF80EGrhuB__dzERat0XF9g2VtQgr9PJbu3XOiZj5RZmh7AAuHIm4Bh-0Qc_lF5YKt_O8W2Fp5jujGbds9uJdbF9CUAr7t1dnZcAcQjbKBYNX4BAynRFdiuB--f_nZLgrnbyTyWzO75vRK5h6xBArLIARNPvkSjtQBMHlb1L07Qe7K0GarZRmB_eSN9383LcOLn6_dO--xi12jzDwusC-eOkHWEsqtFZESc6BfI7noOPqvhJ1phCnvWh6IeYI2w9QOYEUipUTI8np6LbgGY9Fs98rqVt5AXLIhWkWywlVmtVrBp0igcN_IoypGlUPQGe77Rw"
        #expect(keys.keys.first?.algorithm == .rs256)
        #expect(signatureCheck(token, key: keys.keys[0]) == .valid)
        #expect(signatureCheck(token.replacingOccurrences(of: "eyJpc3MiOiJqb2Ui", with: "eyJpc3MiOiJqb2Ei"), key: keys.keys[0]) == .invalid)
    }

    @Test func rfc7515A3ES256() throws {
        let keys = try KeySet(jwksJSON: #"{"keys":[{"kty":"EC","crv":"P-256","x":"f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU","y":"x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"}]}"#)
        let token = "eyJhbGciOiJFUzI1NiJ9.\(Self.payloadB64).DtEhU3ljbEg8L38VWAfUAqOyKAM6-Xx-F4GawxaepmXFCgfTjDxw5djxLa8ISlSApmWQxfKTUJqPP3-Kg6NU1Q"
        #expect(keys.keys.first?.algorithm == .es256)
        #expect(signatureCheck(token, key: keys.keys[0]) == .valid)
    }

    @Test func rfc8037A4Ed25519() throws {
        let keys = try KeySet(jwksJSON: #"{"keys":[{"kty":"OKP","crv":"Ed25519","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}]}"#)
        let token = "eyJhbGciOiJFZERTQSJ9.RXhhbXBsZSBvZiBFZDI1NTE5IHNpZ25pbmc.hgyY0il_MGCjP0JzlnLWG1PPOt7-09PGcvMg3AIbQR6dWbhijcNR4ki4iylGjg5BhVsPt9g7sVvpAr_MuM0KAg"
        #expect(keys.keys.first?.algorithm == .edDSA)
        #expect(signatureCheck(token, key: keys.keys[0]) == .valid)
        // The pooled context is reused: a second check must also pass, a wrong one fail.
        #expect(signatureCheck(token, key: keys.keys[0]) == .valid)
        #expect(signatureCheck(token.replacingOccurrences(of: "RXhh", with: "RXhi"), key: keys.keys[0]) == .invalid)
    }

    @Test func rfc7518B3A256CBCHS512() throws {
        let decryptor = try AESCBCHMACDecryptor(key: Array(0..<64))
        let plaintext = Array("A cipher system must not be required to be secret, and it must be able to fall into the hands of the enemy without inconvenience".utf8)
        let aad = Array("The second principle of Auguste Kerckhoffs".utf8)
        let iv = hexBytes("1af38c2dc2b96ffdd86694092341bc04")
        let ciphertext = hexBytes("4affaaadb78c31c5da4b1b590d10ffbd3dd8d5d302423526912da037ecbcc7bd822c301dd67c373bccb584ad3e9279c2e6d12a1374b77f077553df829410446b36ebd97066296ae6427ea75c2e0846a11a09ccf5370dc80bfecbad28c73f09b3a3b75e662a2594410ae496b2e2e6609e31e6e02cc837f053d21f37ff4f51950bbe2638d09dd7a4930930806d0703b1f6")
        let tag = hexBytes("4dd3b4c088a7f45c216839645b2012bf2e6269a8c56a816dbc1b267761955bc5")
        func run(_ tag: [UInt8]) -> [UInt8]? {
            aad.withUnsafeBytes { a in iv.withUnsafeBytes { i in ciphertext.withUnsafeBytes { c in tag.withUnsafeBytes { t in
                decryptor.decrypt(aad: a, iv: i, ciphertext: c, tag: t)
            } } } }
        }
        #expect(run(tag) == plaintext)
        var bad = tag
        bad[31] ^= 1
        #expect(run(bad) == nil)
    }
}
