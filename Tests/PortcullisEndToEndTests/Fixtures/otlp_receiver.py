"""A local OTLP/HTTP receiver for tests: every POST body (OTLP JSON; gunzipped when sent
with Content-Encoding: gzip) is appended, one per line, to the output file, and answered 200
(or the status in the `status` file beside it). With CERT and KEY it serves https.
Usage: otlp_receiver.py PORT OUTPUT [CERT KEY]"""
import gzip
import http.server
import os
import ssl
import sys
import threading

PORT = int(sys.argv[1])
OUTPUT = sys.argv[2]
LOCK = threading.Lock()


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_POST(self):
        length = int(self.headers.get("Content-Length", "0") or "0")
        body = self.rfile.read(length)
        if self.headers.get("Content-Encoding", "").lower() == "gzip":
            body = gzip.decompress(body)
        status = 200
        override = OUTPUT + ".status"
        if os.path.exists(override):
            status = int(open(override).read().strip() or "200")
        if status == 200:
            # Header fields first: a test that saw the spans may read them at once.
            with LOCK:
                with open(OUTPUT + ".headers", "a") as out:
                    out.write(repr(sorted((k.lower(), v) for k, v in self.headers.items())) + "\n")
                with open(OUTPUT, "ab") as out:
                    out.write(body.replace(b"\n", b" ") + b"\n")
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()


server = http.server.ThreadingHTTPServer(("127.0.0.1", PORT), Handler)
if len(sys.argv) > 4:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(sys.argv[3], sys.argv[4])
    if len(sys.argv) > 5:
        # Mutual TLS: only a client with a certificate from this CA gets through the handshake.
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(sys.argv[5])
    server.socket = context.wrap_socket(server.socket, server_side=True)
server.serve_forever()
