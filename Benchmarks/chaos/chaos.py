#!/usr/bin/python3
"""Seeded chaos harness for Portcullis: misbehaving clients, upstreams and a key host try to crash
the gateway binary; at the end the harness checks that it survived and still serves.

usage: chaos.py --binary PATH [--seconds N] [--seed S] [--clients C] [--soak]
                [--report-every SECONDS] [--keep-dir] [more options: --help]

Everything listens on 127.0.0.1 only (free ports), lives in a temporary directory, and is bounded
in time: every socket operation has a timeout, every client task stops at the deadline, and a
watchdog thread kills every process the harness started and exits if the whole run overruns.
Run with Debian's /usr/bin/python3 (python3-h2, python3-cryptography). See README.md beside it.

Exit status: 0 all checks passed, 1 a check failed, 2 setup error (binary missing, configuration
refused, gateway did not start), 3 watchdog fired, 130 interrupted.
"""

import argparse
import asyncio
import base64
import collections
import ctypes
import json
import os
import random
import re
import shlex
import shutil
import signal
import socket
import ssl
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback

HOST = "127.0.0.1"
ADMIN_TOKEN = "chaos-admin-token-0123456789abcdef"
AUDIENCE = "ios-client"
ISSUER = "https://accounts.google.com"
LINGER_RST = struct.pack("ii", 1, 0)
CRASH_LINE = re.compile(r"AddressSanitizer|ThreadSanitizer|LeakSanitizer|UndefinedBehaviorSanitizer|MemorySanitizer"
                        r"|runtime error|Fatal error|SUMMARY:|Program crashed"
                        r"|double free|free\(\): invalid|corrupted size|corrupted double-linked|malloc\(\): |munmap_chunk")
EXPECTED_ERRORS = (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ssl.SSLError, OSError,
                   EOFError)


def b64u(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def pick(rng, weighted):
    """One item of [(value, weight), ...]."""
    return rng.choices([v for v, _ in weighted], [w for _, w in weighted])[0]


def set_pdeathsig():
    """In a child before exec: die with SIGKILL when the harness dies, whatever kills it."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:
        pass


def signame(returncode):
    if returncode is None:
        return "running"
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exited with status {returncode}"


# ------------------------------------------------------------------------------------------------
# Servers child: key host, normal upstream, misbehaving upstream (its own process, own event loop)
# ------------------------------------------------------------------------------------------------

class BadMessage(Exception):
    """The peer's bytes are not the HTTP/1.1 we expect."""


async def read_head(reader):
    data = await reader.readuntil(b"\r\n\r\n")
    lines = data.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2:
        raise BadMessage(f"bad first line {lines[0][:60]!r}")
    headers = {}
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    return parts, headers


async def read_request_body(reader, headers):
    if "chunked" in headers.get("transfer-encoding", "").lower():
        total = 0
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0].strip(), 16)
            if size == 0:
                while await reader.readuntil(b"\r\n") != b"\r\n":
                    pass
                return total
            await reader.readexactly(size + 2)
            total += size
    n = int(headers.get("content-length", "0") or 0)
    if n:
        await reader.readexactly(n)
    return n


def rst_close(writer):
    try:
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, LINGER_RST)
    except OSError:
        pass
    writer.transport.abort()


def json_response(obj, close=False, status="200 OK", extra=b""):
    body = json.dumps(obj).encode()
    return (b"HTTP/1.1 %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n%s%s\r\n"
            % (status.encode(), len(body), b"connection: close\r\n" if close else b"", extra)) + body


class Servers:
    def __init__(self, spec):
        self.spec = spec
        self.rng = random.Random(spec["seed"] + 1_000_003)
        self.jwks = json.dumps(spec["jwks"]).encode()
        self.key_state = "up"          # up | refuse | reset | error
        self.key_server = None
        self.key_port = 0
        self.outages = spec["outages"]
        self.counts = collections.Counter()

    def log(self, msg):
        sys.stderr.write(f"{time.strftime('%H:%M:%S')} servers: {msg}\n")
        sys.stderr.flush()

    async def key_host(self, reader, writer):
        try:
            while True:
                (method, target, *_), headers = await asyncio.wait_for(read_head(reader), 30)
                await read_request_body(reader, headers)
                self.counts["key_requests"] += 1
                if self.key_state == "reset":
                    self.counts["key_resets"] += 1
                    return rst_close(writer)
                if self.key_state == "error":
                    self.counts["key_errors"] += 1
                    writer.write(json_response({"error": "outage"}, close=True, status="503 Service Unavailable"))
                    await writer.drain()
                    return
                await asyncio.sleep(self.rng.uniform(0.2, 1.5))
                if self.key_state == "reset":
                    self.counts["key_resets"] += 1
                    return rst_close(writer)
                close = headers.get("connection", "").lower() == "close"
                if target.split("?")[0] == "/jwks":
                    body = self.jwks
                    writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncache-control: public, max-age=20"
                                 b"\r\ncontent-length: %d\r\n%s\r\n" % (len(body), b"connection: close\r\n" if close else b"")
                                 + body)
                else:
                    writer.write(json_response({"error": "not found"}, close=close, status="404 Not Found"))
                await writer.drain()
                if close:
                    return
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, asyncio.TimeoutError, BadMessage, ValueError,
                OSError):
            pass
        finally:
            writer.transport.abort() if not writer.transport.is_closing() else None

    async def app(self, reader, writer):
        """The normal upstream: 200 with a small JSON body echoing x-user-id, keep-alive."""
        try:
            while True:
                (method, target, *_), headers = await asyncio.wait_for(read_head(reader), 120)
                n = await asyncio.wait_for(read_request_body(reader, headers), 30)
                close = headers.get("connection", "").lower() == "close"
                writer.write(json_response({"x-user-id": headers.get("x-user-id"), "path": target, "body": n},
                                           close=close))
                await writer.drain()
                if close:
                    return
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, asyncio.TimeoutError, BadMessage, ValueError,
                OSError):
            pass
        finally:
            writer.close()

    async def chaos(self, reader, writer):
        """The misbehaving upstream: the last path segment says how to misbehave."""
        try:
            while True:
                (method, target, *_), headers = await asyncio.wait_for(read_head(reader), 120)
                what = target.split("?")[0].rstrip("/").rsplit("/", 1)[-1]
                self.counts["chaos_" + what] += 1
                if what == "reset":
                    return rst_close(writer)
                await asyncio.wait_for(read_request_body(reader, headers), 30)
                if what == "hang":
                    await asyncio.wait_for(reader.read(), 120)   # until the gateway gives up
                    return
                if what in ("ws", "wskeep"):   # a WebSocket stand-in: 101, then echo; "ws" may drop the tunnel
                    writer.write(b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
                    await writer.drain()
                    drop_after = self.rng.choice([None, None, None, 1, 3]) if what == "ws" else None
                    chunks = 0
                    while True:
                        data = await asyncio.wait_for(reader.read(65536), 120)
                        if not data:
                            return
                        chunks += 1
                        if drop_after is not None and chunks >= drop_after:
                            return rst_close(writer) if self.rng.random() < 0.5 else writer.close()
                        writer.write(data)
                        await asyncio.wait_for(writer.drain(), 30)
                if what == "half":
                    writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 4096\r\n\r\n"
                                 + b"h" * self.rng.randint(0, 3000))
                    await writer.drain()
                    return writer.close()
                if what == "slowchunk":
                    writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ntransfer-encoding: chunked\r\n\r\n")
                    for _ in range(10):
                        chunk = b"c" * self.rng.randint(1, 300)
                        writer.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                        await writer.drain()
                        await asyncio.sleep(0.2)
                    writer.write(b"0\r\n\r\n")
                    await writer.drain()
                    continue
                if what == "big":
                    size = self.rng.randint(2, 4) * 1024 * 1024
                    writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/octet-stream\r\ncontent-length: %d\r\n\r\n"
                                 % size)
                    piece = b"b" * 65536
                    for _ in range(size // len(piece)):
                        writer.write(piece)
                        await asyncio.wait_for(writer.drain(), 30)
                    continue
                writer.write(json_response({"x-user-id": headers.get("x-user-id"), "path": target}))
                await writer.drain()
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, asyncio.TimeoutError, BadMessage, ValueError,
                OSError):
            pass
        finally:
            writer.transport.abort() if not writer.transport.is_closing() else None

    async def start_key_server(self):
        self.key_server = await asyncio.start_server(self.key_host, HOST, self.key_port, reuse_address=True)
        self.key_port = self.key_server.sockets[0].getsockname()[1]

    async def outage_loop(self):
        while True:
            await asyncio.sleep(self.rng.uniform(20, 60))
            if not self.outages:
                continue
            mode, length = self.rng.choice(["refuse", "reset", "error"]), self.rng.uniform(2, 8)
            self.log(f"key host outage: {mode} for {length:.1f} s")
            self.counts["outage_" + mode] += 1
            self.key_state = mode
            if mode == "refuse":
                self.key_server.close()
            await asyncio.sleep(length)
            if mode == "refuse":
                for _ in range(50):
                    try:
                        await self.start_key_server()
                        break
                    except OSError:
                        await asyncio.sleep(0.1)
            self.key_state = "up"
            self.log("key host back")

    def stop_outages(self):
        self.outages = False
        self.log("outages off")

    async def main(self):
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGUSR1, self.stop_outages)
        loop.add_signal_handler(signal.SIGUSR2, lambda: self.log("counts " + json.dumps(self.counts)))
        await self.start_key_server()
        app = await asyncio.start_server(self.app, HOST, 0, backlog=512)
        chaos = await asyncio.start_server(self.chaos, HOST, 0, backlog=512)
        print(json.dumps({"key": self.key_port, "app": app.sockets[0].getsockname()[1],
                          "chaos": chaos.sockets[0].getsockname()[1]}), flush=True)
        asyncio.create_task(self.outage_loop())
        # Bounded: the harness kills this process; this is a last resort if it cannot.
        await asyncio.sleep(self.spec["lifetime"])
        self.log("lifetime over")


def servers_main(spec_json):
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    asyncio.run(Servers(json.loads(spec_json)).main())


# ------------------------------------------------------------------------------------------------
# HTTP helpers for the clients
# ------------------------------------------------------------------------------------------------

async def read_response(reader, method="GET", keep_body=False, on_status=None):
    """Reads one response; returns (status, close, body). Calls on_status(status) once the head is in,
    so a status is counted even when the body is cut short."""
    while True:
        data = await reader.readuntil(b"\r\n\r\n")
        lines = data.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
            raise BadMessage(f"bad status line {lines[0][:60]!r}")
        status = int(parts[1])
        if status >= 200 or status == 101:
            break
    headers = {}
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(":")
            headers.setdefault(name.strip().lower(), value.strip())
    if on_status:
        on_status(status)
    close = headers.get("connection", "").lower() == "close" or parts[0] == "HTTP/1.0"
    body = bytearray()

    def keep(chunk):
        if keep_body and len(body) < 65536:
            body.extend(chunk[:65536 - len(body)])

    if method == "HEAD" or status in (204, 304):
        pass
    elif "chunked" in headers.get("transfer-encoding", "").lower():
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0].strip(), 16)
            if size == 0:
                while await reader.readuntil(b"\r\n") != b"\r\n":
                    pass
                break
            keep(await reader.readexactly(size))
            await reader.readexactly(2)
    elif "content-length" in headers:
        left = int(headers["content-length"])
        while left > 0:
            chunk = await reader.readexactly(min(left, 262144))
            keep(chunk)
            left -= len(chunk)
    else:
        close = True
        while True:
            chunk = await reader.read(262144)
            if not chunk:
                break
            keep(chunk)
    return status, close, bytes(body)


async def bounded(aw, timeout):
    """asyncio.wait_for without its loose end: the awaited task's exception is always retrieved, also
    when the caller is cancelled while it fails (no 'Task exception was never retrieved' noise)."""
    task = asyncio.ensure_future(aw)
    try:
        done, _ = await asyncio.wait({task}, timeout=timeout)
    except asyncio.CancelledError:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        raise
    if not done:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        raise asyncio.TimeoutError()
    return task.result()


def rst(writer):
    """Close with RST (SO_LINGER 0), TLS or not."""
    try:
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, LINGER_RST)
    except OSError:
        pass
    writer.transport.abort()


def half_close(writer):
    """shutdown(SHUT_WR) on the socket itself (on TLS: no close_notify, just the TCP FIN)."""
    if writer.can_write_eof():
        writer.write_eof()
    else:
        writer.get_extra_info("socket").shutdown(socket.SHUT_WR)


def finish(writer):
    if writer is not None and not writer.transport.is_closing():
        writer.transport.abort()


PATHS = [("/api/items", 26), ("/open/ping", 14), ("/chaos/ok", 8), ("/chaos/reset", 9), ("/chaos/hang", 4),
         ("/chaos/half", 7), ("/chaos/slowchunk", 4), ("/chaos/big", 2), ("/chaos/strict/ok", 5),
         ("/chaos/strict/reset", 6), ("/chaos/strict/half", 3), ("/chaos/strict/hang", 2)]
CREDS = [("valid", 42), ("expired", 10), ("unknown_kid", 22), ("junk_kid", 10), ("junk_token", 3), ("none", 13)]
LEAVES = [("full", 32), ("after_send", 10), ("mid_head", 8), ("mid_body", 10), ("first_byte", 10),
          ("half_close", 10), ("reset", 20)]
PIPELINE_LEAVES = [("full", 45), ("after_send", 10), ("first_byte", 15), ("half_close", 10), ("reset", 20)]
LOGIN_LEAVES = [("full", 40), ("mid_body", 25), ("reset", 15), ("after_send", 10), ("first_byte", 10)]
ACTIONS = [("h1-plain", 22), ("h1-tls", 18), ("h1-pipelined", 10), ("login", 10), ("h2-tls", 7), ("h2c", 7),
           ("websocket", 5)]
WS_LEAVES = [("close_frame", 30), ("reset", 25), ("half_close", 15), ("mid_frame", 15), ("linger", 15)]
GOING_AWAY = bytes([0x88, 12, 0x03, 0xE9]) + b"going away"


def ws_frame(rng, opcode=None, size=None, mask=True):
    """One client frame (masked), of a random opcode and size unless given."""
    opcode = rng.choice([0x1, 0x2, 0x2, 0x9, 0xA, 0x0, 0x3]) if opcode is None else opcode
    size = rng.choice([0, 5, 125, 126, 300, 65535, 65536, 70000]) if size is None else size
    payload = rng.randbytes(size)
    head = bytes([0x80 | opcode])
    bit = 0x80 if mask else 0
    if size < 126:
        head += bytes([bit | size])
    elif size <= 0xFFFF:
        head += bytes([bit | 126]) + struct.pack(">H", size)
    else:
        head += bytes([bit | 127]) + struct.pack(">Q", size)
    key = rng.randbytes(4) if mask else b""
    return head + key + bytes(b ^ key[i & 3] for i, b in enumerate(payload)) if mask else head + payload
PORT_CHOICE = [("plain", 70), ("h1-on-h2c", 30)]   # plain HTTP/1.1 goes to the h2c listener too (it sniffs the preface)
MIXES = {"action": ACTIONS, "path": PATHS, "cred": CREDS, "leave": LEAVES, "pipeline-leave": PIPELINE_LEAVES,
         "login-leave": LOGIN_LEAVES, "port": PORT_CHOICE, "ws-leave": WS_LEAVES}


def apply_mix(spec):
    """--mix name=weight,...: change the weight of any action, path, credential, leave mode or port choice
    (0 turns it off), e.g. --mix unknown_kid=0,h1-on-h2c=0 to narrow down a crash."""
    for item in filter(None, (spec or "").split(",")):
        name, _, weight = item.partition("=")
        hits = 0
        for table in MIXES.values():
            for i, (value, _) in enumerate(table):
                if value == name.strip():
                    table[i] = (value, float(weight))
                    hits += 1
        if not hits:
            raise SystemExit(f"chaos: --mix: no action, path, credential, leave mode or port called {name!r}; "
                             f"known: {', '.join(v for t in MIXES.values() for v, _ in t)}")
    for kind, table in MIXES.items():
        if not any(w > 0 for _, w in table):
            raise SystemExit(f"chaos: --mix leaves no {kind} with a weight above 0")

JUNK_KIDS = [
    lambda r: "".join(chr(r.randint(0, 0x7F)) for _ in range(r.randint(1, 40))),
    lambda r: "k1\r\nx-injected: 1",
    lambda r: "../" * r.randint(1, 60) + "jwks",
    lambda r: "%n%s%x{}" * r.randint(1, 30),
    lambda r: "A" * r.randint(300, 4000),
    lambda r: "\U0001F511ключ\u202e\ufeff\u0000",
    lambda r: "",
    lambda r: " k1",
    lambda r: r.randint(-2 ** 63, 2 ** 63),
    lambda r: None,
    lambda r: ["k1"],
    lambda r: {"kid": "k1"},
    lambda r: True,
    lambda r: 1.5e308,
]


class KindStats:
    def __init__(self):
        self.ops = self.requests = self.completed = self.abandoned = self.timeouts = self.cut = 0
        self.errors = collections.Counter()
        self.status = collections.Counter()


# ------------------------------------------------------------------------------------------------
# The harness
# ------------------------------------------------------------------------------------------------

class Chaos:
    def __init__(self, args):
        self.args = args
        self.scale = args.timeout_scale
        self.dir = None
        self.gw = None
        self.servers = None
        self.gw_log = None
        self.ports = {}
        self.stats = collections.defaultdict(KindStats)
        self.mix = collections.Counter()
        self.unexpected = 0
        self.death = None            # (elapsed, how, phase)
        self.hang = None             # (elapsed, phase, detail)
        self.crash_seen_at = None
        self.log_offset = 0
        self.probes = {"answered": 0, "failed": 0, "slowest": 0.0}
        self.phase = "setup"
        self.storm_start = None
        self.samples = []            # (elapsed, fds, rss_kib)
        self.baseline_fds = self.baseline_rss = None
        self.peak_fds = self.peak_rss = 0
        self.after_fds = self.after_rss = None
        self.checks = []             # (name, ok, detail)
        self.report_rows = []
        self.shutdown_status = None
        self.interrupted = False
        self.cleaned = False
        self.lock = threading.Lock()

    # ---------------------------------------------------------------- setup
    def setup_files(self):
        from cryptography.hazmat.primitives.asymmetric import rsa
        self.dir = tempfile.mkdtemp(prefix="portcullis-chaos-")
        self.cert, self.key = os.path.join(self.dir, "cert.pem"), os.path.join(self.dir, "key.pem")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                        "-keyout", self.key, "-out", self.cert, "-days", "2", "-subj", "/CN=localhost",
                        "-addext", "subjectAltName=DNS:localhost"], check=True, capture_output=True, timeout=60)
        self.signing = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.attacker = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        pub = self.signing.public_key().public_numbers()
        n2b = lambda n: n.to_bytes((n.bit_length() + 7) // 8, "big")
        self.jwks = {"keys": [{"kty": "RSA", "kid": "k1", "alg": "RS256", "use": "sig", "n": b64u(n2b(pub.n)),
                               "e": b64u(n2b(pub.e))}]}
        now = int(time.time())
        life = int(self.args.seconds) + 7200
        self.valid = [self.jws(self.signing, {"alg": "RS256", "kid": "k1", "typ": "JWT"}, self.claims(f"chaos-{i}", now, life))
                      for i in range(8)]
        self.expired = [self.jws(self.signing, {"alg": "RS256", "kid": "k1", "typ": "JWT"},
                                 self.claims(f"late-{i}", now - 7200, 3600)) for i in range(4)]
        self.h2_ctx = self.tls_context(["h2"])
        self.h1_ctx = self.tls_context(["http/1.1"])

    def tls_context(self, alpn):
        ctx = ssl.create_default_context(cafile=self.cert)
        ctx.set_alpn_protocols(alpn)
        return ctx

    @staticmethod
    def claims(sub, iat, life):
        return {"iss": ISSUER, "aud": AUDIENCE, "azp": AUDIENCE, "sub": sub, "email": f"{sub}@example.com",
                "email_verified": True, "iat": iat, "exp": iat + life}

    @staticmethod
    def jws(key, header, claims, ensure_ascii=True):
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import padding
        h = b64u(json.dumps(header, separators=(",", ":"), ensure_ascii=ensure_ascii).encode())
        p = b64u(json.dumps(claims, separators=(",", ":")).encode())
        sig = key.sign(f"{h}.{p}".encode(), padding.PKCS1v15(), hashes.SHA256())
        return f"{h}.{p}.{b64u(sig)}"

    def token(self, rng, cred):
        """A credential of the kind named (None for none)."""
        self.mix["cred:" + cred] += 1
        now = int(time.time())
        if cred == "valid":
            return rng.choice(self.valid)
        if cred == "expired":
            return rng.choice(self.expired)
        if cred == "unknown_kid":   # a fresh random kid every time, so refetches happen
            kid = "rot-%016x" % rng.getrandbits(64)
            key = self.attacker if rng.random() < 0.5 else self.signing
            return self.jws(key, {"alg": "RS256", "kid": kid, "typ": "JWT"}, self.claims("x", now, 600))
        if cred == "junk_kid":
            kid = rng.choice(JUNK_KIDS)(rng)
            key = self.attacker if rng.random() < 0.5 else self.signing
            return self.jws(key, {"alg": "RS256", "kid": kid, "typ": "JWT"}, self.claims("x", now, 600),
                            ensure_ascii=rng.random() < 0.5)
        if cred == "junk_token":
            return rng.choice(["not.a.jwt", "a" * rng.randint(1, 40), "..", b64u(rng.randbytes(rng.randint(1, 300))),
                               b64u(b'{"alg":"none","kid":"k1"}') + "." + b64u(b'{"sub":"x"}') + ".",
                               b64u(b'{"alg":"RS256","kid":"k1"}') + "." + b64u(rng.randbytes(50)) + "." +
                               b64u(rng.randbytes(256))])
        return None

    def start_servers(self):
        spec = {"seed": self.args.seed, "jwks": self.jwks, "outages": self.outages,
                "lifetime": self.args.seconds + 900 * self.scale + 600}
        self.servers_log = open(os.path.join(self.dir, "servers.log"), "w")
        self.servers = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--serve", json.dumps(spec)],
                                        stdout=subprocess.PIPE, stderr=self.servers_log, stdin=subprocess.DEVNULL,
                                        preexec_fn=set_pdeathsig, start_new_session=True, text=True)
        import select
        ready, _, _ = select.select([self.servers.stdout], [], [], 30)
        if not ready:
            raise SetupError("the upstream/key-host process did not start within 30 s")
        line = self.servers.stdout.readline()
        if not line:
            raise SetupError("the upstream/key-host process exited: " + open(self.servers_log.name).read()[-2000:])
        self.ports.update(json.loads(line))

    def write_config(self):
        for name in ("plain", "tls", "h2c", "admin"):
            s = socket.socket()
            s.bind((HOST, 0))
            self.ports[name] = s.getsockname()[1]
            s.close()
        p = self.ports
        cfg = f"""# written by Benchmarks/chaos/chaos.py (seed {self.args.seed})
listen:
  - {{address: "{HOST}:{p['plain']}"}}
  - address: "{HOST}:{p['tls']}"
    tls:
      certificates: [{{certificate: "{self.cert}", private_key: "{self.key}"}}]
      alpn: [h2, http/1.1]
      handshake_timeout: 3s
    http2: {{max_concurrent_streams: 100, send_timeout: 4s, idle_timeout: 3s}}
  - {{address: "{HOST}:{p['h2c']}", h2c: true, http2: {{max_concurrent_streams: 100, send_timeout: 4s, idle_timeout: 3s}}}}
admin: {{address: "{HOST}:{p['admin']}", token: "{ADMIN_TOKEN}"}}
log_level: {self.args.gateway_log_level}
access_log: {"stdout" if self.args.access_log else "off"}
limits: {{max_body_bytes: 1MiB}}
timeouts: {{header: 3s, idle: 3s, body: 3s, send: 4s, shutdown_grace: 2s}}
upstreams:
  app:   {{url: "http://{HOST}:{p['app']}", max_connections: 4, max_pending: 16, connect_timeout: 2s, response_timeout: 3s, idle_timeout: 3s}}
  chaos: {{url: "http://{HOST}:{p['chaos']}", max_connections: 2, max_pending: 8, connect_timeout: 2s, response_timeout: 2s, idle_timeout: 3s}}
  ws:    {{url: "http://{HOST}:{p['chaos']}", max_connections: 16, max_pending: 8, connect_timeout: 2s, response_timeout: 2s, idle_timeout: 3s}}
routes:
  - {{path: /api, upstream: app, auth: required}}
  - {{path: /open, upstream: app, auth: none}}
  - {{path: /chaos, upstream: chaos, auth: optional}}
  - {{path: /chaos/strict, upstream: chaos, auth: required}}
  - {{path: /ws, upstream: ws, auth: optional}}
  - {{path: /ws/strict, upstream: ws, auth: required}}
  - {{path: /login, upstream: app, auth: required, credential: {{json_field: idToken, providers: [google], max_body: 16KiB}}}}
providers:
  - {{name: google, type: google, audiences: ["{AUDIENCE}"], jwks_url: "http://{HOST}:{p['key']}/jwks"}}
keys: {{min_refetch_interval: 1s, fetch_timeout: 3s, min_ttl: 15s, max_ttl: 60s}}
"""
        self.config = os.path.join(self.dir, "gateway.yaml")
        with open(self.config, "w") as f:
            f.write(cfg)
        r = subprocess.run([self.args.binary, "check-config", "--config", self.config], capture_output=True, text=True,
                           timeout=60 * self.scale, env=self.gateway_env())
        if r.returncode != 0:
            raise SetupError(f"check-config refused the configuration ({r.returncode}):\n{r.stdout}{r.stderr}")

    def gateway_env(self):
        env = dict(os.environ)
        env.setdefault("SWIFT_BACKTRACE", "enable=yes,interactive=no")
        env.setdefault("ASAN_OPTIONS", "detect_leaks=0:abort_on_error=0")
        for item in shlex.split(os.environ.get("CHAOS_GATEWAY_ENV", "")):
            name, sep, value = item.partition("=")
            if sep:
                env[name] = value
        return env

    def start_gateway(self):
        self.gw_log_path = os.path.join(self.dir, "gateway.log")
        self.gw_log = open(self.gw_log_path, "wb")
        self.gw = subprocess.Popen([self.args.binary, "run", "--config", self.config], stdout=self.gw_log,
                                   stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=self.gateway_env(),
                                   preexec_fn=set_pdeathsig, start_new_session=True)
        self.gw_start = time.monotonic()

    async def wait_listening(self):
        deadline = time.monotonic() + 30 * self.scale
        for name in ("plain", "tls", "h2c", "admin"):
            while True:
                if self.gw.poll() is not None:
                    raise SetupError(f"the gateway {signame(self.gw.returncode)} at start:\n" + self.log_tail(30))
                try:
                    _, w = await bounded(asyncio.open_connection(HOST, self.ports[name]), 2)
                    w.transport.abort()
                    break
                except (OSError, asyncio.TimeoutError):
                    if time.monotonic() > deadline:
                        raise SetupError(f"the gateway does not listen on {name} ({self.ports[name]}):\n"
                                         + self.log_tail(30))
                    await asyncio.sleep(0.1)
        # The keys come from a slow key host: wait until a valid token is accepted.
        while True:
            ok, detail = await self.valid_h1(self.ports["plain"], False, attempts=1)
            if ok:
                return
            if self.gw.poll() is not None or time.monotonic() > deadline:
                raise SetupError(f"no valid request succeeded at start ({detail}):\n" + self.log_tail(30))
            await asyncio.sleep(0.3)

    # ---------------------------------------------------------------- process observation
    def sample(self):
        pid = self.gw.pid
        try:
            fds = len(os.listdir(f"/proc/{pid}/fd"))
            rss = 0
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        rss = int(line.split()[1])
            return fds, rss
        except (OSError, ValueError):
            return None, None

    @staticmethod
    def cpu_seconds(pid):
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, ValueError, IndexError):
            return None

    def elapsed(self):
        return time.monotonic() - self.storm_start if self.storm_start else 0.0

    def scan_log(self):
        """Reads what the gateway logged since the last call; True once a crash line has appeared."""
        if self.crash_seen_at is None:
            try:
                with open(self.gw_log_path, "rb") as f:
                    f.seek(self.log_offset)
                    data = f.read()
            except OSError:
                data = b""
            cut = data.rfind(b"\n") + 1
            self.log_offset += cut
            if CRASH_LINE.search(data[:cut].decode("utf-8", "replace")):
                self.crash_seen_at = time.monotonic()
                print(f"\n!! crash report in the gateway's log during {self.phase} at t={self.elapsed():.1f} s",
                      flush=True)
                self.stop.set()
        return self.crash_seen_at is not None

    def check_alive(self, scan=False):
        """False once the gateway exited, or wrote a crash report and did not exit within 5 s."""
        if self.phase == "shutdown":   # the exit asked for is judged by shutdown_check
            return self.death is None
        if self.death is None and self.gw is not None:
            how = None
            if self.gw.poll() is not None:
                how = signame(self.gw.returncode)
            elif (scan and self.scan_log() or self.crash_seen_at) and time.monotonic() - self.crash_seen_at > 5:
                how = "crashed (crash report in its log) and did not exit (its crash handler hangs)"
            if how:
                self.death = (self.elapsed(), how, self.phase)
                print(f"\n!! gateway {how} during {self.phase} at t={self.elapsed():.1f} s", flush=True)
                self.stop.set()
        return self.death is None

    async def monitor(self):
        last_sample = 0.0
        while True:
            now = time.monotonic()
            scan = now - last_sample >= 0.5
            if not self.check_alive(scan=scan):
                return
            if scan:
                last_sample = now
                fds, rss = self.sample()
                if fds is not None:
                    self.samples.append((self.elapsed(), self.phase, fds, rss))
                    if self.phase in ("storm", "settle", "checks"):
                        self.peak_fds, self.peak_rss = max(self.peak_fds, fds), max(self.peak_rss, rss)
            if self.servers.poll() is not None and not getattr(self, "servers_dead", False):
                self.servers_dead = True
                print(f"!! the upstream/key-host process {signame(self.servers.returncode)}", flush=True)
            await asyncio.sleep(0.05)

    async def prober(self):
        """Once a second a request the gateway answers itself (404, no route): a hung event loop shows."""
        last_ok = time.monotonic()
        while True:
            t0 = time.monotonic()
            writer = None
            try:
                reader, writer = await self.open(self.ports["plain"], False, None, timeout=5 * self.scale)
                writer.write(b"GET /__chaos_probe HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
                await bounded(read_response(reader), 5 * self.scale)
                ok = True
            except (BadMessage, asyncio.TimeoutError) + EXPECTED_ERRORS:
                ok = False
            finally:
                finish(writer)
            now = time.monotonic()
            if ok:
                self.probes["answered"] += 1
                self.probes["slowest"] = max(self.probes["slowest"], now - t0)
                last_ok = now
            else:
                self.probes["failed"] += 1
                silent = now - last_ok
                if silent > self.args.hang_after * self.scale and self.hang is None and self.death is None:
                    self.hang = (self.elapsed(), self.phase, f"no probe answered for {silent:.0f} s")
                    print(f"\n!! gateway unresponsive during {self.phase} at t={self.elapsed():.1f} s: "
                          f"no probe answered for {silent:.0f} s", flush=True)
                    self.stop.set()
            await asyncio.sleep(max(0.0, 1.0 - (now - t0)))

    def total_ops(self):
        return sum(s.ops for s in self.stats.values()), sum(s.requests for s in self.stats.values()), \
            sum(sum(s.errors.values()) for s in self.stats.values())

    async def reporter(self):
        every = self.args.report_every
        print("\n| elapsed s | ops | ops/s | requests | client errors | fds | RSS MiB |\n|---:|---:|---:|---:|---:|---:|---:|",
              flush=True)
        last_ops, last_t = 0, 0.0
        while True:
            await asyncio.sleep(every - (self.elapsed() % every))
            t = self.elapsed()
            ops, reqs, errs = self.total_ops()
            fds, rss = self.sample()
            row = (t, ops, (ops - last_ops) / max(t - last_t, 1e-6), reqs, errs, fds, (rss or 0) / 1024)
            self.report_rows.append(row)
            print(f"| {t:.0f} | {ops} | {row[2]:.1f} | {reqs} | {errs} | {fds} | {row[6]:.1f} |", flush=True)
            last_ops, last_t = ops, t

    # ---------------------------------------------------------------- connections
    async def open(self, port, tls, alpn, timeout=None):
        timeout = timeout or 5 * self.scale
        kw = {"limit": 1 << 20}
        if tls:
            kw.update(ssl=self.h2_ctx if alpn == "h2" else self.h1_ctx, server_hostname="localhost",
                      ssl_handshake_timeout=timeout, ssl_shutdown_timeout=2)
        return await bounded(asyncio.open_connection(HOST, port, **kw), timeout)

    def h1_request(self, rng, path, cred, close, method="GET", body=None, declared=None):
        tok = self.token(rng, cred)
        if rng.random() < 0.3:
            path += f"?n={rng.randint(0, 99999)}"
        lines = [f"{method} {path} HTTP/1.1", "Host: localhost", "User-Agent: portcullis-chaos/1"]
        if tok is not None:
            lines.append("Authorization: Bearer " + tok)
        if rng.random() < 0.1:
            lines.append("X-User-Id: forged")
        if close:
            lines.append("Connection: close")
        if body is not None:
            lines.append("Content-Type: application/json")
            lines.append(f"Content-Length: {len(body) if declared is None else declared}")
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        return head, body or b""

    async def h1_exchange(self, rng, st, reader, writer, data, head_len, nresp, leave):
        """Sends data (one or more requests) and leaves as told. Returns (outcome, connection closed)."""
        self.mix["leave:" + leave] += 1
        on_status = lambda s: st.status.update([s])
        if leave == "mid_head":
            writer.write(data[:rng.randint(1, max(1, head_len - 1))])
            await writer.drain()
            await asyncio.sleep(rng.uniform(0, 0.5))
            (rst if rng.random() < 0.5 else finish)(writer)
            return "abandoned", True
        if leave == "mid_body":
            writer.write(data[:rng.randint(head_len, len(data))])
            await writer.drain()
            await asyncio.sleep(rng.uniform(0, 1.2))
            (rst if rng.random() < 0.5 else finish)(writer)
            return "abandoned", True
        writer.write(data)
        await writer.drain()
        if leave == "after_send":
            await asyncio.sleep(rng.choice([0.0, 0.0, rng.uniform(0, 1.5)]))
            writer.close()
            return "abandoned", True
        if leave == "reset":
            await asyncio.sleep(rng.uniform(0, 1.5))
            rst(writer)
            return "abandoned", True
        if leave == "first_byte":
            await reader.read(1)
            (rst if rng.random() < 0.5 else finish)(writer)
            return "abandoned", True
        if leave == "half_close":
            half_close(writer)
        try:
            for _ in range(nresp):
                _, close, _ = await read_response(reader, on_status=on_status)
                if close:
                    return "completed", True
        except (BadMessage,) + EXPECTED_ERRORS:
            self.mix[f"error-reading-after:{leave}"] += 1
            raise
        return "completed", leave == "half_close"

    async def op_h1(self, rng, st, tls, pipelined):
        port = self.ports["tls"] if tls else self.ports["plain" if pick(rng, PORT_CHOICE) == "plain" else "h2c"]
        reader, writer = await self.open(port, tls, "http/1.1")
        try:
            if pipelined:
                n = rng.randint(2, 3)
                reqs = [self.h1_request(rng, pick(rng, PATHS), pick(rng, CREDS), j == n - 1 and rng.random() < 0.3)
                        for j in range(n)]
                st.requests += n
                data = b"".join(h + b for h, b in reqs)
                return (await self.h1_exchange(rng, st, reader, writer, data, len(reqs[0][0]), n,
                                               pick(rng, PIPELINE_LEAVES)))[0]
            keepalive = rng.random() < 0.5
            nreq = rng.randint(2, 4) if keepalive else 1
            for j in range(nreq):
                last = j == nreq - 1
                leave = pick(rng, LEAVES) if last else "full"
                close = last and rng.random() < (0.3 if keepalive else 0.5)
                path, cred = pick(rng, PATHS), pick(rng, CREDS)
                if leave == "mid_body":   # a POST whose content-length promises more than is sent
                    body = json.dumps({"pad": "p" * rng.randint(0, 2000)}).encode()
                    head, body = self.h1_request(rng, path, cred, close, "POST", body, len(body) + rng.randint(1, 5000))
                else:
                    head, body = self.h1_request(rng, path, cred, close)
                st.requests += 1
                outcome, closed = await self.h1_exchange(rng, st, reader, writer, head + body, len(head), 1, leave)
                if closed or outcome != "completed":
                    return outcome
            return "completed"
        finally:
            finish(writer)

    async def op_login(self, rng, st):
        tls = rng.random() < 0.5
        reader, writer = await self.open(self.ports["tls"] if tls else self.ports["plain"], tls, "http/1.1")
        try:
            cred = pick(rng, CREDS)
            tok = self.token(rng, cred)
            shape = pick(rng, [("good", 70), ("missing", 8), ("not_json", 6), ("duplicate", 6), ("oversized", 4),
                               ("not_string", 6)])
            self.mix["login:" + shape] += 1
            if shape == "good" and tok is not None:
                body = json.dumps({"idToken": tok, "device": "chaos"}).encode()
            elif shape == "not_json":
                body = b"idToken=" + (tok or "x").encode()
            elif shape == "duplicate":
                body = ('{"idToken": %s, "idToken": %s}' % (json.dumps(tok or "a"), json.dumps(rng.choice(self.valid)))).encode()
            elif shape == "oversized":
                body = json.dumps({"idToken": tok or "a", "pad": "p" * 20000}).encode()
            elif shape == "not_string":
                body = json.dumps({"idToken": rng.choice([1, None, ["a"], {"a": 1}, True])}).encode()
            else:
                body = json.dumps({"device": "chaos"}).encode()
            leave = pick(rng, LOGIN_LEAVES)
            declared = len(body) + rng.randint(1, 2000) if leave == "mid_body" else len(body)
            lines = ["POST /login HTTP/1.1", "Host: localhost", "Content-Type: application/json",
                     f"Content-Length: {declared}"]
            if rng.random() < 0.2:
                lines.append("Authorization: Bearer " + rng.choice(self.expired))   # ignored on such a route
            if rng.random() < 0.4:
                lines.append("Connection: close")
            head = ("\r\n".join(lines) + "\r\n\r\n").encode()
            st.requests += 1
            return (await self.h1_exchange(rng, st, reader, writer, head + body, len(head), 1, leave))[0]
        finally:
            finish(writer)

    async def op_h2(self, rng, st, tls):
        import h2.config
        import h2.connection
        import h2.events
        import h2.settings
        reader, writer = await self.open(self.ports["tls"] if tls else self.ports["h2c"], tls, "h2")
        try:
            if tls:
                alpn = writer.get_extra_info("ssl_object").selected_alpn_protocol()
                if alpn != "h2":
                    raise BadMessage(f"ALPN chose {alpn!r}")
            conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
            conn.local_settings = h2.settings.Settings(client=True, initial_values={
                h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 1 << 20, h2.settings.SettingCodes.ENABLE_PUSH: 0})
            conn.initiate_connection()
            conn.increment_flow_control_window(1 << 24)
            n = rng.randint(5, 30)
            fate = pick(rng, [("full", 60), ("close", 20), ("reset", 20)])
            self.mix["h2:" + fate] += 1
            open_streams = set()
            scheme = "https" if tls else "http"
            for _ in range(n):
                sid = conn.get_next_available_stream_id()
                cred = pick(rng, CREDS)
                if rng.random() < 0.1:      # a body-credential POST, sometimes stalled or cut
                    tok = self.token(rng, cred)
                    body = json.dumps({"idToken": tok or "x"}).encode()
                    stall = rng.random() < 0.3
                    conn.send_headers(sid, [(":method", "POST"), (":scheme", scheme), (":authority", "localhost"),
                                            (":path", "/login"), ("content-type", "application/json"),
                                            ("content-length", str(len(body) + (50 if stall else 0)))])
                    conn.send_data(sid, body, end_stream=not stall)
                else:
                    tok = self.token(rng, cred)
                    path = pick(rng, PATHS)
                    headers = [(":method", "GET"), (":scheme", scheme), (":authority", "localhost"), (":path", path),
                               ("user-agent", "portcullis-chaos/1")]
                    if tok is not None:
                        headers.append(("authorization", "Bearer " + tok))
                    conn.send_headers(sid, headers, end_stream=True)
                st.requests += 1
                if rng.random() < 0.2:
                    conn.reset_stream(sid, 8)   # CANCEL right after HEADERS
                    self.mix["h2:stream_reset"] += 1
                else:
                    open_streams.add(sid)
            writer.write(conn.data_to_send())
            await writer.drain()
            cut_at = time.monotonic() + rng.uniform(0, 1.5) if fate != "full" else None
            while open_streams:
                wait = None if cut_at is None else cut_at - time.monotonic()
                if wait is not None and wait <= 0:
                    break
                try:
                    data = await bounded(reader.read(262144), wait)
                except asyncio.TimeoutError:
                    break
                if not data:
                    raise EOFError("server closed the HTTP/2 connection")
                for ev in conn.receive_data(data):
                    if isinstance(ev, h2.events.ResponseReceived):
                        status = dict(ev.headers).get(":status", "?")
                        st.status[int(status) if status.isdigit() else status] += 1
                    elif isinstance(ev, h2.events.DataReceived):
                        conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
                    elif isinstance(ev, (h2.events.StreamEnded, h2.events.StreamReset)):
                        open_streams.discard(ev.stream_id)
                        if isinstance(ev, h2.events.StreamReset):
                            st.status["RST"] += 1
                    elif isinstance(ev, h2.events.ConnectionTerminated):
                        st.status["GOAWAY"] += 1
                        open_streams = {s for s in open_streams if s <= (ev.last_stream_id or 0)}
                        if ev.error_code:
                            raise EOFError(f"GOAWAY {ev.error_code}")
                out = conn.data_to_send()
                if out:
                    writer.write(out)
            if fate == "full":
                conn.close_connection()
                writer.write(conn.data_to_send())
                writer.close()
                return "completed"
            (rst if fate == "reset" else finish)(writer)
            return "abandoned"
        finally:
            finish(writer)

    async def ws_upgrade(self, rng, port, tls, path, cred):
        """Opens a WebSocket through the gateway; returns (reader, writer, status)."""
        reader, writer = await self.open(port, tls, "http/1.1")
        tok = self.token(rng, cred)
        lines = [f"GET {path} HTTP/1.1", "Host: localhost", "Connection: Upgrade", "Upgrade: websocket",
                 "Sec-WebSocket-Version: 13", "Sec-WebSocket-Key: " + b64u(rng.randbytes(16)) + "=="]
        if tok is not None:
            lines.append("Authorization: Bearer " + tok)
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode())
        await writer.drain()
        (_, status, *_), _ = await read_head(reader)
        return reader, writer, int(status)

    async def op_ws(self, rng, st):
        """A WebSocket on the misbehaving upstream's echo: frames of every size (some cut short), then a
        Close, a reset, a half close, a frame left unfinished or a connection left open."""
        tls = rng.random() < 0.4
        path = rng.choice(["/ws/ws", "/ws/ws", "/ws/strict/ws"])
        st.requests += 1
        reader, writer, status = await self.ws_upgrade(rng, self.ports["tls" if tls else "plain"], tls, path,
                                                       pick(rng, CREDS))
        try:
            st.status.update([status])
            if status != 101:
                return "completed"
            leave = pick(rng, WS_LEAVES)
            self.mix["ws-leave:" + leave] += 1
            for _ in range(rng.randint(1, 4)):
                frame = ws_frame(rng)
                writer.write(frame)
                await writer.drain()
                got = 0
                while got < len(frame):   # the echo (the upstream may drop the tunnel: EOF)
                    data = await reader.read(65536)
                    if not data:
                        return "completed"
                    got += len(data)
            if leave == "close_frame":   # the stand-in echoes it and keeps the tunnel: read the echo, then leave
                close = ws_frame(rng, 0x8, 2)
                writer.write(close)
                await writer.drain()
                await reader.readexactly(len(close))
            elif leave == "reset":
                rst(writer)
            elif leave == "half_close":
                half_close(writer)
                await reader.read()
            elif leave == "mid_frame":
                frame = ws_frame(rng, 0x2, 300)
                writer.write(frame[:rng.randint(1, len(frame) - 1)])
                await writer.drain()
                await asyncio.sleep(rng.uniform(0, 2))
            else:
                await asyncio.sleep(rng.uniform(0, 3))
            return "completed"
        finally:
            finish(writer)

    async def client(self, i):
        rng = random.Random(self.args.seed + i)
        while not self.stop.is_set():
            left = self.deadline - time.monotonic()
            if left <= 0:
                return
            kind = pick(rng, ACTIONS)
            st = self.stats[kind]
            st.ops += 1
            if kind.startswith("h2"):
                op, limit = self.op_h2(rng, st, kind == "h2-tls"), self.args.op_timeout * 1.5
            elif kind == "login":
                op, limit = self.op_login(rng, st), self.args.op_timeout
            elif kind == "websocket":
                op, limit = self.op_ws(rng, st), self.args.op_timeout
            else:
                op, limit = self.op_h1(rng, st, kind == "h1-tls" or (kind == "h1-pipelined" and rng.random() < 0.4),
                                       kind == "h1-pipelined"), self.args.op_timeout
            limit *= self.scale
            cut = left < limit
            try:
                outcome = await bounded(op, min(limit, left))
                if outcome == "completed":
                    st.completed += 1
                else:
                    st.abandoned += 1
            except asyncio.TimeoutError:
                if cut:
                    st.cut += 1
                else:
                    st.timeouts += 1
            except (BadMessage,) + EXPECTED_ERRORS as e:
                st.errors[type(e).__name__] += 1
            except Exception as e:   # h2's protocol errors, and bugs of the harness itself
                name = type(e).__name__
                st.errors[name] += 1
                if not type(e).__module__.startswith("h2"):
                    self.unexpected += 1
                    if self.unexpected <= 3:
                        traceback.print_exc()

    # ---------------------------------------------------------------- checks
    async def retrying(self, attempt, attempts):
        """Runs attempt() until it returns (True, detail), at most `attempts` times, 1 s apart, within
        20 s x scale in all (8 s x scale each)."""
        end = time.monotonic() + 20 * self.scale
        detail = ""
        for i in range(attempts):
            left = end - time.monotonic()
            if left <= 0:
                break
            try:
                ok, detail = await bounded(attempt(), min(8 * self.scale, left))
                if ok:
                    return True, detail
            except asyncio.TimeoutError:
                detail = "no answer (timeout)"
            except Exception as e:
                detail = f"{type(e).__name__}: {e}"
            if i + 1 < attempts:
                await asyncio.sleep(min(1 * self.scale, max(0.0, end - time.monotonic())))
        return False, detail

    async def valid_h1(self, port, tls, attempts=5):
        async def attempt():
            writer = None
            try:
                reader, writer = await self.open(port, tls, "http/1.1")
                writer.write(f"GET /api/check HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {self.valid[0]}\r\n"
                             f"Connection: close\r\n\r\n".encode())
                status, _, body = await read_response(reader, keep_body=True)
                ok = status == 200 and b"chaos-" in body
                return ok, "200 with the user id" if ok else f"status {status} {body[:100]!r}"
            finally:
                finish(writer)
        return await self.retrying(attempt, attempts)

    async def valid_h2(self, tls, attempts=5):
        import h2.config
        import h2.connection
        import h2.events

        async def attempt():
            writer = None
            try:
                reader, writer = await self.open(self.ports["tls"] if tls else self.ports["h2c"], tls, "h2")
                if tls and writer.get_extra_info("ssl_object").selected_alpn_protocol() != "h2":
                    raise BadMessage("ALPN did not choose h2")
                conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
                conn.initiate_connection()
                conn.send_headers(1, [(":method", "GET"), (":scheme", "https" if tls else "http"),
                                      (":authority", "localhost"), (":path", "/api/check"),
                                      ("authorization", "Bearer " + self.valid[0])], end_stream=True)
                writer.write(conn.data_to_send())
                status, body, ended = None, b"", False
                while not ended:
                    data = await reader.read(65536)
                    if not data:
                        raise EOFError("closed")
                    for ev in conn.receive_data(data):
                        if isinstance(ev, h2.events.ResponseReceived):
                            status = dict(ev.headers).get(":status")
                        elif isinstance(ev, h2.events.DataReceived):
                            body += ev.data
                            conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
                        elif isinstance(ev, (h2.events.StreamEnded, h2.events.StreamReset)):
                            ended = True
                    writer.write(conn.data_to_send())
                ok = status == "200" and b"chaos-" in body
                return ok, "200 with the user id" if ok else f"status {status} {body[:100]!r}"
            finally:
                finish(writer)
        return await self.retrying(attempt, attempts)

    async def admin_get(self, path, token=None):
        writer = None
        try:
            reader, writer = await self.open(self.ports["admin"], False, None)
            writer.write((f"GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n"
                          + (f"Authorization: Bearer {token}\r\n" if token else "") + "\r\n").encode())
            status, _, _ = await bounded(read_response(reader), 4 * self.scale)
            return status
        except Exception as e:
            return f"{type(e).__name__}"
        finally:
            finish(writer)

    def check(self, name, ok, detail=""):
        self.checks.append((name, bool(ok), detail))
        print(f"  check {'PASS' if ok else 'FAIL'}: {name}  {detail}", flush=True)

    def log_text(self):
        try:
            with open(self.gw_log_path, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def log_tail(self, n=30):
        """The crash report if there is one (its first line, the crashed thread's frames, or a sanitizer's
        report), with the few log lines before it; else the last n lines."""
        lines = self.log_text().splitlines()
        crash = next((i for i, line in enumerate(lines) if CRASH_LINE.search(line)), None)
        if crash is None:
            return "\n".join(lines[-n:])
        out = lines[max(0, crash - 4):crash + 1]
        crashed = next((i for i in range(crash, len(lines)) if re.match(r"Thread \d+.* crashed:", lines[i])), None)
        if crashed is not None:   # a Swift backtrace: the crashed thread's frames, up to the registers
            end = next((i for i in range(crashed + 1, len(lines))
                        if lines[i].startswith("Registers:") or re.match(r"Thread \d+", lines[i])), crashed + 30)
            out += ["[...]"] + lines[crashed:min(end, crashed + 30)]
        else:                      # a sanitizer's report or a fatal error: what follows it
            out += lines[crash + 1:crash + 1 + max(n, 40)]
        return "\n".join(out).rstrip()

    def crash_site(self):
        """', in <first frames of the crashed thread>' from a Swift backtrace, or ''."""
        lines = self.log_text().splitlines()
        at = next((i for i, line in enumerate(lines) if re.match(r"Thread \d+.* crashed:", line)), None)
        if at is None:
            return ""
        frames = []
        for line in lines[at + 1:at + 14]:
            m = re.match(r"\s*\d+ .*?0x[0-9a-f]+ (.*)$", line)
            if not m:
                continue
            text = re.sub(r" at \S+$", "", m.group(1))          # the source location
            frame, _, image = text.rpartition(" in ")           # the image
            frame = re.sub(r" \+ \d+$", "", frame)
            if frame and not frame.startswith("swift::") and not image.startswith("libswiftCore"):
                frames.append(frame[:100])
            if len(frames) == 3:
                break
        return (", in " + " ← ".join(frames)) if frames else ""

    def crash_lines(self, text):
        return [line for line in text.splitlines() if CRASH_LINE.search(line)]

    async def post_checks(self):
        self.phase = "checks"
        alive = self.check_alive(scan=True)
        if not alive:
            for name in ("plain HTTP/1.1 valid request → 200", "TLS HTTP/1.1 valid request → 200",
                         "TLS h2 valid request → 200", "h2c valid request → 200", "admin /readyz and /healthz → 200"):
                self.check(name, False, "gateway crashed")
        else:
            for name, coro in (("plain HTTP/1.1 valid request → 200", self.valid_h1(self.ports["plain"], False)),
                               ("TLS HTTP/1.1 valid request → 200", self.valid_h1(self.ports["tls"], True)),
                               ("TLS h2 valid request → 200", self.valid_h2(True)),
                               ("h2c valid request → 200", self.valid_h2(False))):
                ok, detail = await coro
                self.check(name, ok, detail)
            async def admin():
                ready, healthz = await self.admin_get("/readyz"), await self.admin_get("/healthz")
                return ready == 200 and healthz == 200, f"readyz {ready}, healthz {healthz}"
            ok, detail = await self.retrying(admin, 3)
            self.check("admin /readyz and /healthz → 200", ok, detail)
            # Descriptors back to the baseline once the idle timeouts have run out.
            limit = self.baseline_fds + self.args.fd_tolerance
            end = time.monotonic() + self.args.fd_settle * self.scale
            while True:
                fds, rss = self.sample()
                if fds is None or fds <= limit or time.monotonic() > end:
                    break
                await asyncio.sleep(0.5)
            self.after_fds, self.after_rss = fds, rss
            self.check(f"open descriptors back to ≤ baseline + {self.args.fd_tolerance}",
                       fds is not None and fds <= limit, f"baseline {self.baseline_fds}, peak {self.peak_fds}, after {fds}")
            rss_limit = self.baseline_rss + self.args.rss_limit_mib * 1024
            peak = max(self.peak_rss, rss or 0)
            self.check(f"RSS peak < baseline + {self.args.rss_limit_mib} MiB", peak < rss_limit,
                       f"baseline {self.baseline_rss / 1024:.1f} MiB, peak {peak / 1024:.1f} MiB, "
                       f"after {(rss or 0) / 1024:.1f} MiB")
            if self.args.soak:
                warm = [s[3] for s in self.samples if s[1] == "storm" and s[0] <= self.warm_window]
                warm_max = max(warm) if warm else self.baseline_rss
                grew = (rss or 0) - warm_max
                self.check(f"soak: RSS after ≤ warmed-up RSS + {self.args.soak_growth_mib} MiB",
                           grew <= self.args.soak_growth_mib * 1024,
                           f"max in first {self.warm_window:.0f} s {warm_max / 1024:.1f} MiB, after "
                           f"{(rss or 0) / 1024:.1f} MiB")
        self.check(f"gateway answered a probe at least every {self.args.hang_after * self.scale:.0f} s",
                   self.hang is None, (f"unresponsive during {self.hang[1]} at t={self.hang[0]:.1f} s: {self.hang[2]}"
                                       if self.hang else "") + f" ({self.probes['answered']} answered, "
                   f"{self.probes['failed']} failed, slowest {self.probes['slowest']:.2f} s)")
        alive = self.check_alive(scan=True)
        self.check("gateway process alive throughout, no crash", alive,
                   "" if alive else f"{self.death[1]} during {self.death[2]} at t={self.death[0]:.1f} s")
        found = self.crash_lines(self.log_text())
        self.check("no sanitizer / crash report lines in the log", not found, "; ".join(found[:3])[:300])

    async def shutdown_check(self):
        """SIGTERM: the gateway drains and exits 0 (a crash while draining is a finding too)."""
        if self.gw.poll() is not None:
            return
        self.phase = "shutdown"
        before = len(self.crash_lines(self.log_text()))
        # WebSockets open at SIGTERM (one idle, one with a frame under way): each gets a Close with 1001,
        # the second only after its frame ended.
        tunnels = []
        rng = random.Random(self.args.seed)
        for _ in range(2):
            try:
                r, w, status = await bounded(self.ws_upgrade(rng, self.ports["plain"], False, "/ws/wskeep", "none"),
                                             5 * self.scale)
                if status == 101:
                    tunnels.append((r, w))
                else:
                    finish(w)
            except (BadMessage, asyncio.TimeoutError) + EXPECTED_ERRORS:
                pass
        unfinished = ws_frame(rng, 0x2, 300)
        if len(tunnels) == 2:
            try:
                tunnels[1][1].write(unfinished[:100])
                await tunnels[1][1].drain()
                await bounded(tunnels[1][0].readexactly(100), 5 * self.scale)
            except (asyncio.TimeoutError,) + EXPECTED_ERRORS:
                pass
        self.gw.send_signal(signal.SIGTERM)

        async def going_away(reader, writer, rest):
            got = b""
            if rest:
                try:
                    await asyncio.wait_for(reader.read(65536), 0.3)
                    return False   # nothing may come inside the unfinished frame (not even EOF)
                except asyncio.TimeoutError:
                    pass
                writer.write(rest)
                await writer.drain()
            while not got.endswith(GOING_AWAY):
                data = await reader.read(65536)
                if not data:
                    return False
                got += data
            writer.write(ws_frame(rng, 0x8, 2))
            await writer.drain()
            return await reader.read() == b""
        if tunnels:
            results = []
            for (r, w), rest in zip(tunnels, [b"", unfinished[100:]]):
                try:
                    results.append(await bounded(going_away(r, w, rest), 4 * self.scale))
                except (asyncio.TimeoutError,) + EXPECTED_ERRORS:
                    results.append(False)
                finally:
                    finish(w)
            self.check("SIGTERM: WebSockets get a 1001 Close between frames", all(results) and len(results) == 2,
                       f"{results}")
        end = time.monotonic() + 10 * self.scale
        while self.gw.poll() is None and time.monotonic() < end:
            await asyncio.sleep(0.05)
        if self.gw.poll() is None:
            self.kill_group(self.gw)
            self.shutdown_status = "SIGKILL after 10 s"
            self.check("SIGTERM: exits 0 within 10 s, no crash lines", False, "did not exit; killed")
            return
        self.shutdown_status = signame(self.gw.returncode)
        new = self.crash_lines(self.log_text())[before:]
        self.check("SIGTERM: exits 0 within 10 s, no crash lines", self.gw.returncode == 0 and not new,
                   self.shutdown_status + ("; " + new[0][:200] if new else ""))

    # ---------------------------------------------------------------- run
    async def run(self):
        """Runs the whole thing; SIGINT/SIGTERM/SIGHUP end it early (self.interrupted) with every task stopped."""
        loop = asyncio.get_running_loop()
        self.tasks = []
        main = asyncio.create_task(self.run_inner())

        def interrupt():
            if not self.interrupted:
                self.interrupted = True
                print("\nchaos: interrupted; stopping", file=sys.stderr, flush=True)
                main.cancel()

        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            loop.add_signal_handler(sig, interrupt)
        try:
            await main
        except asyncio.CancelledError:
            if not self.interrupted:
                raise
        finally:
            tasks = [t for t in self.tasks if not t.done()]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def run_inner(self):
        self.stop = asyncio.Event()
        self.start_gateway()
        await self.wait_listening()
        self.phase = "baseline"
        mon = asyncio.create_task(self.monitor())
        self.tasks.append(mon)
        await asyncio.sleep(4 * self.scale)   # pooled upstream connections of the readiness check expire (3 s)
        self.baseline_fds, self.baseline_rss = self.sample()
        if self.baseline_fds is None:
            self.check_alive()
            raise SetupError("the gateway died before the storm:\n" + self.log_tail())
        print(f"gateway pid {self.gw.pid}: baseline {self.baseline_fds} descriptors, {self.baseline_rss / 1024:.1f} MiB RSS;"
              f" storm of {self.args.clients} clients for {self.args.seconds:.0f} s (seed {self.args.seed})", flush=True)
        self.phase = "storm"
        self.storm_start = time.monotonic()
        self.warm_window = min(max(60.0, self.args.seconds * 0.1), self.args.seconds * 0.5)
        self.deadline = self.storm_start + self.args.seconds
        rep = asyncio.create_task(self.reporter()) if self.args.report_every > 0 else None
        probe = asyncio.create_task(self.prober())
        self.tasks.append(probe)
        clients = [asyncio.create_task(self.client(i)) for i in range(self.args.clients)]
        stopper = asyncio.create_task(self.stop.wait())
        self.tasks += clients + [stopper] + ([rep] if rep else [])
        while not self.stop.is_set() and any(not c.done() for c in clients) and time.monotonic() < self.deadline + 5:
            await asyncio.wait(clients + [stopper], timeout=0.5, return_when=asyncio.FIRST_COMPLETED)
        for c in clients:
            c.cancel()
        await asyncio.gather(*clients, return_exceptions=True)
        stopper.cancel()
        if rep:
            rep.cancel()
        self.storm_seconds = self.elapsed()
        self.cpu = (self.cpu_seconds(self.gw.pid), time.process_time(), self.cpu_seconds(self.servers.pid))
        self.phase = "settle"
        if self.servers.poll() is None:
            self.servers.send_signal(signal.SIGUSR1)   # key host outages off for the checks
            self.servers.send_signal(signal.SIGUSR2)   # it logs what it did
        if self.crash_seen_at is not None:   # the crash handler is at work: let it finish (or not)
            end = time.monotonic() + 6
            while self.death is None and time.monotonic() < end:
                await asyncio.sleep(0.1)
        if self.death is None:
            print(f"storm over after {self.storm_seconds:.1f} s; settling", flush=True)
            end = time.monotonic() + 3 * self.scale
            while time.monotonic() < end and self.death is None:
                await asyncio.sleep(0.1)
        probe.cancel()
        await self.post_checks()
        await self.shutdown_check()
        mon.cancel()

    # ---------------------------------------------------------------- report
    def report(self):
        a = self.args
        out = [f"\n## Portcullis chaos: seed {a.seed}, {getattr(self, 'storm_seconds', 0):.1f} s of {a.seconds:.0f} s, "
               f"{a.clients} clients{' (soak)' if a.soak else ''}",
               f"binary `{a.binary}`; key host outages {'on' if self.outages else 'off'}; files in `{self.dir}`"
               f"{' (kept)' if a.keep_dir else ''}", "",
               "| kind | ops | requests/streams | completed | abandoned (by design) | client errors | timeouts | cut at end | statuses |",
               "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
        total = KindStats()
        for kind, _ in ACTIONS:
            s = self.stats.get(kind)
            if not s:
                continue
            for f in ("ops", "requests", "completed", "abandoned", "timeouts", "cut"):
                setattr(total, f, getattr(total, f) + getattr(s, f))
            total.errors.update(s.errors)
            total.status.update(s.status)
            out.append(f"| {kind} | {s.ops} | {s.requests} | {s.completed} | {s.abandoned} | {sum(s.errors.values())} | "
                       f"{s.timeouts} | {s.cut} | {fmt_counter(s.status)} |")
        out.append(f"| **total** | {total.ops} | {total.requests} | {total.completed} | {total.abandoned} | "
                   f"{sum(total.errors.values())} | {total.timeouts} | {total.cut} | {fmt_counter(total.status)} |")
        out += ["", f"Client errors (expected under chaos): {fmt_counter(total.errors) or 'none'}"]
        if self.unexpected:
            out.append(f"Harness exceptions (bugs of chaos.py, tracebacks above): {self.unexpected}")
        out.append("Mix: " + fmt_counter(self.mix))
        counts = self.servers_counts()
        if counts:
            out.append("Upstreams / key host: " + counts)
        cpu = getattr(self, "cpu", None)
        if cpu:
            f = lambda v: "-" if v is None else f"{v:.1f}"
            out.append(f"CPU seconds up to the end of the storm: gateway {f(cpu[0])}, harness clients {f(cpu[1])}, "
                       f"upstreams and key host {f(cpu[2])} (storm {self.storm_seconds:.1f} s wall, 2 cores = "
                       f"{2 * self.storm_seconds:.0f} CPU s)")
        peak_rss = max(self.peak_rss, self.after_rss or 0)
        mib = lambda k: "-" if k is None else f"{k / 1024:.1f}"
        out += ["", "| gateway | baseline | peak | after |", "|---|---:|---:|---:|",
                f"| open descriptors | {self.baseline_fds} | {self.peak_fds} | {self.after_fds if self.after_fds is not None else '-'} |",
                f"| RSS MiB | {mib(self.baseline_rss)} | {mib(peak_rss or None)} | {mib(self.after_rss)} |", ""]
        if self.args.soak and self.report_rows:
            out += ["Soak rows:", "", "| elapsed s | ops | ops/s | requests | client errors | fds | RSS MiB |",
                    "|---:|---:|---:|---:|---:|---:|---:|"]
            out += [f"| {t:.0f} | {ops} | {rate:.1f} | {reqs} | {errs} | {fds} | {rss:.1f} |"
                    for t, ops, rate, reqs, errs, fds, rss in self.report_rows] + [""]
        if self.hang:
            out.append(f"Hang: the gateway stopped answering during {self.hang[1]} at t={self.hang[0]:.1f} s "
                       f"({self.hang[2]}).")
        if self.death:
            out += [f"Crashes: 1 — the gateway {self.death[1]} during {self.death[2]} at t={self.death[0]:.1f} s "
                    f"of the storm{self.crash_site()}. Log (crash report or tail):", "```", self.log_tail(40), "```"]
        else:
            out.append(f"Crashes: none (shutdown: {self.shutdown_status or 'not reached'})")
            if any(not ok for name, ok, _ in self.checks if "log" in name or "SIGTERM" in name):
                out += ["Log (crash report or tail):", "```", self.log_tail(40), "```"]
        out += ["", "| check | result | detail |", "|---|---|---|"]
        out += [f"| {name} | {'pass' if ok else '**FAIL**'} | {detail.replace('|', '/')} |" for name, ok, detail in self.checks]
        passed = sum(1 for _, ok, _ in self.checks if ok)
        failed = len(self.checks) - passed
        out += ["", f"chaos: {passed} passed, {failed} failed"]
        print("\n".join(out), flush=True)
        return 0 if failed == 0 and self.checks else 1

    def servers_counts(self):
        try:
            text = open(os.path.join(self.dir, "servers.log")).read()
        except OSError:
            return ""
        parts = []
        if self.outages:
            outages = collections.Counter(re.findall(r"key host outage: (\w+)", text))
            parts.append("key host outages " + (fmt_counter(outages) or "none"))
        counts = re.findall(r"counts (\{.*\})", text)
        if counts:
            parts.append(fmt_counter({k: v for k, v in json.loads(counts[-1]).items() if not k.startswith("outage_")}))
        return "; ".join(parts)

    # ---------------------------------------------------------------- cleanup
    @staticmethod
    def kill_group(proc):
        """SIGKILL the process's whole group (it leads its own session): it and anything it started."""
        if proc is None:
            return
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            proc.wait(5)
        except (subprocess.TimeoutExpired, OSError):
            pass

    def cleanup(self, hard=False):
        """Stops the gateway (SIGTERM, SIGKILL after 10 s) and the upstreams, then their process groups;
        removes the directory unless --keep-dir. hard (watchdog): SIGKILL at once, whoever holds the lock."""
        got = self.lock.acquire(timeout=0 if hard else 60)
        if not got and not hard:
            return
        try:
            if self.cleaned and not hard:
                return
            self.cleaned = True
            for proc, grace in ((self.gw, 10 * self.scale), (self.servers, 3)):
                if proc is None:
                    continue
                if proc.poll() is None and not hard:
                    try:
                        proc.terminate()
                        proc.wait(grace)
                    except (OSError, subprocess.TimeoutExpired):
                        pass
                self.kill_group(proc)
            for f in (self.gw_log, getattr(self, "servers_log", None)):
                try:
                    f and f.close()
                except OSError:
                    pass
            if self.dir and not self.args.keep_dir:
                shutil.rmtree(self.dir, ignore_errors=True)
        finally:
            if got:
                self.lock.release()


class SetupError(Exception):
    pass


def sanitized(binary):
    """True when the binary carries a sanitizer runtime (ASan, TSan, UBSan): it runs slower."""
    try:
        with open(binary, "rb") as f:
            data = f.read(256 << 20)
        return any(m in data for m in (b"__asan_init", b"__tsan_init", b"__ubsan_handle_"))
    except OSError:
        return False


def fmt_counter(c):
    return " ".join(f"{k}:{v}" for k, v in sorted(c.items(), key=lambda kv: (str(type(kv[0])), kv[0])))


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--serve":
        return servers_main(sys.argv[2])
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", required=True, help="the portcullis binary to attack")
    ap.add_argument("--seconds", type=float, default=None, help="length of the storm (default 30; with --soak 600)")
    ap.add_argument("--seed", type=int, default=1, help="seed of every random choice (default 1)")
    ap.add_argument("--clients", type=int, default=48, help="concurrent client tasks (default 48)")
    ap.add_argument("--soak", action="store_true", help="soak: a row every --report-every s, RSS growth checked")
    ap.add_argument("--report-every", type=float, default=None,
                    help="print a row (elapsed, ops, fds, RSS) this often (default: 60 with --soak, 10 otherwise; 0: off)")
    ap.add_argument("--keep-dir", action="store_true", help="keep the temporary directory (config, logs, certificates)")
    ap.add_argument("--keyhost-outages", choices=["auto", "on", "off"], default="auto",
                    help="key host refuses/resets/fails at random moments (auto: with --soak or --seconds >= 120)")
    ap.add_argument("--timeout-scale", type=float, default=None,
                    help="multiply the harness' timeouts (env CHAOS_TIMEOUT_SCALE; default 1, or 3 for a sanitizer build)")
    ap.add_argument("--op-timeout", type=float, default=12, help="longest client operation, in s (default 12)")
    ap.add_argument("--fd-tolerance", type=int, default=4, help="descriptors allowed above the baseline (default 4)")
    ap.add_argument("--fd-settle", type=float, default=15, help="how long descriptors may take to come back (s)")
    ap.add_argument("--rss-limit-mib", type=float, default=64, help="RSS peak allowed above the baseline (MiB)")
    ap.add_argument("--soak-growth-mib", type=float, default=32,
                    help="soak: RSS after the run allowed above the first window's maximum (MiB)")
    ap.add_argument("--mix", default="", help="name=weight,... reweights actions, paths, credentials, leave modes, "
                    "ports (0: off), e.g. unknown_kid=0,h1-on-h2c=0; names: see MIXES in chaos.py")
    ap.add_argument("--hang-after", type=float, default=15,
                    help="the gateway counts as hung when no probe is answered this long (s, x scale; default 15)")
    ap.add_argument("--watchdog", type=float, default=None,
                    help="kill everything and exit 3 after this many seconds (default: seconds + 240 x scale + 120)")
    ap.add_argument("--gateway-log-level", default="notice", help="the gateway's log_level (default notice)")
    ap.add_argument("--access-log", action="store_true", help="the gateway's access log on (into its log file)")
    args = ap.parse_args()
    apply_mix(args.mix)
    if args.seconds is None:
        args.seconds = 600 if args.soak else 30
    if args.report_every is None:
        args.report_every = 60 if args.soak else 10
    if not (os.path.isfile(args.binary) and os.access(args.binary, os.X_OK)):
        print(f"chaos: no executable binary at {args.binary}", file=sys.stderr)
        return 2
    args.binary = os.path.abspath(args.binary)
    if args.timeout_scale is None:
        if os.environ.get("CHAOS_TIMEOUT_SCALE"):
            args.timeout_scale = float(os.environ["CHAOS_TIMEOUT_SCALE"])
        else:
            args.timeout_scale = 3.0 if sanitized(args.binary) else 1.0
            if args.timeout_scale != 1.0:
                print("chaos: sanitizer build detected; timeouts x3 (--timeout-scale to change)", flush=True)
    run = Chaos(args)
    run.outages = args.keyhost_outages == "on" or (args.keyhost_outages == "auto" and (args.soak or args.seconds >= 120))
    budget = args.watchdog or args.seconds + 240 * args.timeout_scale + 120

    def on_watchdog():
        print(f"\nchaos: WATCHDOG — the run overran {budget:.0f} s; killing everything", file=sys.stderr, flush=True)
        run.cleanup(hard=True)
        os._exit(3)

    timer = threading.Timer(budget, on_watchdog)
    timer.daemon = True

    def on_signal(signum, _frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    timer.start()
    try:
        run.setup_files()
        run.start_servers()
        run.write_config()
        asyncio.run(run.run())
        if run.interrupted:
            print("chaos: interrupted", file=sys.stderr)
            return 130
        return run.report()
    except SetupError as e:
        print(f"chaos: setup failed: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("chaos: interrupted", file=sys.stderr)
        return 130
    finally:
        timer.cancel()
        run.cleanup()


if __name__ == "__main__":
    sys.exit(main())
