#!/usr/bin/env python3
"""State mode of the chaos harness: a checker for promises, not only for crashes (Jepsen's idea:
record a history of what the gateway acknowledged, then check every instance keeps it).

Usage: state.py --binary PATH [--seconds N] [--seed S] [--bound SECONDS] [--topology redis|sentinel|cluster]
                [--load] [--no-persistence] [--keep-dir] [--verbose]

What one run does (everything on 127.0.0.1, every process it starts is stopped at the end):
  - a redis-server with an fsync'd append-only file (--topology redis), or a master, a replica
    and three sentinels (--topology sentinel), or a Redis Cluster of 3 masters and 3 replicas
    (--topology cluster, store.cluster); two gateways A and B sharing it; one gateway C
    on the embedded store with a state_dir; one upstream (this process, a thread);
  - every gateway: an `app` HS256 provider (access tokens), a `google` provider with an inline
    key (ID tokens minted here), `sessions:` with shared ES256 keys, a route /api;
  - seeded random steps, for --seconds: revoke a token (admin API), exchange an ID token for a
    session, refresh it, log out, sign a user out everywhere, a good reload, a bad reload
    (invalid file, or another store), an instance restart, a Redis restart (or, with sentinel,
    a failover; with a cluster, a replica's CLUSTER FAILOVER or a master killed and restarted); with --load, wrk (HTTP/1.1) on A and h2load (h2c) on B keep authenticated
    traffic flowing throughout;
  - after every step the history is checked: every acknowledged revocation, logout and sign-out
    is enforced on every instance of its group within --bound seconds (an access token refused,
    a refresh token refused), and nothing the checker saw refused is ever accepted again;
  - a rate-limit step sends a fresh user's 100 requests over the live instances of one group:
    admitted at most the burst plus its documented bound (see `step_ratelimit`), and, when
    the store answered every charge, at least the burst less one lease per instance.

Exit status: 0 every check held, 1 a promise was broken (printed with the step and instance),
2 setup error. The last line is "N passed, N failed".
"""
import argparse
import base64
import http.client
import http.server
import json
import os
import random
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

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "load"))
from harness import free_port  # noqa: E402 (the load harness's: below the ephemeral range, never twice)


def wait_port(port, timeout=20.0):
    end = time.time() + timeout
    while time.time() < end:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return True
        except OSError:
            time.sleep(0.05)
    return False


def request(port, method, path, body=None, headers=None, timeout=5.0):
    """(status, body text); status 0 when the connection failed."""
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        data = body.encode() if isinstance(body, str) else body
        h = {"content-type": "application/json"} if data is not None else {}
        h.update(headers or {})
        conn.request(method, path, body=data, headers=h)
        r = conn.getresponse()
        text = r.read().decode(errors="replace")
        conn.close()
        return r.status, text
    except (OSError, http.client.HTTPException):
        return 0, ""


def claims_of(token):
    part = token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)))


class Upstream(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # its header and body writes must not wait for a delayed ACK

    def log_message(self, *args):
        pass

    def answer(self):
        length = int(self.headers.get("content-length", "0") or "0")
        if length:
            self.rfile.read(length)
        body = json.dumps({"user": self.headers.get("x-user-id")}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = answer


class Gateway:
    """One gateway process; `group` names the store it shares (redis) or its own (embedded)."""

    def __init__(self, run, name, group, store):
        self.run, self.name, self.group, self.store = run, name, group, store
        self.port, self.admin = free_port(), free_port()
        self.path = os.path.join(run.dir, f"{name}.yaml")
        self.log = open(os.path.join(run.dir, f"{name}.log"), "ab")
        self.process = None
        self.extra_route = False

    def config(self, broken=None):
        r = self.run
        text = f"""listen:
  - {{address: "127.0.0.1:{self.port}", h2c: true}}
admin: {{address: "127.0.0.1:{self.admin}", token: "{r.admin_token}"}}
workers: 2
access_log: off
log_level: info
providers:
  - {{name: app, type: hs256, secret: "{r.app_secret}"}}
  - {{name: google, type: google, audiences: ["{r.audience}"], public_key: "{r.google_public}", key_id: "g1"}}
sessions:
  issuer: "https://state.test"
  accept: [google]
  access_token: {{signing_keys: ["{r.session_key}"]}}
  refresh_token: {{secret: "{r.refresh_secret}", reuse_grace: 2s}}
  require_tls: false
store: {self.store}
rate_limits:
  - {{name: per-user, routes: [/limited], key: user, rate: 30/h, burst: {Run.LIMIT_BURST}}}
upstreams:
  app: {{url: "http://127.0.0.1:{r.upstream_port}"}}
routes:
  - {{path: /api, upstream: app, auth: required}}
  - {{path: /limited, upstream: app, auth: required}}
"""
        if self.extra_route:
            text += "  - {path: /extra, upstream: app, auth: none}\n"
        if broken == "invalid":
            text = text.replace("auth: required", "auth: sometimes")
        elif broken == "store":
            text = text.replace(f"store: {self.store}", "store: {state_dir: \"" + os.path.join(r.dir, "elsewhere") + "\"}"
                                if "redis" in self.store or "sentinel" in self.store or "cluster" in self.store else
                                "store: {redis: \"redis://127.0.0.1:1/0\"}")
        return text

    def write(self, text):
        with open(self.path + ".next", "w") as f:
            f.write(text)
        os.replace(self.path + ".next", self.path)

    def start(self):
        self.write(self.config())
        self.process = subprocess.Popen([self.run.binary, "run", "--config", self.path],
                                        stdout=self.log, stderr=self.log, stdin=subprocess.DEVNULL)
        if not wait_port(self.admin) or not wait_port(self.port):
            raise RuntimeError(f"{self.name} did not start (see {self.log.name})")
        end = time.time() + 20
        while time.time() < end:
            status, _ = request(self.admin, "GET", "/readyz")
            if status == 200:
                return
            time.sleep(0.05)
        raise RuntimeError(f"{self.name} never became ready")

    def stop(self):
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def alive(self):
        return self.process is not None and self.process.poll() is None

    def admin_post(self, path, body=None):
        return request(self.admin, "POST", path, body, {"authorization": f"Bearer {self.run.admin_token}"})


class Run:
    def __init__(self, args):
        self.args = args
        self.binary = os.path.abspath(args.binary)
        self.rng = random.Random(args.seed)
        self.dir = tempfile.mkdtemp(prefix="portcullis-state-")
        self.admin_token = "state-admin-token-0123456789abcdef"
        self.app_secret = "state-app-secret-0123456789abcdef0123456"
        self.refresh_secret = "state-refresh-secret-0123456789abcdef0123"
        self.audience = "state.apps.googleusercontent.com"
        self.processes = []
        self.passed = 0
        self.failed = 0
        self.failures = []
        self.delays = []
        self.counts = {}
        # The history: what was acknowledged, and must stay so.
        self.revoked = []      # (group, token, acknowledged at)
        self.sessions = []     # dicts: group, user, access, refresh, created, dead
        self.ended = []        # (group, access, refresh, acknowledged at): logouts
        self.signouts = []     # (group, user, before)
        self.refused_refresh = []  # (group, refresh token) seen refused: never accepted again
        self.users = 0

    # Setup

    def openssl(self, *args):
        subprocess.run(["openssl", *args], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def setup(self):
        d = self.dir
        self.google_private = os.path.join(d, "google.pem")
        self.google_public = os.path.join(d, "google.pub.pem")
        self.openssl("genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", self.google_private)
        self.openssl("pkey", "-in", self.google_private, "-pubout", "-out", self.google_public)
        self.session_key = os.path.join(d, "session.pem")
        self.openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", self.session_key)
        with open(self.google_private) as f:
            self.google_key = f.read()
        self.upstream_port = free_port()
        server = http.server.ThreadingHTTPServer(("127.0.0.1", self.upstream_port), Upstream)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        self.upstream = server
        self.redis = []
        if self.args.topology == "sentinel":
            master = self.start_redis()
            replica = self.start_redis(["--replicaof", "127.0.0.1", str(master["port"])])
            self.wait_replication(replica)
            self.sentinels = [self.start_sentinel(master["port"]) for _ in range(3)]
            end = time.time() + 30
            while time.time() < end and not all(str(replica["port"]) in self.cli(s["port"], "SENTINEL", "replicas", "state")
                                                for s in self.sentinels):
                time.sleep(0.1)
            addresses = ", ".join(f"\"127.0.0.1:{s['port']}\"" for s in self.sentinels)
            store = "{sentinel: {master: state, addresses: [" + addresses + "]}}"
        elif self.args.topology == "cluster":
            self.cluster = [self.start_redis(["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                                              "--cluster-port", str(free_port()), "--cluster-node-timeout", "2000"])
                            for _ in range(6)]
            out = subprocess.run(["redis-cli", "--cluster", "create", *[f"127.0.0.1:{n['port']}" for n in self.cluster],
                                  "--cluster-replicas", "1", "--cluster-yes"], capture_output=True, text=True, timeout=60)
            if "All 16384 slots covered" not in out.stdout:
                raise RuntimeError(f"cluster create: {out.stdout[-300:]}")
            if not self.wait_cluster():
                raise RuntimeError("the new cluster did not settle within 30 s (cluster_state:ok, 3 masters, "
                                   "each with its replica online)")
            seeds = ", ".join(f"\"127.0.0.1:{n['port']}\"" for n in self.cluster[:3])
            store = "{cluster: {nodes: [" + seeds + "]}}"
        else:
            self.redis_node = self.start_redis()
            store = "{redis: \"redis://127.0.0.1:" + str(self.redis_node["port"]) + "/0\"}"
        self.gateways = [Gateway(self, "A", "redis", store), Gateway(self, "B", "redis", store),
                         Gateway(self, "C", "embedded", "{state_dir: \"" + os.path.join(d, "c-state") + "\"}")]
        for g in self.gateways:
            g.start()

    def start_redis(self, extra=()):
        port = free_port()
        directory = tempfile.mkdtemp(dir=self.dir, prefix="redis-")
        persistence = ["--appendonly", "no"] if self.args.no_persistence else ["--appendonly", "yes", "--appendfsync", "always"]
        args = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", directory, "--save", "",
                *persistence, "--protected-mode", "no",
                # a replica's sync starts at once, not after Redis's default 5 s wait for more replicas
                "--repl-diskless-sync-delay", "0", *extra]
        node = {"port": port, "args": args, "log": open(os.path.join(directory, "out.log"), "ab")}
        node["process"] = subprocess.Popen(args, stdout=node["log"], stderr=node["log"])
        if not wait_port(port):
            raise RuntimeError("redis-server did not start")
        self.redis.append(node)
        return node

    def start_sentinel(self, master_port):
        port = free_port()
        directory = tempfile.mkdtemp(dir=self.dir, prefix="sentinel-")
        conf = os.path.join(directory, "sentinel.conf")
        with open(conf, "w") as f:
            f.write(f"port {port}\nbind 127.0.0.1\nprotected-mode no\ndir {directory}\n"
                    f"sentinel monitor state 127.0.0.1 {master_port} 2\n"
                    "sentinel down-after-milliseconds state 1000\nsentinel failover-timeout state 5000\n")
        log = open(os.path.join(directory, "out.log"), "ab")
        process = subprocess.Popen(["redis-server", conf, "--sentinel"], stdout=log, stderr=log)
        if not wait_port(port):
            raise RuntimeError("sentinel did not start")
        node = {"port": port, "process": process, "log": log}
        self.processes.append(process)
        return node

    def cli(self, port, *args):
        r = subprocess.run(["redis-cli", "-h", "127.0.0.1", "-p", str(port), *args], capture_output=True, text=True, timeout=10)
        return r.stdout.strip()

    def wait_cluster(self, timeout=30):
        """Every live node says cluster_state:ok, and every master has its replica attached and in sync."""
        end = time.time() + timeout
        while time.time() < end:
            live = [n for n in self.cluster if n["process"].poll() is None]
            ok = all("cluster_state:ok" in self.cli(n["port"], "CLUSTER", "INFO") for n in live)
            masters = [n for n in live if self.cli(n["port"], "ROLE").startswith("master")]
            if ok and len(masters) == 3 and all(re.search(r"connected_slaves:1\b[\s\S]*state=online",
                                                          self.cli(m["port"], "INFO", "replication")) for m in masters):
                return True
            time.sleep(0.1)
        return False

    def wait_replication(self, replica):
        end = time.time() + 15
        while time.time() < end and "master_link_status:up" not in self.cli(replica["port"], "INFO", "replication"):
            time.sleep(0.05)

    def start_load(self):
        """--load: wrk (HTTP/1.1) on A and h2load (h2c) on B with a valid token, for the whole
        run (bounded by their own durations), so every step happens under traffic."""
        token = jwt.encode({"sub": "load", "iat": int(time.time()) - 5, "exp": int(time.time()) + 7200}, self.app_secret,
                           algorithm="HS256")
        script = os.path.join(self.dir, "load.lua")
        with open(script, "w") as f:
            f.write(f'wrk.headers["Authorization"] = "Bearer {token}"\n')
        seconds = int(self.args.seconds) + 30
        a, b = self.gateways[0], self.gateways[1]
        self.load = [
            subprocess.Popen(["wrk", "-t1", "-c8", f"-d{seconds}s", "-s", script, f"http://127.0.0.1:{a.port}/api/load"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
            subprocess.Popen(["h2load", "-c2", "-m8", f"-D{seconds}", "-H", f"authorization: Bearer {token}",
                              f"http://127.0.0.1:{b.port}/api/load"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
        ]
        self.processes.extend(self.load)

    def teardown(self):
        for g in getattr(self, "gateways", []):
            g.stop()
        for p in self.processes:
            if p.poll() is None:
                p.kill()
                p.wait()
        for node in getattr(self, "redis", []):
            if node["process"].poll() is None:
                node["process"].kill()
                node["process"].wait()
        if getattr(self, "upstream", None):
            self.upstream.shutdown()
        if not self.args.keep_dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    # Credentials

    def app_token(self, jti):
        now = int(time.time())
        return jwt.encode({"sub": f"rev-{jti}", "jti": jti, "iat": now - 5, "exp": now + 3600}, self.app_secret, algorithm="HS256")

    def id_token(self, user):
        now = int(time.time())
        return jwt.encode({"iss": "https://accounts.google.com", "aud": self.audience, "sub": user, "iat": now - 2,
                           "exp": now + 3600, "email": f"{user}@example.test", "email_verified": True},
                          self.google_key, algorithm="RS256", headers={"kid": "g1"})

    def group(self, name):
        return [g for g in self.gateways if g.group == name and g.alive()]

    # Checks

    def check(self, ok, what):
        if ok:
            self.passed += 1
        else:
            self.failed += 1
            self.failures.append(what)
            print(f"BROKEN: {what}", flush=True)

    # A promise is broken only by an acceptance (200). A gateway that does not answer is not
    # accepting; its liveness is checked after every step on its own.
    def refused(self, g, access):
        status, _ = request(g.port, "GET", "/api/check", headers={"authorization": f"Bearer {access}"})
        return status != 200, status

    def refresh_refused(self, g, refresh):
        status, _ = request(g.port, "POST", "/auth/refresh", json.dumps({"refresh_token": refresh}))
        return status != 200, status

    def within_bound(self, probe):
        """Polls `probe` (True when the promise holds) for --bound seconds; (held, seconds)."""
        start = time.time()
        while True:
            if probe():
                return True, time.time() - start
            if time.time() - start > self.args.bound:
                return False, time.time() - start
            time.sleep(0.01)

    def verify(self, step, everything=False):
        """Every acknowledged promise of the history, on every live instance of its group (the
        newest ones always, a sample of older ones unless `everything`)."""
        def sample(items):
            if everything or len(items) <= 12:
                return items
            return items[-6:] + self.rng.sample(items[:-6], 6)
        for group, token, _ in sample(self.revoked):
            for g in self.group(group):
                held, seconds = self.within_bound(lambda: self.refused(g, token)[0])
                self.delays.append(seconds)
                self.check(held, f"{step}: revoked jti {claims_of(token)['jti']} accepted by {g.name}")
        for group, access, refresh, _ in sample(self.ended):
            for g in self.group(group):
                held, seconds = self.within_bound(lambda: self.refused(g, access)[0])
                self.delays.append(seconds)
                self.check(held, f"{step}: logged-out session's access token accepted by {g.name}")
                self.check(self.refresh_refused(g, refresh)[0], f"{step}: logged-out session refreshed on {g.name}")
        for group, user, before in sample(self.signouts):
            for s in [s for s in self.sessions if s["group"] == group and s["user"] == user and s["created"] < before]:
                for g in self.group(group):
                    if claims_of(s["access"])["iat"] < before:
                        held, seconds = self.within_bound(lambda: self.refused(g, s["access"])[0])
                        self.delays.append(seconds)
                        self.check(held, f"{step}: {user}'s access token from before the sign-out accepted by {g.name}")
                    self.check(self.refresh_refused(g, s["refresh"])[0], f"{step}: {user}'s session from before the sign-out refreshed on {g.name}")
        for group, refresh in sample(self.refused_refresh):
            for g in self.group(group):
                self.check(self.refresh_refused(g, refresh)[0], f"{step}: a refresh token seen refused was accepted by {g.name}")

    # Steps

    def pick_gateway(self, group=None):
        live = [g for g in self.gateways if g.alive() and (group is None or g.group == group)]
        return self.rng.choice(live) if live else None

    def step_revoke(self):
        g = self.pick_gateway()
        jti = f"t{self.rng.randrange(1 << 40):x}"
        token = self.app_token(jti)
        status, _ = g.admin_post("/revocations", json.dumps({"jti": jti}))
        if status == 201:
            self.revoked.append((g.group, token, time.time()))
        return f"revoke jti on {g.name}: {status}"

    def step_exchange(self):
        g = self.pick_gateway()
        self.users += 1
        user = f"u{self.rng.randrange(max(4, self.users // 2))}"
        status, body = request(g.port, "POST", "/auth/session", json.dumps({"idToken": self.id_token(user)}))
        if status == 200:
            pair = json.loads(body)
            self.sessions.append({"group": g.group, "user": f"google:{user}", "access": pair["access_token"],
                                  # An upper bound of the gateway's own start time for it: a sign-out
                                  # "before" a later second surely covers it.
                                  "refresh": pair["refresh_token"], "created": int(time.time()), "dead": False})
        return f"exchange on {g.name}: {status}"

    def live_session(self):
        live = [s for s in self.sessions if not s["dead"] and self.group(s["group"])]
        return self.rng.choice(live) if live else None

    def step_refresh(self):
        s = self.live_session()
        if not s:
            return "refresh: no session"
        g = self.pick_gateway(s["group"])
        status, body = request(g.port, "POST", "/auth/refresh", json.dumps({"refresh_token": s["refresh"]}))
        if status == 200:
            pair = json.loads(body)
            s["access"], s["refresh"] = pair["access_token"], pair["refresh_token"]
        elif status == 400:
            s["dead"] = True
            self.refused_refresh.append((s["group"], s["refresh"]))
        return f"refresh on {g.name}: {status}"

    def step_logout(self):
        s = self.live_session()
        if not s:
            return "logout: no session"
        g = self.pick_gateway(s["group"])
        status, _ = request(g.port, "POST", "/auth/logout", headers={"authorization": f"Bearer {s['access']}"})
        if status == 204:
            s["dead"] = True
            self.ended.append((s["group"], s["access"], s["refresh"], time.time()))
        return f"logout on {g.name}: {status}"

    def step_signout(self):
        s = self.live_session()
        if not s:
            return "sign-out: no session"
        g = self.pick_gateway(s["group"])
        before = int(time.time())
        status, _ = g.admin_post("/revocations", json.dumps({"subject": s["user"], "before": before}))
        if status == 201:
            self.signouts.append((s["group"], s["user"], before))
            for other in self.sessions:
                if other["group"] == s["group"] and other["user"] == s["user"] and other["created"] < before:
                    other["dead"] = True
        return f"sign out {s['user']} on {g.name}: {status}"

    def reload(self, g):
        return g.admin_post("/reload")

    def step_good_reload(self):
        g = self.pick_gateway()
        g.extra_route = not g.extra_route
        g.write(g.config())
        status, body = self.reload(g)
        self.check(status == 200, f"good reload on {g.name} applied ({status} {body[:200]})")
        return f"good reload on {g.name}: {status}"

    def step_bad_reload(self):
        g = self.pick_gateway()
        kind = self.rng.choice(["invalid", "store"])
        g.write(g.config(broken=kind))
        status, body = self.reload(g)
        self.check(status == 422, f"bad reload ({kind}) on {g.name} refused ({status} {body[:200]})")
        g.write(g.config())
        return f"bad reload ({kind}) on {g.name}: {status}"

    def step_restart(self):
        g = self.rng.choice(self.gateways)
        g.stop()
        g.start()
        return f"restart {g.name}"

    def step_redis(self):
        if self.args.topology == "cluster":
            live = [n for n in self.cluster if n["process"].poll() is None]
            replicas = [n for n in live if self.cli(n["port"], "ROLE").startswith("slave")]
            masters = [n for n in live if self.cli(n["port"], "ROLE").startswith("master")]
            if replicas and self.rng.random() < 0.5:
                node = self.rng.choice(replicas)
                out = self.cli(node["port"], "CLUSTER", "FAILOVER")
                what = f"cluster failover to {node['port']}: {out}"
                end = time.time() + 20
                while time.time() < end and not self.cli(node["port"], "ROLE").startswith("master"):
                    time.sleep(0.05)
            else:
                node = self.rng.choice(masters)
                self.cli(node["port"], "SHUTDOWN")
                node["process"].wait(15)
                # Its replica takes over (node timeout 2 s); the old master rejoins as a replica.
                end = time.time() + 30
                while time.time() < end:
                    others = [n for n in self.cluster if n is not node and n["process"].poll() is None]
                    if all("cluster_state:ok" in self.cli(n["port"], "CLUSTER", "INFO") for n in others):
                        break
                    time.sleep(0.1)
                node["process"] = subprocess.Popen(node["args"], stdout=node["log"], stderr=node["log"],
                                                   cwd=node["args"][node["args"].index("--dir") + 1])
                wait_port(node["port"])
                what = f"cluster master {node['port']} killed and restarted"
            if not self.wait_cluster():
                # The checks go on (an unsettled cluster may refuse writes, which are then not
                # acknowledged); the report says the step did not settle.
                what += " (the cluster had not settled after 30 s)"
                print(f"state: {what}", file=sys.stderr, flush=True)
            end = time.time() + 20
            while time.time() < end and not all(request(g.admin, "GET", "/readyz")[0] == 200 for g in self.group("redis")):
                time.sleep(0.05)
            return what
        if self.args.topology == "sentinel":
            s = self.rng.choice(self.sentinels)
            out = self.cli(s["port"], "SENTINEL", "FAILOVER", "state")
            end = time.time() + 30
            # Settled: every sentinel names one master, and it says it is one.
            while time.time() < end:
                answers = {self.cli(x["port"], "SENTINEL", "get-master-addr-by-name", "state") for x in self.sentinels}
                if len(answers) == 1:
                    port = list(answers)[0].split("\n")[-1]
                    if port.isdigit() and self.cli(int(port), "ROLE").startswith("master"):
                        break
                time.sleep(0.1)
            return f"sentinel failover: {out}"
        node = self.redis_node
        self.cli(node["port"], "SHUTDOWN")
        node["process"].wait(15)
        node["process"] = subprocess.Popen(node["args"], stdout=node["log"], stderr=node["log"])
        wait_port(node["port"])
        # The shared gateways resynchronize; readiness says when.
        end = time.time() + 20
        while time.time() < end and not all(request(g.admin, "GET", "/readyz")[0] == 200 for g in self.group("redis")):
            time.sleep(0.05)
        return "redis restart"

    # A fleet-wide rate limit (#36): /limited lets each user through LIMIT_BURST times at once
    # (30/h: one more every two minutes, nothing within a step), counted on the group's store.
    # The bound the README gives: an instance admits at most an eighth of the burst ahead of
    # Redis's answer (KeyPicture.maxAhead), leased units are charged before they are used, and a
    # request Redis did not answer is let through under `on_unavailable: allow` (counted as
    # `unavailable` on /metrics). A lease Redis refused near the limit may leave up to its size
    # (a sixteenth of the burst) unspent, per instance.
    LIMIT_BURST = 64
    LIMIT_AHEAD = LIMIT_BURST // 8
    LIMIT_LEASE = LIMIT_BURST // 16

    def unavailable_decisions(self, g):
        """This instance's `unavailable` rate-limit decisions so far (None: /metrics did not answer)."""
        status, text = request(g.admin, "GET", "/metrics", headers={"authorization": f"Bearer {self.admin_token}"})
        if status != 200:
            return None
        prefix = 'portcullis_rate_limit_decisions_total{rule="per-user",result="unavailable"}'
        return sum(int(float(line.split()[-1])) for line in text.splitlines() if line.startswith(prefix))

    def step_ratelimit(self):
        group = self.rng.choice(["redis", "redis", "embedded"])
        live = self.group(group)
        if not live:
            return "rate limit: no live instance"
        user = f"limited-{self.rng.randrange(1 << 40):x}"
        now = int(time.time())
        token = jwt.encode({"sub": user, "iat": now - 5, "exp": now + 3600}, self.app_secret, algorithm="HS256")
        before = [self.unavailable_decisions(g) for g in live]
        statuses = []
        for _ in range(100):
            g = self.rng.choice(live)
            statuses.append(request(g.port, "GET", "/limited/x", headers={"authorization": f"Bearer {token}"})[0])
        after = [self.unavailable_decisions(g) for g in live]
        admitted = statuses.count(200)
        known = None not in before and None not in after
        unanswered = sum(b - a for a, b in zip(before, after)) if known else 0
        ceiling = self.LIMIT_BURST + len(live) * self.LIMIT_AHEAD + unanswered + 1
        what = f"rate limit on {'+'.join(g.name for g in live)}: {admitted} of 100 admitted, {unanswered} unanswered"
        self.check(known and admitted <= ceiling, f"{what}: more than the burst ({self.LIMIT_BURST}) and its bound ({ceiling})")
        if known and unanswered == 0 and all(s in (200, 429) for s in statuses):
            floor = self.LIMIT_BURST - len(live) * self.LIMIT_LEASE
            self.check(admitted >= floor, f"{what}: fewer than the burst allows ({floor})")
        return what

    STEPS = [("revoke", 6), ("exchange", 6), ("refresh", 6), ("logout", 3), ("signout", 2),
             ("good_reload", 2), ("bad_reload", 2), ("restart", 1), ("redis", 1), ("ratelimit", 2)]

    def storm(self):
        names = [n for n, w in self.STEPS for _ in range(w)]
        end = time.time() + self.args.seconds
        step = 0
        while time.time() < end:
            step += 1
            name = self.rng.choice(names)
            what = getattr(self, f"step_{name}")()
            self.counts[name] = self.counts.get(name, 0) + 1
            if self.args.verbose:
                print(f"{step:4d} {what}", flush=True)
            for g in self.gateways:
                self.check(g.alive(), f"step {step} ({what}): {g.name} is running")
                if not g.alive():
                    g.start()
            self.verify(f"step {step} ({what})")
        self.verify("final", everything=True)
        return step


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--binary", required=True)
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--bound", type=float, default=2.0, help="seconds an acknowledged promise may take to be enforced")
    parser.add_argument("--topology", choices=["redis", "sentinel", "cluster"], default="redis")
    parser.add_argument("--no-persistence", action="store_true",
                        help="Redis without an append-only file: a Redis restart loses its data, the gateways must restore it")
    parser.add_argument("--load", action="store_true", help="wrk on A and h2load on B throughout (authenticated)")
    parser.add_argument("--keep-dir", action="store_true")
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args()
    run = Run(args)
    try:
        try:
            run.setup()
        except Exception as error:  # noqa: BLE001 - a setup failure is exit 2 with its reason
            print(f"state: setup failed: {error}", file=sys.stderr)
            return 2
        if args.load:
            run.start_load()
        started = time.time()
        steps = run.storm()
        delays = sorted(run.delays) or [0.0]
        p99 = delays[min(len(delays) - 1, int(len(delays) * 0.99))]
        print(f"## Portcullis state checker: seed {args.seed}, {args.topology}{', under wrk and h2load' if args.load else ''}, "
              f"{time.time() - started:.0f} s, {steps} steps")
        print("| step | count |")
        print("|---|---:|")
        for name, _ in Run.STEPS:
            print(f"| {name} | {run.counts.get(name, 0)} |")
        print(f"history: {len(run.revoked)} revocations, {len(run.ended)} logouts, {len(run.signouts)} sign-outs, "
              f"{len(run.sessions)} sessions; enforcement after acknowledgement: p99 {p99 * 1000:.0f} ms, "
              f"max {delays[-1] * 1000:.0f} ms")
        for failure in run.failures[:30]:
            print(f"  broken: {failure}")
        print(f"{run.passed} passed, {run.failed} failed")
        return 0 if run.failed == 0 else 1
    finally:
        run.teardown()


if __name__ == "__main__":
    sys.exit(main())
