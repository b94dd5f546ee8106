#!/usr/bin/env python3
"""Pipelined requests over TLS, each in its own TLS record, sent back to back.

usage: tls_pipeline_client.py PORT SERVER_NAME CA_FILE COUNT
Prints the path each response echoes, one per line, in the order received.
"""
import json, socket, ssl, sys

port, name, ca, count = int(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
conn = ssl.create_default_context(cafile=ca).wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=10),
                                                          server_hostname=name)
for i in range(count):  # one sendall per request: one TLS record each
    conn.sendall(f"GET /pipelined/{i} HTTP/1.1\r\nHost: {name}\r\n\r\n".encode())
data = b""
for _ in range(count):
    while b"\r\n\r\n" not in data:
        data += conn.recv(65536)
    head, _, data = data.partition(b"\r\n\r\n")
    length = next(int(l.split(b":")[1]) for l in head.split(b"\r\n") if l.lower().startswith(b"content-length"))
    while len(data) < length:
        data += conn.recv(65536)
    body, data = data[:length], data[length:]
    print(json.loads(body)["path"], flush=True)
