#!/usr/bin/env python3
"""A hostile upstream for end-to-end tests: to every request it answers with a response head
that is refused (a long field, then a line without a colon, or a bad status line), sent in
small pieces over several writes, so the gateway reads it in several passes. 127.0.0.1 only.
Usage: bad_upstream.py PORT"""
import socket
import sys
import threading
import time

ANSWERS = [
    b"HTTP/1.1 200 OK\r\nX-Pad: " + b"a" * 6000 + b"\r\nno colon here\r\n\r\n",
    b"HTTP/1.1 2000 Nope\r\nContent-Length: 0\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello",
]


def serve(conn, n):
    try:
        conn.recv(65536)
        answer = ANSWERS[n % len(ANSWERS)]
        for i in range(0, len(answer), 1500):
            conn.sendall(answer[i:i + 1500])
            time.sleep(0.01)
        time.sleep(0.5)
    except OSError:
        pass
    finally:
        conn.close()


server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind(("127.0.0.1", int(sys.argv[1])))
server.listen(64)
count = 0
while True:
    conn, _ = server.accept()
    threading.Thread(target=serve, args=(conn, count), daemon=True).start()
    count += 1
