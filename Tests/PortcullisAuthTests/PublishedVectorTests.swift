import Testing
@testable import PortcullisAuth

/// RFC 7515 Appendix A, RFC 8037 Appendix A.4, RFC 7518 Appendix B.3.
@Suite struct PublishedVectorTests {
    static let payloadB64 = "eyJpc3MiOiJqb2UiLA0KICJleHAiOjEzMDA4MTkzODAsDQogImh0dHA6Ly9leGFtcGxlLmNvbS9pc19yb290Ijp0cnVlfQ"
    static let rsaN = "ofgWCuLjybRlzo0tZWJjNiuSfb4p4fAkd_wWJcyQoTbji9k0l8W26mPddxHmfHQp-Vaw-4qPCJrcS2mJPMEzP1Pt0Bm4d4QlL-yRT-SFd2lZS-pCgNMsD1W_YpRPEwOWvG6b32690r2jZ47soMZo9wGzjb_7OMg0LOL-bSf63kpaSHSXndS5z5rexMdbBYUsLA9e-KXBdQOS-UTo7WTBEMa2R2CapHg665xsmtdVMTBQY4uDZlxvb3qCo5ZwKh9kG4LT6_I5IhlJH7aGhyxXFvUK-DWNmoudF8NAco9_h9iaGNj8q2ethFkMLs91kzk2PAcDTW9gb54h4FRWyuXpoQ"

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
