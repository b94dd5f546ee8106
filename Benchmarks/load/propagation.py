#!/usr/bin/env python3
"""Revocation propagation A→B: how long after instance A is asked to revoke a token does
instance B refuse it (two gateways sharing one redis-server, all on 127.0.0.1).

Usage: propagation.py [--binary PATH] [--count N] [--load] [--cluster]

With --cluster the two gateways share a local Redis Cluster (3 masters, 3 replicas, started
here) through `store.cluster`; each revocation is written to its key's master and confirmed
with WAIT 1 there, and announced on the master of the channel's slot (SPUBLISH; an older
gateway's PUBLISH crosses the cluster bus to every node). The raw subscriber listens on that
master to both (SSUBSCRIBE and SUBSCRIBE), so one script measures either kind of gateway.

For each of N tokens: B is polled on a keep-alive connection with the token until it answers
401; the clock starts when the POST /revocations to A's admin listener is written (A answers
after Redis took the write and the announcement went out). Optionally `wrk` keeps B busy with
authenticated requests meanwhile (--load, bounded: it runs for the whole measurement and is
stopped at the end). Prints p50/p90/p99/max in milliseconds, and the same for a raw Redis
subscriber on the channel (when the announcement left Redis: A's share of the delay).

The probe is one thread on raw sockets (no HTTP library, no second thread contending for the
interpreter), and B's upstream answers a canned response from one asyncio protocol, so the
resolution is one poll round trip through B (about 0.1 ms), not the upstream's. Bounded: every
wait has a deadline, every process started is stopped.
"""
import argparse
import http.client
import select
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import jwt  # python3-jwt

from harness import free_port, redis_cli  # noqa: E402 (beside this file)

PROPAGATION_TRACE = bool(os.environ.get("PROPAGATION_TRACE"))


def start_cluster(work, processes):
    """Six cluster-enabled redis-servers joined as 3 masters and 3 replicas; their ports."""
    ports = []
    for i in range(6):
        port, bus = free_port(), free_port()
        node = os.path.join(work, f"node-{port}")
        os.makedirs(node)
        processes.append(subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                                           "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                                           "--cluster-port", str(bus), "--cluster-node-timeout", "2000",
                                           "--repl-diskless-sync-delay", "0",
                                           "--save", "", "--appendonly", "no", "--dir", node],
                                          stdout=subprocess.DEVNULL))
        ports.append(port)
    for port in ports:
        wait_port(port)
    subprocess.run(["redis-cli", "--cluster", "create"] + [f"127.0.0.1:{p}" for p in ports]
                   + ["--cluster-replicas", "1", "--cluster-yes"], check=True, stdout=subprocess.DEVNULL, timeout=60)
    end = time.time() + 30
    while time.time() < end:
        # Every node ok and every replica in sync (a WAIT 1 before then waits its whole timeout).
        if all("cluster_state:ok" in redis_cli(p, "cluster", "info") for p in ports) and all(
                re.search(r"role:master|master_link_status:up", redis_cli(p, "info", "replication")) for p in ports):
            return ports
        time.sleep(0.1)
    raise SystemExit("the Redis Cluster did not become ok")


def wait_port(port, timeout=20.0):
    end = time.time() + timeout
    while time.time() < end:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return True
        except OSError:
            time.sleep(0.05)
    return False


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", default=os.environ.get("PORTCULLIS_BIN", os.path.join(here, "../../.build/release/portcullis")))
    parser.add_argument("--count", type=int, default=300)
    parser.add_argument("--load", action="store_true", help="keep B busy with wrk (authenticated GETs) meanwhile")
    parser.add_argument("--cluster", action="store_true", help="share a local Redis Cluster instead of one redis-server")
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="portcullis-propagation-")
    processes = []
    secret = "propagation-secret-0123456789abcdef0123"
    token_admin = "propagation-admin-0123456789abcdef"
    try:
        if args.cluster:
            ports = start_cluster(work, processes)
            redis_port = ports[0]
            store = f'store: {{cluster: {{nodes: ["127.0.0.1:{ports[0]}", "127.0.0.1:{ports[1]}"]}}}}'
        else:
            redis_port = free_port()
            processes.append(subprocess.Popen(["redis-server", "--port", str(redis_port), "--bind", "127.0.0.1", "--save", "",
                                               "--appendonly", "no", "--dir", work], stdout=subprocess.DEVNULL))
            wait_port(redis_port)
            store = f'store: {{redis: "redis://127.0.0.1:{redis_port}/0"}}'
        upstream_port = free_port()
        upstream = subprocess.Popen([sys.executable, "-c", f"""
import asyncio
ANSWER = b"HTTP/1.1 200 OK\\r\\ncontent-length: 2\\r\\n\\r\\nok"
class P(asyncio.Protocol):
    def connection_made(self, t): self.t = t; self.buf = b""
    def data_received(self, d):
        self.buf += d
        while b"\\r\\n\\r\\n" in self.buf:
            _, _, self.buf = self.buf.partition(b"\\r\\n\\r\\n")
            self.t.write(ANSWER)
async def main():
    server = await asyncio.get_running_loop().create_server(P, "127.0.0.1", {upstream_port})
    await server.serve_forever()
asyncio.run(main())
"""])
        processes.append(upstream)
        wait_port(upstream_port)
        gateways = []
        for name in ("a", "b"):
            port, admin = free_port(), free_port()
            path = os.path.join(work, f"{name}.yaml")
            with open(path, "w") as f:
                f.write(f"""listen:
  - {{address: "127.0.0.1:{port}"}}
admin: {{address: "127.0.0.1:{admin}", token: "{token_admin}"}}
access_log: off
providers:
  - {{name: app, type: hs256, secret: "{secret}"}}
{store}
upstreams:
  app: {{url: "http://127.0.0.1:{upstream_port}"}}
routes:
  - {{path: /, upstream: app, auth: required}}
""")
            log = open(os.path.join(work, f"{name}.log"), "ab")
            processes.append(subprocess.Popen([args.binary, "run", "--config", path], stdout=log, stderr=log))
            if not wait_port(port) or not wait_port(admin):
                print(f"gateway {name} did not start", file=sys.stderr)
                return 2
            gateways.append((port, admin))
        (a_port, a_admin), (b_port, b_admin) = gateways
        end = time.time() + 20
        while time.time() < end:
            c = http.client.HTTPConnection("127.0.0.1", b_admin, timeout=2)
            c.request("GET", "/readyz")
            if c.getresponse().status == 200:
                break
            time.sleep(0.05)
        wrk = None
        if args.load:
            load_token = jwt.encode({"sub": "load", "iat": int(time.time()) - 5, "exp": int(time.time()) + 3600}, secret, algorithm="HS256")
            script = os.path.join(work, "load.lua")
            with open(script, "w") as f:
                f.write(f'wrk.headers["Authorization"] = "Bearer {load_token}"\n')
            wrk = subprocess.Popen(["wrk", "-t1", "-c32", "-d600s", "-s", script, f"http://127.0.0.1:{b_port}/"],
                                   stdout=subprocess.DEVNULL)
            processes.append(wrk)
            time.sleep(1)
        def connect(port):
            c = socket.create_connection(("127.0.0.1", port), timeout=5)
            c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return c
        channel = b"portcullis:revocations"
        if args.cluster:
            # The master of the channel's slot: the one node that answers a GET of that name
            # without MOVED.
            redis_port = next(p for p in ports
                              if "MOVED" not in redis_cli(p, "GET", channel.decode())
                              and "role:master" in redis_cli(p, "INFO", "replication"))
        admin, probe, subscriber = connect(a_admin), connect(b_port), connect(redis_port)
        kinds = [b"SUBSCRIBE", b"SSUBSCRIBE"] if args.cluster else [b"SUBSCRIBE"]
        for kind in kinds:
            subscriber.sendall(b"*2\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n" % (len(kind), kind, len(channel), channel))
        confirmations = b""
        while confirmations.count(b"subscribe\r\n") < len(kinds):
            confirmations += subscriber.recv(4096)
        pending = bytearray()

        def status(token):
            """One GET to B on the keep-alive probe connection; its status."""
            probe.sendall(b"GET /x HTTP/1.1\r\nHost: b\r\nAuthorization: Bearer " + token + b"\r\n\r\n")
            while True:
                end = pending.find(b"\r\n\r\n")
                if end >= 0:
                    head = bytes(pending[:end])
                    length = 0
                    for line in head.split(b"\r\n")[1:]:
                        name, _, value = line.partition(b":")
                        if name.strip().lower() == b"content-length":
                            length = int(value)
                    if len(pending) >= end + 4 + length:
                        del pending[:end + 4 + length]
                        return int(head.split()[1])
                chunk = probe.recv(65536)
                if not chunk:
                    raise RuntimeError("B closed the probe connection")
                pending.extend(chunk)

        delays, acks, announced = [], [], []
        now = int(time.time())
        for i in range(args.count):
            jti = f"p{i}-{now}"
            token = jwt.encode({"sub": f"u{i}", "jti": jti, "iat": now - 5, "exp": now + 3600}, secret,
                               algorithm="HS256").encode()
            assert status(token) == 200
            body = json.dumps({"jti": jti}).encode()
            request = (f"POST /revocations HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer {token_admin}\r\n"
                       f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body
            start = time.perf_counter()
            admin.sendall(request)
            times = {"acked": None, "heard": None}
            answer = bytearray()

            def collect(wait):
                """Notes when A's answer head and the announcement arrive (whichever is ready)."""
                ready, _, _ = select.select([admin, subscriber], [], [], wait)
                for s in ready:
                    if s is subscriber:
                        subscriber.recv(65536)
                        times["heard"] = times["heard"] or time.perf_counter()
                    else:
                        answer.extend(admin.recv(65536))
                        if b"\r\n\r\n" in answer:
                            times["acked"] = times["acked"] or time.perf_counter()

            deadline = start + 5
            while time.perf_counter() < deadline:
                code = status(token)
                collect(0)
                if code == 401:
                    delays.append(time.perf_counter() - start)
                    break
            # The rest of the admin answer and the announcement, if they came after B refused.
            while None in times.values() and time.perf_counter() < deadline:
                collect(0.5)
            acked, heard = times["acked"], times["heard"]
            if acked:
                acks.append(acked - start)
            if heard:
                announced.append(heard - start)
            if PROPAGATION_TRACE and i < 3:
                print(f"  {i}: refused after {delays[-1] * 1000:.2f} ms", flush=True)
        if wrk:
            wrk.send_signal(signal.SIGINT)
        def summary(values):
            values = sorted(values)
            def q(p):
                return values[min(len(values) - 1, int(len(values) * p))] * 1000
            return f"p50 {q(0.5):.2f} ms, p90 {q(0.9):.2f} ms, p99 {q(0.99):.2f} ms, max {values[-1] * 1000:.2f} ms"
        print(f"revocation A→B over {'a Redis Cluster' if args.cluster else 'Redis'} pub/sub, {len(delays)} of {args.count} measured"
              f"{' under wrk load on B' if args.load else ''}: {summary(delays)}")
        print(f"  announcement seen by a raw subscriber: {summary(announced)}")
        print(f"  A acknowledged: {summary(acks)}")
        return 0 if len(delays) == args.count else 1
    finally:
        for p in reversed(processes):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
