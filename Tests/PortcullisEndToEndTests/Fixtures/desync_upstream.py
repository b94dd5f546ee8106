#!/usr/bin/env python3
"""An upstream that misframes on purpose, for the pooled-connection desync tests. Keep-alive
HTTP/1.1 on 127.0.0.1; every request is answered by its path:

  /u/NAME          200 "for NAME" (the honest answer every other user gets)
  /under           Content-Length: 5 with "hello", then a crafted second response, one write
  /head            (HEAD) a head announcing 20 bytes, then 20 bytes and a crafted response
  /nocontent       204, then a body and a crafted response
  /notmodified     304, then a body and a crafted response
  /chunked         a chunked body, its terminator, then a crafted response
  /early           200 "early", then 0.2 s later, while the connection is idle, a crafted response
  /processing      102 Processing (nobody asked), then 200 "late"

Misframed answers (but /early's) are sent 0.3 s after the request, so that other clients' requests queue for
the connection meanwhile. The crafted response carries `Set-Cookie: session=attacker` and the body "crafted": a client
that ever sees either got bytes meant for no request. Usage: desync_upstream.py PORT"""
import socket
import sys
import threading
import time

CRAFTED = b"HTTP/1.1 200 OK\r\nSet-Cookie: session=attacker\r\nContent-Length: 7\r\n\r\ncrafted"


def ok(body):
    return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)


def answer(method, path):
    if path.startswith("/u/"):
        return ok(b"for " + path[3:].encode()), None
    if path == "/under":
        return b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello" + CRAFTED, None
    if path == "/head":
        return b"HTTP/1.1 200 OK\r\nContent-Length: 20\r\n\r\n" + b"x" * 20 + CRAFTED, None
    if path == "/nocontent":
        return b"HTTP/1.1 204 No Content\r\n\r\nbody" + CRAFTED, None
    if path == "/notmodified":
        return b"HTTP/1.1 304 Not Modified\r\nETag: \"a\"\r\n\r\nbody" + CRAFTED, None
    if path == "/chunked":
        return b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n" + CRAFTED, None
    if path == "/early":
        return ok(b"early"), CRAFTED
    if path == "/processing":
        return b"HTTP/1.1 102 Processing\r\n\r\n" + ok(b"late"), None
    return b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n", None


def serve(conn):
    buffer = b""
    try:
        while True:
            while b"\r\n\r\n" not in buffer:
                data = conn.recv(65536)
                if not data:
                    return
                buffer += data
            head, _, buffer = buffer.partition(b"\r\n\r\n")
            method, path = head.split(b"\r\n")[0].decode().split(" ")[:2]
            now, later = answer(method, path)
            if not path.startswith("/u/") and path != "/early":
                time.sleep(0.3)  # so that other clients queue for this connection meanwhile
            conn.sendall(now)
            if later:
                time.sleep(0.2)
                conn.sendall(later)
    except OSError:
        pass
    finally:
        conn.close()


server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind(("127.0.0.1", int(sys.argv[1])))
server.listen(64)
while True:
    conn, _ = server.accept()
    threading.Thread(target=serve, args=(conn,), daemon=True).start()
