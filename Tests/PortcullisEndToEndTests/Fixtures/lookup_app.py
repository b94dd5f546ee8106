#!/usr/bin/env python3
"""A stand-in app's user lookup for the session exchange (sessions.user.lookup), on 127.0.0.1.

POST /internal/users/resolve with {"provider", "subject", "email", "name", "claims"}:
  subject "blocked"  -> 403 (the app refuses this identity)
  subject "broken"   -> 200 without user_id
  anything else      -> 200 {"user_id": "u-<subject>", "claims": {"plan": "pro", "sub": "ignored"},
                            "is_new_user": <subject starts with "new">, "user": {"id": "u-<subject>", "plan": "pro"}}
Every request (headers and body) is appended as one JSON line to LOG.
Usage: lookup_app.py PORT LOG [CERT KEY [CLIENT_CA]]  (TLS; with CLIENT_CA a client certificate is required)
"""
import json
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        request = json.loads(body or b"{}")
        with open(sys.argv[2], "a") as f:
            f.write(json.dumps({"path": self.path, "headers": dict(self.headers.items()), "body": request}) + "\n")
        subject = request.get("subject")
        if subject == "blocked":
            status, answer = 403, {"error": "not allowed"}
        elif subject == "broken":
            status, answer = 200, {"id": 1}
        else:
            status, answer = 200, {"user_id": "u-" + subject, "claims": {"plan": "pro", "sub": "ignored"},
                                   "is_new_user": subject.startswith("new"), "user": {"id": "u-" + subject, "plan": "pro"}}
        data = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


server = HTTPServer(("127.0.0.1", int(sys.argv[1])), Handler)
if len(sys.argv) > 4:
    import ssl
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(sys.argv[3], sys.argv[4])
    if len(sys.argv) > 5:
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(sys.argv[5])
    server.socket = context.wrap_socket(server.socket, server_side=True)
server.serve_forever()
