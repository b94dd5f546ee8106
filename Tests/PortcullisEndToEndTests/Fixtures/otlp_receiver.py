"""A local OTLP/HTTP receiver for tests: every POST body (OTLP JSON) is appended, one per
line, to the output file, and answered 200 (or the status in the `status` file beside it).
Usage: otlp_receiver.py PORT OUTPUT"""
import http.server
import os
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
        status = 200
        override = OUTPUT + ".status"
        if os.path.exists(override):
            status = int(open(override).read().strip() or "200")
        if status == 200:
            with LOCK, open(OUTPUT, "ab") as out:
                out.write(body.replace(b"\n", b" ") + b"\n")
            with LOCK, open(OUTPUT + ".headers", "a") as out:
                out.write(repr(sorted((k.lower(), v) for k, v in self.headers.items())) + "\n")
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()


http.server.ThreadingHTTPServer(("127.0.0.1", PORT), Handler).serve_forever()
