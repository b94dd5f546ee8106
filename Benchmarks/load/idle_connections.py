#!/usr/bin/env python3
"""Hold many idle keep-alive connections to a server and report its resident memory.

Each connection sends ONE complete `GET PATH HTTP/1.1` request, reads the full
response (head plus Content-Length body), then stays open and idle. The server's
VmRSS (from /proc/PID/status) is read before any connection, once all of them
are idle, and after they are closed. Stdlib only (asyncio).

usage: idle_connections.py --pid PID --port PORT [--count 10000] [--path /]
                           [--concurrency 200] [--settle 3] [--hold 5] [--tls] [--tree]
--tls: the connections speak TLS (certificate not verified: a load client).
--tree: RSS of PID and all its descendants (nginx: master and workers).
Prints a human-readable report and, last, one line `RESULT {json}`.
"""
import argparse
import asyncio
import json
import os
import resource
import sys
import time


def _own_rss(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for pid {pid}")


TREE = False


def _descendants(pid):
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(entry))
            except OSError:
                pass
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def rss_kib(pid):
    if not TREE:
        return _own_rss(pid)
    return sum(_own_rss(p) for p in _descendants(pid))


def established_to(port):
    """Established TCP sockets on 127.0.0.1 whose local port is `port` (the server side)."""
    n = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                next(f)
                for line in f:
                    parts = line.split()
                    if parts[3] == "01" and int(parts[1].rsplit(":", 1)[1], 16) == port:
                        n += 1
        except OSError:
            pass
    return n


TLS_CONTEXT = None


async def one(port, path, sem, held, errors):
    async with sem:
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port, ssl=TLS_CONTEXT), 10)
        except Exception as e:  # noqa: BLE001 - every failure is counted by kind
            errors[f"connect: {type(e).__name__} {e}"] = errors.get(f"connect: {type(e).__name__} {e}", 0) + 1
            return
        try:
            writer.write(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUser-Agent: idle-connections\r\n\r\n".encode())
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 15)
            status = head.split(b" ", 2)[1].decode()
            length = 0
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value.strip())
                if name.strip().lower() == b"transfer-encoding":
                    raise RuntimeError("chunked response: not expected from the test upstream")
            if length:
                await asyncio.wait_for(reader.readexactly(length), 15)
            if not status.startswith("2"):
                errors[f"status {status}"] = errors.get(f"status {status}", 0) + 1
            held.append((reader, writer))
        except Exception as e:  # noqa: BLE001
            key = f"request: {type(e).__name__} {e}"[:120]
            errors[key] = errors.get(key, 0) + 1
            writer.close()


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pid", type=int, required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--count", type=int, default=10000)
    ap.add_argument("--path", default="/")
    ap.add_argument("--concurrency", type=int, default=200)
    ap.add_argument("--settle", type=float, default=3.0, help="seconds to wait before reading RSS")
    ap.add_argument("--hold", type=float, default=5.0, help="extra seconds to hold, then re-check")
    ap.add_argument("--tls", action="store_true")
    ap.add_argument("--tree", action="store_true")
    a = ap.parse_args()
    global TLS_CONTEXT, TREE
    TREE = a.tree
    if a.tls:
        import ssl
        TLS_CONTEXT = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        TLS_CONTEXT.check_hostname = False
        TLS_CONTEXT.verify_mode = ssl.CERT_NONE

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = a.count + 100
    if soft < need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(need, soft)), hard))
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft < need:
        sys.exit(f"need {need} descriptors, RLIMIT_NOFILE is {soft} (hard {hard})")

    before = rss_kib(a.pid)
    print(f"RSS before: {before} KiB")
    held, errors = [], {}
    sem = asyncio.Semaphore(a.concurrency)
    t0 = time.monotonic()
    await asyncio.gather(*(one(a.port, a.path, sem, held, errors) for _ in range(a.count)))
    opened = len(held)
    print(f"opened {opened}/{a.count} connections, each with one complete request/response, in {time.monotonic() - t0:.1f} s")
    for k, v in sorted(errors.items(), key=lambda kv: -kv[1]):
        print(f"  failed: {v} x {k}")

    await asyncio.sleep(a.settle)
    after = rss_kib(a.pid)
    server_side = established_to(a.port)
    print(f"RSS with {opened} idle connections: {after} KiB (server-side established sockets: {server_side})")

    await asyncio.sleep(a.hold)
    still_open = sum(1 for r, w in held if not r.at_eof() and not w.transport.is_closing())
    after_hold = rss_kib(a.pid)
    print(f"after {a.hold:.0f} s more: {still_open} still open, RSS {after_hold} KiB")

    for _, w in held:
        w.close()
    await asyncio.sleep(a.settle)
    closed = rss_kib(a.pid)
    print(f"RSS after closing them: {closed} KiB")

    per_conn = (after - before) / a.count
    print("RESULT " + json.dumps({
        "count": a.count, "opened": opened, "failed": a.count - opened, "errors": errors,
        "rss_before_kib": before, "rss_idle_kib": after, "rss_idle_later_kib": after_hold,
        "rss_closed_kib": closed, "per_connection_kib": round(per_conn, 2),
        "server_side_established": server_side, "still_open_after_hold": still_open,
    }))


if __name__ == "__main__":
    asyncio.run(main())
