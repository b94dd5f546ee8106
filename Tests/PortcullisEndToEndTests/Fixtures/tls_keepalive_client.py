#!/usr/bin/env python3
"""One keep-alive HTTPS connection that outlives a certificate reload.

usage: tls_keepalive_client.py PORT SERVER_NAME CA_FILE GO_FILE
Connects to 127.0.0.1:PORT with SNI SERVER_NAME (verified against CA_FILE), sends a
GET, prints "first <status> <serial>", waits (at most 20 s) until GO_FILE exists,
sends a second GET on the same connection and prints "second <status> <serial>".
"""
import os, socket, ssl, sys, time

port, name, ca, go = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
context = ssl.create_default_context(cafile=ca)
raw = socket.create_connection(("127.0.0.1", port), timeout=10)
conn = context.wrap_socket(raw, server_hostname=name)

def serial():
    from hashlib import sha256
    return sha256(conn.getpeercert(binary_form=True)).hexdigest()[:16]

def request():
    conn.sendall(b"GET /keepalive HTTP/1.1\r\nHost: " + name.encode() + b"\r\n\r\n")
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return "closed"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        k, _, v = line.partition(b":")
        if k.strip().lower() == b"content-length":
            length = int(v.strip())
    while len(body) < length:
        chunk = conn.recv(65536)
        if not chunk:
            return "closed"
        body += chunk
    return head.split(b" ")[1].decode()

print("first", request(), serial(), flush=True)
deadline = time.time() + 20
while not os.path.exists(go) and time.time() < deadline:
    time.sleep(0.05)
print("second", request(), serial(), flush=True)
