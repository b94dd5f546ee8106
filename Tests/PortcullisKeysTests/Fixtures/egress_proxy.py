#!/usr/bin/env python3
"""An egress proxy for the tests, on 127.0.0.1: CONNECT tunnels and absolute-form GETs, as
Squid or an egress gateway answers them. Every target is reached on 127.0.0.1 whatever its name
(so names such as keys.test work with nothing outside loopback). Each request's first line and
its Proxy-Authorization (or '-') is appended to LOG as "<line>|<authorization>".

Usage: egress_proxy.py DIR [REQUIRED_AUTHORIZATION]
Writes its port to DIR/port, logs to DIR/log. With REQUIRED_AUTHORIZATION, any other answer is 407.
"""
import os
import select
import socket
import socketserver
import sys

DIR = sys.argv[1]
REQUIRED = sys.argv[2] if len(sys.argv) > 2 else None


def relay(a, b):
    sockets = [a, b]
    while True:
        ready, _, _ = select.select(sockets, [], [], 30)
        if not ready:
            return
        for s in ready:
            data = s.recv(65536)
            if not data:
                return
            (b if s is a else a).sendall(data)


class Handler(socketserver.BaseRequestHandler):
    def handle(self):
        conn = self.request
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = conn.recv(4096)
            if not chunk:
                return
            head += chunk
        head, _, rest = head.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        fields = {l.split(":", 1)[0].strip().lower(): l.split(":", 1)[1].strip() for l in lines[1:] if ":" in l}
        auth = fields.get("proxy-authorization", "-")
        with open(os.path.join(DIR, "log"), "a") as f:
            f.write(lines[0] + "|" + auth + "\n")
        if REQUIRED and auth != REQUIRED:
            conn.sendall(b"HTTP/1.1 407 Proxy Authentication Required\r\nProxy-Authenticate: Basic\r\nContent-Length: 0\r\n\r\n")
            return
        method, target, _ = lines[0].split(" ", 2)
        if method == "CONNECT":
            port = int(target.rsplit(":", 1)[1])
            upstream = socket.create_connection(("127.0.0.1", port))
            conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            relay(conn, upstream)
            upstream.close()
            return
        # Absolute form: http://host:port/path
        without = target.split("://", 1)[1]
        authority, _, path = without.partition("/")
        port = int(authority.rsplit(":", 1)[1]) if ":" in authority else 80
        upstream = socket.create_connection(("127.0.0.1", port))
        kept = [l for l in lines[1:] if not l.lower().startswith("proxy-")]
        upstream.sendall(("%s /%s HTTP/1.1\r\n" % (method, path) + "\r\n".join(kept) + "\r\n\r\n").encode("latin-1") + rest)
        relay(conn, upstream)
        upstream.close()


class Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


server = Server(("127.0.0.1", 0), Handler)
with open(os.path.join(DIR, "port.tmp"), "w") as f:
    f.write(str(server.server_address[1]))
os.rename(os.path.join(DIR, "port.tmp"), os.path.join(DIR, "port"))
server.serve_forever()
