#!/usr/bin/env python3
"""Regenerates the PortcullisAuth test fixtures with Python `cryptography`.

Keys are generated fresh each run (commit the output). Tokens are minted
here, independently of our Swift minting code, with fixed times:
iat = 1700000000, exp = 1700003600; tests verify at now = 1700000100.

    python3 make_fixtures.py   # writes into this directory
"""
import base64, datetime, json, hashlib, os
from cryptography import x509
from cryptography.x509.oid import NameOID
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa, ec, ed25519, padding, utils

HERE = os.path.dirname(os.path.abspath(__file__))
IAT, EXP = 1700000000, 1700003600


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def uint(n: int) -> str:
    return b64(n.to_bytes((n.bit_length() + 7) // 8, "big"))


def write(name, text):
    with open(os.path.join(HERE, name), "w") as f:
        f.write(text)


def pem_private(key):
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption()).decode()


def pem_public(key):
    return key.public_key().public_bytes(serialization.Encoding.PEM,
                                         serialization.PublicFormat.SubjectPublicKeyInfo).decode()


def self_signed(key, cn):
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])
    now = datetime.datetime(2023, 1, 1)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(1).not_valid_before(now).not_valid_after(now + datetime.timedelta(days=3650))
            .sign(key, hashes.SHA256()))
    return cert.public_bytes(serialization.Encoding.PEM).decode()


def jws(header, claims, sign):
    signing_input = b64(json.dumps(header, separators=(",", ":")).encode()) + "." + \
        b64(json.dumps(claims, separators=(",", ":")).encode())
    return signing_input + "." + b64(sign(signing_input.encode()))


rsa1 = rsa.generate_private_key(public_exponent=65537, key_size=2048)
rsa2 = rsa.generate_private_key(public_exponent=65537, key_size=2048)
rsa_weak = rsa.generate_private_key(public_exponent=65537, key_size=1024)
p256 = ec.generate_private_key(ec.SECP256R1())
p384 = ec.generate_private_key(ec.SECP384R1())
ed = ed25519.Ed25519PrivateKey.generate()

for name, key in [("rsa1", rsa1), ("rsa2", rsa2), ("rsa1024", rsa_weak), ("p256", p256), ("p384", p384), ("ed25519", ed)]:
    write(f"{name}.key.pem", pem_private(key))
    write(f"{name}.pub.pem", pem_public(key))


def rsa_jwk(key, kid, alg="RS256"):
    n = key.public_key().public_numbers()
    return {"kty": "RSA", "kid": kid, "use": "sig", "alg": alg, "n": uint(n.n), "e": uint(n.e)}


def ec_jwk(key, kid, crv, size, alg):
    n = key.public_key().public_numbers()
    return {"kty": "EC", "kid": kid, "crv": crv, "alg": alg,
            "x": b64(n.x.to_bytes(size, "big")), "y": b64(n.y.to_bytes(size, "big"))}


ed_raw = ed.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
jwks = {"keys": [
    rsa_jwk(rsa1, "rsa1"),
    rsa_jwk(rsa2, "rsa2"),
    ec_jwk(p256, "p256", "P-256", 32, "ES256"),
    ec_jwk(p384, "p384", "P-384", 48, "ES384"),
    {"kty": "OKP", "kid": "ed1", "crv": "Ed25519", "alg": "EdDSA", "x": b64(ed_raw)},
    {"kty": "oct", "kid": "sym", "k": b64(b"x" * 32)},                       # skipped: symmetric
    {"kty": "RSA", "kid": "enc1", "use": "enc", **{k: v for k, v in rsa_jwk(rsa2, "enc1").items() if k in ("n", "e")}},  # skipped: use enc
    {"kty": "EC", "kid": "k1", "crv": "secp256k1", "x": b64(b"\1" * 32), "y": b64(b"\2" * 32)},  # skipped: curve
]}
write("jwks.json", json.dumps(jwks, indent=1))
write("jwks_weak.json", json.dumps({"keys": [rsa_jwk(rsa_weak, "weak")]}))
write("certs.json", json.dumps({"rsa1": self_signed(rsa1, "rsa1"), "rsa2": self_signed(rsa2, "rsa2")}, indent=1))

def rs256(key):
    return lambda data: key.sign(data, padding.PKCS1v15(), hashes.SHA256())

def es(key, h, size):
    def sign(data):
        r, s = utils.decode_dss_signature(key.sign(data, ec.ECDSA(h)))
        return r.to_bytes(size, "big") + s.to_bytes(size, "big")
    return sign

tokens = {
    "google": jws({"alg": "RS256", "kid": "rsa1", "typ": "JWT"},
                  {"iss": "https://accounts.google.com", "azp": "web.apps.googleusercontent.com",
                   "aud": "ios.apps.googleusercontent.com", "sub": "110169484474386276334", "hd": "example.com",
                   "email": "ada@example.com", "email_verified": True, "iat": IAT, "exp": EXP}, rs256(rsa1)),
    "apple": jws({"alg": "RS256", "kid": "rsa2"},
                 {"iss": "https://appleid.apple.com", "aud": "com.example.app", "sub": "001234.abcdef.1234",
                  "nonce": hashlib.sha256(b"raw-nonce-123").hexdigest(), "nonce_supported": True,
                  "email": "x@privaterelay.appleid.com", "email_verified": "true", "is_private_email": "true",
                  "iat": IAT, "exp": EXP}, rs256(rsa2)),
    "firebase": jws({"alg": "RS256", "kid": "rsa1", "typ": "JWT"},
                    {"iss": "https://securetoken.google.com/demo-project", "aud": "demo-project",
                     "auth_time": IAT - 50, "user_id": "uid123", "sub": "uid123", "iat": IAT, "exp": EXP,
                     "email": "fb@example.com", "email_verified": False,
                     "firebase": {"identities": {}, "sign_in_provider": "password"}}, rs256(rsa1)),
    "es256": jws({"alg": "ES256", "kid": "p256"},
                 {"iss": "https://issuer.example", "aud": "api", "sub": "ec-user", "iat": IAT, "exp": EXP},
                 es(p256, hashes.SHA256(), 32)),
    "es384": jws({"alg": "ES384", "kid": "p384"},
                 {"iss": "https://issuer.example", "aud": "api", "sub": "ec384-user", "iat": IAT, "exp": EXP},
                 es(p384, hashes.SHA384(), 48)),
    "eddsa": jws({"alg": "EdDSA", "kid": "ed1"},
                 {"iss": "https://issuer.example", "aud": ["other", "api"], "sub": "ed-user", "iat": IAT, "exp": EXP},
                 ed.sign),
    "ps256": jws({"alg": "PS256", "kid": "rsa1"},
                 {"iss": "https://issuer.example", "aud": "api", "sub": "ps-user", "iat": IAT, "exp": EXP},
                 lambda d: rsa1.sign(d, padding.PSS(mgf=padding.MGF1(hashes.SHA256()), salt_length=32), hashes.SHA256())),
}
write("tokens.json", json.dumps(tokens, indent=1))
print("fixtures written to", HERE)
