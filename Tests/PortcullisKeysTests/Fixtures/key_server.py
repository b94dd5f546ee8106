#!/usr/bin/env python3
"""A local key host for PortcullisKeys tests. Listens on 127.0.0.1 only.

    key_server.py --dir DIR --keys rsa-a:RS256,rsa-b:RS256,ec-a:ES256

At start it generates each key, writes DIR/<kid>.key.pem (PKCS #8, for the
tests to mint tokens with) and then DIR/port (the listening port).

Every request re-reads DIR/state.json (all members optional):
    publish        kids to publish                    (default: all)
    format         "jwks" | "pem" (kid -> certificate map)
    cache_control  Cache-Control value, or null       (default "public, max-age=600")
    age            Age value, or null
    status         HTTP status                        (default 200; non-200 answers "error")
    hang_seconds   sleep this long before answering  (bounded to 30 s)
    framing        "length" | "chunked" | "close"     (default "length")
    pad_bytes      add a "pad" member of this many bytes to the JWKS

With --tls, it serves HTTPS with a certificate from a throwaway CA written to
DIR/ca.pem; --tls-san lists the certificate's names (default
"IP:127.0.0.1,DNS:localhost").

GET /__count answers {"total": N}, the number of key requests so far;
GET /__count?reset=1 also sets it back to 0.
"""
import argparse, base64, datetime, ipaddress, json, os, ssl, sys, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from cryptography import x509
from cryptography.x509.oid import NameOID
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa, ec

lock = threading.Lock()
count = 0
keys = {}   # kid -> (private key, alg)


def b64(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def jwk(kid, key, alg):
    numbers = key.public_key().public_numbers()
    if alg.startswith("RS"):
        n = numbers.n
        return {"kty": "RSA", "kid": kid, "use": "sig", "alg": alg,
                "n": b64(n.to_bytes((n.bit_length() + 7) // 8, "big")),
                "e": b64(numbers.e.to_bytes((numbers.e.bit_length() + 7) // 8, "big"))}
    return {"kty": "EC", "kid": kid, "crv": "P-256", "alg": alg, "use": "sig",
            "x": b64(numbers.x.to_bytes(32, "big")), "y": b64(numbers.y.to_bytes(32, "big"))}


def certificate(kid, key):
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, kid)])
    now = datetime.datetime(2024, 1, 1)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(1).not_valid_before(now).not_valid_after(now + datetime.timedelta(days=3650))
            .sign(key, hashes.SHA256()))
    return cert.public_bytes(serialization.Encoding.PEM).decode()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    state_path = None

    def log_message(self, *args):
        pass

    def state(self):
        try:
            with open(self.state_path) as f:
                return json.load(f)
        except (OSError, ValueError):
            return {}

    def do_GET(self):
        global count
        if self.path.startswith("/__count"):
            with lock:
                total = count
                if "reset=1" in self.path:
                    count = 0
            self.answer(200, json.dumps({"total": total}).encode(), "length", {})
            return
        with lock:
            count += 1
        st = self.state()
        hang = min(float(st.get("hang_seconds", 0)), 30.0)
        if hang > 0:
            time.sleep(hang)
        status = int(st.get("status", 200))
        headers = {"Content-Type": "application/json"}
        cache_control = st.get("cache_control", "public, max-age=600")
        if cache_control is not None:
            headers["Cache-Control"] = cache_control
        if st.get("age") is not None:
            headers["Age"] = str(st["age"])
        if status != 200:
            self.answer(status, b'{"error":"key host failure"}', "length", headers)
            return
        publish = st.get("publish", list(keys))
        if st.get("format", "jwks") == "pem":
            doc = {kid: certificate(kid, keys[kid][0]) for kid in publish}
        else:
            doc = {"keys": [jwk(kid, *keys[kid]) for kid in publish]}
            if st.get("pad_bytes"):
                doc["pad"] = "x" * int(st["pad_bytes"])
        self.answer(200, json.dumps(doc).encode(), st.get("framing", "length"), headers)

    def answer(self, status, body, framing, headers):
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        if framing == "chunked":
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for i in range(0, len(body), 700):
                piece = body[i:i + 700]
                self.wfile.write(b"%x\r\n" % len(piece) + piece + b"\r\n")
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
        elif framing == "close":
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(body)
            self.close_connection = True
        else:
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)


def tls_context(directory, sans):
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "portcullis test CA")])
    now = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(hours=1)
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(1).not_valid_before(now).not_valid_after(now + datetime.timedelta(days=2))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .sign(ca_key, hashes.SHA256()))
    names = []
    for san in sans.split(","):
        kind, value = san.split(":", 1)
        names.append(x509.IPAddress(ipaddress.ip_address(value)) if kind == "IP" else x509.DNSName(value))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "key host")]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(2)
            .not_valid_before(now).not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            .sign(ca_key, hashes.SHA256()))
    with open(os.path.join(directory, "ca.pem"), "wb") as f:
        f.write(ca.public_bytes(serialization.Encoding.PEM))
    chain = os.path.join(directory, "server.pem")
    with open(chain, "wb") as f:
        f.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption()))
        f.write(cert.public_bytes(serialization.Encoding.PEM))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(chain)
    return context


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--dir", required=True)
    parser.add_argument("--keys", required=True)
    parser.add_argument("--tls", action="store_true")
    parser.add_argument("--tls-san", default="IP:127.0.0.1,DNS:localhost")
    args = parser.parse_args()
    for spec in args.keys.split(","):
        kid, alg = spec.split(":")
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048) if alg.startswith("RS") \
            else ec.generate_private_key(ec.SECP256R1())
        keys[kid] = (key, alg)
        pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
        with open(os.path.join(args.dir, kid + ".key.pem"), "wb") as f:
            f.write(pem)
    Handler.state_path = os.path.join(args.dir, "state.json")
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    if args.tls:
        server.socket = tls_context(args.dir, args.tls_san).wrap_socket(server.socket, server_side=True)
    tmp = os.path.join(args.dir, "port.tmp")
    with open(tmp, "w") as f:
        f.write(str(server.server_address[1]))
    os.rename(tmp, os.path.join(args.dir, "port"))
    # Exit when the test process goes away (stdin closes), so no server outlives its test.
    threading.Thread(target=lambda: (sys.stdin.read(), os._exit(0)), daemon=True).start()
    server.serve_forever()


if __name__ == "__main__":
    main()
