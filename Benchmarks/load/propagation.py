#!/usr/bin/env python3
"""Revocation propagation A→B: how long after instance A is asked to revoke a token does
instance B refuse it (two gateways sharing one redis-server, all on 127.0.0.1).

Usage: propagation.py [--binary PATH] [--count N] [--load SECONDS]

For each of N tokens: B is polled on a keep-alive connection with the token until it answers
401; the clock starts when the POST /revocations to A's admin listener is written (A answers
after Redis took the write and the announcement went out). Optionally `wrk` keeps B busy with
authenticated requests meanwhile (--load, bounded: it runs for the whole measurement and is
stopped at the end). Prints p50/p90/p99/max in milliseconds; the resolution is one poll round
trip (about 0.1 ms). Bounded: every wait has a deadline, every process started is stopped.
"""
import argparse
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import jwt  # python3-jwt


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="portcullis-propagation-")
    processes = []
    secret = "propagation-secret-0123456789abcdef0123"
    token_admin = "propagation-admin-0123456789abcdef"
    try:
        redis_port = free_port()
        processes.append(subprocess.Popen(["redis-server", "--port", str(redis_port), "--bind", "127.0.0.1", "--save", "",
                                           "--appendonly", "no", "--dir", work], stdout=subprocess.DEVNULL))
        wait_port(redis_port)
        upstream_port = free_port()
        upstream = subprocess.Popen([sys.executable, "-c", f"""
import http.server
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    def log_message(self, *a): pass
    def do_GET(self):
        self.send_response(200); self.send_header("content-length", "2"); self.end_headers(); self.wfile.write(b"ok")
http.server.ThreadingHTTPServer(("127.0.0.1", {upstream_port}), H).serve_forever()
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
store: {{redis: "redis://127.0.0.1:{redis_port}/0"}}
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
        admin = http.client.HTTPConnection("127.0.0.1", a_admin, timeout=5)
        probe = http.client.HTTPConnection("127.0.0.1", b_port, timeout=5)
        delays = []
        acks = []
        now = int(time.time())
        for i in range(args.count):
            jti = f"p{i}-{now}"
            token = jwt.encode({"sub": f"u{i}", "jti": jti, "iat": now - 5, "exp": now + 3600}, secret, algorithm="HS256")
            probe.request("GET", "/x", headers={"authorization": f"Bearer {token}"})
            r = probe.getresponse(); r.read()
            assert r.status == 200, r.status
            body = json.dumps({"jti": jti})
            start = time.perf_counter()
            admin.request("POST", "/revocations", body=body, headers={"authorization": f"Bearer {token_admin}",
                                                                          "content-type": "application/json"})
            acked = []

            def ack():
                resp = admin.getresponse(); resp.read()
                acked.append(time.perf_counter() - start)
            reader = threading.Thread(target=ack)
            reader.start()
            deadline = start + 5
            while time.perf_counter() < deadline:
                probe.request("GET", "/x", headers={"authorization": f"Bearer {token}"})
                r = probe.getresponse(); r.read()
                if os.environ.get("PROPAGATION_TRACE") and i < 3:
                    print(f"  {i}: {r.status} at {(time.perf_counter() - start) * 1000:.2f} ms", flush=True)
                if r.status == 401:
                    delays.append(time.perf_counter() - start)
                    break
            reader.join(5)
            acks.extend(acked)
        if wrk:
            wrk.send_signal(signal.SIGINT)
        delays.sort()
        def q(p):
            return delays[min(len(delays) - 1, int(len(delays) * p))] * 1000
        print(f"revocation A→B over Redis pub/sub, {len(delays)} of {args.count} measured"
              f"{' under wrk load on B' if args.load else ''}: p50 {q(0.5):.2f} ms, p90 {q(0.9):.2f} ms, "
              f"p99 {q(0.99):.2f} ms, max {delays[-1] * 1000:.2f} ms; A acknowledged after p50 "
              f"{sorted(acks)[len(acks) // 2] * 1000:.2f} ms")
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
