#!/usr/bin/env python3
"""A real upstream app for end-to-end tests: an HTTP/1.1 keep-alive server that
answers with what it received, as JSON. It listens on 127.0.0.1 only.

Special paths (anywhere in the path):
  /__seen          -> JSON list of every request path received so far (then cleared)
  /slow/<ms>       -> waits <ms> milliseconds before answering
  /chunked         -> answers with a chunked body
  /drop            -> closes the connection without answering
  /close-after     -> answers with keep-alive, then closes the connection anyway
  /big/<n>         -> answers with n bytes
  /upgrade         -> answers 101 and echoes raw bytes back (a WebSocket stand-in); when the
                      tunnel ends, "/__tunnel/<hex of every byte received>" joins the seen list
  /status/<code>   -> answers the usual echo body with that status (e.g. a sign-out's 302)
  /users/resolve   -> (POST) the app's find-or-create as the session lookup hook asks it
                      (sessions.user.lookup): {"user_id": <24 hex digits from provider:subject,
                      a Mongo-style id>, "claims": {"username"}, "is_new_user": <first time
                      asked>, "user": {"id", "email", "username"}, "marked": <the request
                      carried an x-vercel-protection-bypass or x-portcullis-assertion header>}
Usage: echo_upstream.py PORT NAME [CERT KEY [CLIENT_CA]]
"""
import hashlib
import json
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SEEN = []
LOCK = threading.Lock()
KNOWN_USERS = set()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "echo"

    def log_message(self, *args):
        pass

    def _body(self):
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            data = b""
            while True:
                line = self.rfile.readline().strip()
                if not line:
                    # The gateway dropped the request mid-body (it refused a bad chunk): nothing to answer.
                    raise ConnectionAbortedError("request body cut off")
                size = int(line.split(b";")[0], 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return data
                data += self.rfile.read(size)
                self.rfile.readline()
        length = int(self.headers.get("Content-Length", "0") or "0")
        data = self.rfile.read(length) if length else b""
        if len(data) < length:
            # The connection closed before the declared body was complete: no request (and
            # not in /__seen), as an app framework would see it.
            raise ConnectionAbortedError("request body cut off")
        return data

    def _handle(self):
        body = self._body()
        path = self.path
        if "/__seen" in path:
            with LOCK:
                payload = json.dumps(SEEN).encode()
                SEEN.clear()
            return self._send(200, payload)
        with LOCK:
            SEEN.append(path)
        if "/drop" in path:
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        if "/slow/" in path:
            ms = int(path.split("/slow/")[1].split("/")[0].split("?")[0])
            time.sleep(ms / 1000)
        if "/upgrade" in path:
            self.send_response(101)
            self.send_header("Connection", "Upgrade")
            self.send_header("Upgrade", self.headers.get("Upgrade", "websocket"))
            self.end_headers()
            self.wfile.flush()
            conn = self.connection
            received = b""
            while True:
                try:
                    data = conn.recv(65536)
                except OSError:
                    break
                if not data:
                    break
                received += data
                try:
                    conn.sendall(data)
                except OSError:
                    break
            with LOCK:
                SEEN.append("/__tunnel/" + received.hex())
            self.close_connection = True
            return
        if path.endswith("/users/resolve") and self.command == "POST":
            asked = json.loads(body or b"{}")
            key = f"{asked.get('provider')}:{asked.get('subject')}"
            uid = hashlib.sha1(key.encode()).hexdigest()[:24]
            username = (asked.get("email") or "user").split("@")[0]
            with LOCK:
                new = uid not in KNOWN_USERS
                KNOWN_USERS.add(uid)
            marked = any(self.headers.get(h) for h in ("x-vercel-protection-bypass", "x-portcullis-assertion"))
            return self._send(200, json.dumps({
                "user_id": uid, "claims": {"username": username}, "is_new_user": new,
                "user": {"id": uid, "email": asked.get("email"), "username": username}, "marked": marked}).encode())
        if "/big/" in path:
            n = int(path.split("/big/")[1].split("/")[0])
            return self._send(200, b"x" * n, "application/octet-stream")
        payload = json.dumps({
            "app": sys.argv[2],
            "method": self.command,
            "path": path,
            "headers": [[k, v] for k, v in self.headers.items()],
            "body": body.decode("latin-1"),
        }).encode()
        if "/status/" in path:
            code = int(path.split("/status/")[1].split("/")[0].split("?")[0])
            return self._send(code, payload)
        if "/chunked" in path:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            half = len(payload) // 2
            for piece in (payload[:half], payload[half:]):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            self.wfile.write(b"0\r\n\r\n")
            return
        self._send(200, payload)
        if "/close-after" in path:
            self.wfile.flush()
            self.close_connection = True

    def _send(self, status, payload, ctype="application/json"):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(payload)

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_HEAD = _handle


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    # Many streams of one HTTP/2 connection open upstream connections at once.
    request_queue_size = 256

    def handle_error(self, request, client_address):
        # A request the gateway cut off (a refused body, a dropped client) is expected in
        # the hostile tests: no traceback. Anything else is still reported.
        if isinstance(sys.exc_info()[1], (ConnectionError, ValueError)):
            return
        super().handle_error(request, client_address)


if __name__ == "__main__":
    server = Server(("127.0.0.1", int(sys.argv[1])), Handler)
    if len(sys.argv) > 4:
        # HTTPS: echo_upstream.py PORT NAME CERT KEY [CLIENT_CA] (CLIENT_CA: require a client certificate)
        import ssl
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(sys.argv[3], sys.argv[4])
        if len(sys.argv) > 5:
            context.verify_mode = ssl.CERT_REQUIRED
            context.load_verify_locations(sys.argv[5])
        server.socket = context.wrap_socket(server.socket, server_side=True)
    print("ready", flush=True)
    server.serve_forever()
