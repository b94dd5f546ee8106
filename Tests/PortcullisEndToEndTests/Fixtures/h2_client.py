#!/usr/bin/env python3
"""HTTP/2 client (well-behaved and hostile) for Portcullis' end-to-end tests.

usage: h2_client.py --host 127.0.0.1 --port P [--tls] [--insecure] [--servername NAME]
                    [--cafile PEM] [--timeout 10] [--linger 1.0] MODE [mode options]

The connection is TLS with ALPN "h2" when --tls is given (no certificate check with
--insecure), otherwise cleartext HTTP/2 with prior knowledge (h2c, preface sent at once).
It connects to --host only. The common options above may also follow MODE.

Modes (request-target options --method, --path, --authority, --scheme, repeatable
--header 'name: value' (sent as given, in order) and --raw-pseudo '[[name, value], ...]'
(replaces the four pseudo-headers; --header fields still follow) apply to every mode);
after each mode, the keys it adds to the report:
  request              --count N identical concurrent streams on one connection; optional
                       --body-size N (DATA of 'a', flow-controlled), --content-length-mismatch
                       (content-length = body size + 10), --read-slowly (never send
                       WINDOW_UPDATE). -> responses, not_opened
                       responses: per stream {stream_id, status, headers, trailers,
                       body_length, body (first 4096 bytes), ended, reset, body_sent}
  goaway-wait          like request, then reads on until the server closes or is silent for
                       --linger s, so a shutdown's GOAWAY/close is recorded. -> as request
  rapid-reset          HEADERS(END_STREAM) + RST_STREAM(CANCEL) pairs, up to --streams N
                       -> sent, responses_received
  continuation-flood   HEADERS without END_HEADERS, then up to --frames N CONTINUATIONs
                       (one never-indexed "x-a: <--value-size a's>" each) -> sent, responses
  hpack-bomb           stream 1 stores "x-bomb: <--value-size a's>" in the server's HPACK
                       table, then --streams N requests each carry --refs 1-byte references
                       to it -> sent, value_size, wire_bytes_per_stream,
                       decoded_bytes_per_stream, responses
  settings-flood, ping-flood, priority-flood, window-update-flood, empty-data-flood
                       that frame type, up to --frames N, in writes of --batch frames -> sent
  excess-streams       SETTINGS_MAX_CONCURRENT_STREAMS + --extra streams left open
                       -> sent, max_concurrent_streams, refused, responses (answered ones)
                       then ends stream 1 (empty DATA, END_STREAM) and, once answered, opens
                       one more stream -> also first_answered (stream 1's response),
                       after_refusals (that last stream's response)
  data-plan            HEADERS (no END_STREAM) on stream 1, then DATA frames as --frames lists
                       them: comma-separated sizes, "es" after a size for END_STREAM ("0es":
                       an empty DATA that ends the stream), "-" to wait --gap seconds first
                       (e.g. "-,5,-,5es"); --body-text T: the frames carry successive slices
                       of T instead of 'd's -> responses (stream 1)
  oversized-frame      one HEADERS frame (END_HEADERS|END_STREAM) whose payload is --size bytes,
                       past the server's SETTINGS_MAX_FRAME_SIZE (--type data: a DATA frame on an
                       open stream instead) -> sent, responses
  zero-window          SETTINGS_INITIAL_WINDOW_SIZE=0, one GET, never any WINDOW_UPDATE
                       -> gave_up, data_received, responses
  idle                 handshake, then silence -> gave_up

A run ends when its work is done, when the server closes, on GOAWAY (hostile modes stop
sending at once; request modes still wait for the streams the GOAWAY covers) or after
--timeout seconds overall. It then prints exactly one JSON object with, in every mode:
  goaway          null or {"error_code", "last_stream_id"} (the last GOAWAY received)
  goaways         every GOAWAY received, in order; goaway_debug: the last one's debug data
  goaway_at, closed_at   seconds after start when the first GOAWAY / the close arrived
  closed          the server closed (or reset) the TCP connection
  resets          {"stream_id": error_code} for each RST_STREAM received
  elapsed         seconds from start to the end of the run
  error           null, or why the connection, TLS handshake or HTTP/2 preface failed
  h2_error        null, or why the h2 library stopped accepting the server's frames
  parse_error     null, or why the server's bytes could not be parsed as HTTP/2 frames
  alpn, server_settings, frames_received (count per type), stalled (a write could not
  complete before the deadline), mode
Exit status is 0 except on usage errors (2).

Incoming bytes always go through a small frame parser of our own (with its own HPACK
decoder) that records GOAWAY, RST_STREAM, SETTINGS and every response; the h2 package
additionally drives the well-behaved modes (frame building, flow control, ACKs) until it
rejects something the server sent, after which those ACKs are sent by hand. The hostile
modes use h2 for the preface/SETTINGS exchange only and then write raw frames.
"""

import argparse
import json
import select
import socket
import ssl
import struct
import sys
import time

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings
import hpack

# Frame types and flags (RFC 9113 §6).
DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = range(10)
FRAME_NAMES = ["DATA", "HEADERS", "PRIORITY", "RST_STREAM", "SETTINGS", "PUSH_PROMISE",
               "PING", "GOAWAY", "WINDOW_UPDATE", "CONTINUATION"]
END_STREAM = ACK = 0x1
END_HEADERS = 0x4
PADDED = 0x8
PRIORITY_FLAG = 0x20
CANCEL = 0x8
SETTING_NAMES = {1: "HEADER_TABLE_SIZE", 2: "ENABLE_PUSH", 3: "MAX_CONCURRENT_STREAMS",
                 4: "INITIAL_WINDOW_SIZE", 5: "MAX_FRAME_SIZE", 6: "MAX_HEADER_LIST_SIZE",
                 8: "ENABLE_CONNECT_PROTOCOL", 9: "NO_RFC7540_PRIORITIES"}

IO_SLICE = 0.25        # longest single blocking socket operation, in seconds
BODY_PREFIX = 4096     # response body bytes kept for the report


def frame(ftype, flags, stream_id, payload=b""):
    """One raw HTTP/2 frame: 9-byte header (24-bit length, type, flags, stream id) + payload."""
    return len(payload).to_bytes(3, "big") + struct.pack(">BBI", ftype, flags, stream_id & 0x7FFFFFFF) + payload


def header_frames(stream_id, block, end_stream, max_frame=16384):
    """A complete header block as HEADERS (+ CONTINUATION frames if it exceeds max_frame)."""
    chunks = [block[i:i + max_frame] for i in range(0, len(block), max_frame)] or [b""]
    out = []
    for i, chunk in enumerate(chunks):
        flags = END_HEADERS if i == len(chunks) - 1 else 0
        if i == 0:
            out.append(frame(HEADERS, flags | (END_STREAM if end_stream else 0), stream_id, chunk))
        else:
            out.append(frame(CONTINUATION, flags, stream_id, chunk))
    return b"".join(out)


def stateless_block(headers):
    """HPACK block that leaves the server's dynamic table untouched (static-table indexes or
    never-indexed literals), so the same bytes can be sent again on any stream."""
    return hpack.Encoder().encode([(n, v, True) for n, v in headers], huffman=False)


def hpack_int(value, prefix_bits, first_byte):
    """RFC 7541 §5.1 integer with a prefix_bits-bit prefix, OR-ed into first_byte."""
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes([first_byte | value])
    out = bytearray([first_byte | limit])
    value -= limit
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def hpack_literal_new_name(name, value, representation):
    """Literal field with a literal name, no Huffman: representation 0x40 = with incremental
    indexing (the server adds it to its dynamic table), 0x10 = never indexed."""
    return (bytes([representation]) + hpack_int(len(name), 7, 0) + name
            + hpack_int(len(value), 7, 0) + value)


def text(b):
    return bytes(b).decode("utf-8", errors="replace")


class Stream:
    """What the server sent on one stream."""

    def __init__(self):
        self.blocks = []           # decoded header blocks, each a list of (name, value) bytes
        self.body = bytearray()    # first BODY_PREFIX bytes of DATA
        self.body_length = 0
        self.ended = False         # END_STREAM seen
        self.reset = None          # RST_STREAM error code

    def report(self, stream_id):
        final, trailers, status = None, [], None
        for block in self.blocks:
            code = next((v for n, v in block if n == b":status"), None)
            if final is None and code is not None:
                status = int(code) if code.isdigit() else None
                if status is None or status >= 200:
                    final = block
            elif final is not None:
                trailers.extend(block)
        if final is None and self.blocks:
            final = self.blocks[-1]
        return {
            "stream_id": stream_id,
            "status": status,
            "headers": [[text(n), text(v)] for n, v in (final or [])],
            "trailers": [[text(n), text(v)] for n, v in trailers],
            "body_length": self.body_length,
            "body": text(self.body),
            "ended": self.ended,
            "reset": self.reset,
        }


class Inbound:
    """Minimal parser of the server's frames, independent of the h2 package, so GOAWAY,
    RST_STREAM and responses are recorded whatever the server (or this client) does."""

    def __init__(self):
        self.buf = bytearray()
        self.decoder = hpack.Decoder()
        self.decoder.max_header_list_size = 1 << 30
        self.streams = {}
        self.goaways = []
        self.goaway_debug = None
        self.resets = {}
        self.settings = {}          # server's SETTINGS, latest values
        self.settings_frames = 0    # non-ACK SETTINGS frames received
        self.counts = {}            # frames received per type name
        self.block = None           # [stream_id, end_stream, is_push, bytearray] until END_HEADERS
        self.broken = None          # set when the byte stream can no longer be parsed

    def stream(self, sid):
        return self.streams.setdefault(sid, Stream())

    def finished(self, sid):
        """The stream's outcome is known: ended, reset, or not processed per GOAWAY."""
        s = self.streams.get(sid)
        if s is not None and (s.ended or s.reset is not None):
            return True
        return any(g["last_stream_id"] < sid for g in self.goaways)

    def feed(self, data):
        """Parses whatever complete frames data completes; returns what may need an answer:
        ("settings",), ("ping", opaque) and ("data", stream_id, flow_controlled_length, ended)."""
        actions = []
        if self.broken:
            return actions
        self.buf += data
        while len(self.buf) >= 9:
            length = int.from_bytes(self.buf[0:3], "big")
            if len(self.buf) < 9 + length:
                break
            ftype, flags = self.buf[3], self.buf[4]
            sid = int.from_bytes(self.buf[5:9], "big") & 0x7FFFFFFF
            payload = bytes(self.buf[9:9 + length])
            del self.buf[:9 + length]
            if not self.counts and ftype != SETTINGS:
                self.broken = "server did not start with SETTINGS (not HTTP/2?)"
                return actions
            name = FRAME_NAMES[ftype] if ftype < len(FRAME_NAMES) else "TYPE_%d" % ftype
            self.counts[name] = self.counts.get(name, 0) + 1
            self._frame(ftype, flags, sid, payload, actions)
        return actions

    def _frame(self, ftype, flags, sid, payload, actions):
        if ftype in (DATA, HEADERS, PUSH_PROMISE) and flags & PADDED and payload:
            pad = payload[0]
            unpadded = payload[1:len(payload) - pad] if pad < len(payload) else b""
        else:
            unpadded = payload
        if ftype == DATA:
            s = self.stream(sid)
            s.body_length += len(unpadded)
            room = BODY_PREFIX - len(s.body)
            if room > 0:
                s.body += unpadded[:room]
            if flags & END_STREAM:
                s.ended = True
            actions.append(("data", sid, len(payload), s.ended))
        elif ftype == HEADERS:
            if flags & PRIORITY_FLAG:
                unpadded = unpadded[5:]
            self.block = [sid, bool(flags & END_STREAM), False, bytearray(unpadded)]
            if flags & END_HEADERS:
                self._end_block()
        elif ftype == PUSH_PROMISE:
            self.block = [sid, False, True, bytearray(unpadded[4:])]
            if flags & END_HEADERS:
                self._end_block()
        elif ftype == CONTINUATION:
            if self.block is not None:
                self.block[3] += payload
                if flags & END_HEADERS:
                    self._end_block()
        elif ftype == RST_STREAM and len(payload) >= 4:
            code = int.from_bytes(payload[:4], "big")
            self.resets[sid] = code
            self.stream(sid).reset = code
        elif ftype == SETTINGS and not flags & ACK:
            self.settings_frames += 1
            for i in range(0, len(payload) - 5, 6):
                key, value = struct.unpack(">HI", payload[i:i + 6])
                self.settings[key] = value
            actions.append(("settings",))
        elif ftype == PING and not flags & ACK:
            actions.append(("ping", payload))
        elif ftype == GOAWAY and len(payload) >= 8:
            last, code = struct.unpack(">II", payload[:8])
            self.goaways.append({"error_code": code, "last_stream_id": last & 0x7FFFFFFF})
            self.goaway_debug = text(payload[8:])

    def _end_block(self):
        sid, end_stream, is_push, block = self.block
        self.block = None
        try:
            headers = self.decoder.decode(bytes(block), raw=True)
        except Exception as e:  # a broken block desynchronises HPACK: stop decoding
            self.broken = "HPACK: %s: %s" % (type(e).__name__, e)
            return
        if not is_push:
            s = self.stream(sid)
            s.blocks.append([(bytes(n), bytes(v)) for n, v in headers])
            if end_stream:
                s.ended = True


class Client:
    """One HTTP/2 connection: socket I/O bounded by the overall deadline, the Inbound parser,
    and an h2 connection used while the mode wants it and it still accepts the server."""

    def __init__(self, args):
        self.args = args
        self.start = time.monotonic()
        self.deadline = self.start + args.timeout
        self.sock = None
        self.eof = False            # nothing more can be read
        self.closed = False
        self.closed_at = None
        self.goaway_at = None
        self.stalled = False
        self.error = None
        self.alpn = None
        self.inbound = Inbound()
        config = h2.config.H2Configuration(
            client_side=True, header_encoding=None,
            validate_outbound_headers=False, normalize_outbound_headers=False,
            validate_inbound_headers=False)
        self.h2 = h2.connection.H2Connection(config=config)
        self.h2_alive = True        # feed received bytes to h2 and send what it produces
        self.h2_error = None
        self.h2_data_acks = True    # acknowledge DATA through h2 (WINDOW_UPDATE)
        self.manual_replies = True  # once h2 is out: ACK SETTINGS/PING by hand...
        self.manual_data_acks = True  # ...and send WINDOW_UPDATE for DATA by hand

    def now(self):
        return time.monotonic()

    def connect(self):
        a = self.args
        try:
            raw = socket.create_connection((a.host, a.port), timeout=max(0.1, self.deadline - self.now()))
            raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError as e:
            self.error = "connect: %s" % e
            return False
        if a.tls:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            ctx.set_alpn_protocols(["h2"])
            if a.insecure:
                ctx.check_hostname = False
                ctx.verify_mode = ssl.CERT_NONE
            elif a.cafile:
                ctx.load_verify_locations(a.cafile)
            else:
                ctx.load_default_certs()
            try:
                raw = ctx.wrap_socket(raw, server_hostname=a.servername or a.host)
            except (OSError, ValueError) as e:
                self.error = "tls: %s" % e
                raw.close()
                return False
            self.alpn = raw.selected_alpn_protocol()
        raw.settimeout(IO_SLICE)
        self.sock = raw
        return True

    # -- socket I/O -------------------------------------------------------------------

    def _mark_closed(self, eof):
        self.closed = True
        if self.closed_at is None:
            self.closed_at = self.now() - self.start
        if eof:
            self.eof = True

    def send_raw(self, data, deadline=None):
        """Writes data; returns the number of bytes written (less when the server closed, or
        when it stopped reading until the deadline, which sets stalled)."""
        deadline = deadline or self.deadline
        view, sent = memoryview(data), 0
        while sent < len(data) and self.sock is not None:
            if self.closed:
                break
            if self.now() >= deadline:
                self.stalled = True
                break
            try:
                # On a timeout nothing has been reported written: retry the same bytes
                # (what OpenSSL requires, and right for plain TCP too).
                sent += self.sock.send(view[sent:])
            except (socket.timeout, ssl.SSLWantWriteError, ssl.SSLWantReadError, BlockingIOError, InterruptedError):
                continue
            except OSError:         # EPIPE / ECONNRESET / SSL errors: the server is gone
                self._mark_closed(eof=False)
        return sent

    def recv(self, timeout):
        """At most one read, waiting up to timeout seconds; b"" when nothing came."""
        if self.sock is None or self.eof:
            return b""
        pending = isinstance(self.sock, ssl.SSLSocket) and self.sock.pending()
        if not pending:
            readable, _, _ = select.select([self.sock], [], [], max(0.0, timeout))
            if not readable:
                return b""
        try:
            data = self.sock.recv(65536)
        except (socket.timeout, ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError, InterruptedError):
            return b""
        except OSError:             # ECONNRESET, SSL EOF/alerts
            self._mark_closed(eof=True)
            return b""
        if not data:
            self._mark_closed(eof=True)
        return data

    def flush(self):
        data = self.h2.data_to_send()
        if data and self.h2_alive:
            self.send_raw(data)

    def pump(self, timeout=IO_SLICE):
        """Reads once and processes it; returns the number of bytes read."""
        data = self.recv(min(timeout, max(0.0, self.deadline - self.now())))
        if not data:
            return 0
        actions = self.inbound.feed(data)
        if self.inbound.goaways and self.goaway_at is None:
            self.goaway_at = self.now() - self.start
        if self.h2_alive:
            try:
                events = self.h2.receive_data(data)
            except Exception as e:  # h2 rejected the server: answer by hand from now on
                self.h2_alive = False
                # After a GOAWAY h2 refuses every further frame by design (its connection
                # state is CLOSED); that is not worth reporting.
                if not (self.inbound.goaways and "ConnectionState.CLOSED" in str(e)):
                    self.h2_error = "%s: %s" % (type(e).__name__, e)
                self.h2.clear_outbound_data_buffer()  # drop the GOAWAY h2 queued
                self.reply_by_hand(actions)
            else:
                for event in events:
                    if (isinstance(event, h2.events.DataReceived) and self.h2_data_acks
                            and event.flow_controlled_length):
                        try:
                            self.h2.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                        except h2.exceptions.ProtocolError:
                            pass
                self.flush()
        else:
            self.reply_by_hand(actions)
        return len(data)

    def reply_by_hand(self, actions):
        if not self.manual_replies:
            return
        out = []
        for action in actions:
            if action[0] == "settings":
                out.append(frame(SETTINGS, ACK, 0))
            elif action[0] == "ping":
                out.append(frame(PING, ACK, 0, action[1]))
            elif action[0] == "data" and self.manual_data_acks and action[2] > 0:
                increment = struct.pack(">I", action[2])
                out.append(frame(WINDOW_UPDATE, 0, 0, increment))
                if not action[3]:
                    out.append(frame(WINDOW_UPDATE, 0, action[1], increment))
        if out:
            self.send_raw(b"".join(out))

    def linger(self):
        """Reads until the server closes, stays silent for --linger seconds, or the deadline."""
        last = self.now()
        while not self.eof and self.now() < self.deadline:
            if self.pump(IO_SLICE):
                last = self.now()
            elif self.now() - last >= self.args.linger:
                break

    # -- connection setup ---------------------------------------------------------------

    def handshake(self, settings=None):
        """Connects, sends the preface + SETTINGS (push disabled, plus settings) through h2
        and waits for the server's SETTINGS (which h2 acknowledges)."""
        if not self.connect():
            return False
        initial = {h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: 100,
                   h2.settings.SettingCodes.MAX_HEADER_LIST_SIZE: self.h2.DEFAULT_MAX_HEADER_LIST_SIZE,
                   h2.settings.SettingCodes.ENABLE_PUSH: 0}
        initial.update(settings or {})
        self.h2.local_settings = h2.settings.Settings(client=True, initial_values=initial)
        self.h2.initiate_connection()
        self.flush()
        while self.inbound.settings_frames == 0 and not self.eof and not self.inbound.broken \
                and self.now() < self.deadline:
            self.pump()
        if self.inbound.settings_frames == 0 and self.error is None:
            self.error = self.inbound.broken or "no SETTINGS from the server"
        return self.inbound.settings_frames > 0

    def go_raw(self):
        """Hostile modes: from here on frames are written by hand and nothing is answered."""
        self.h2_alive = False
        self.manual_replies = False

    def responses(self, stream_ids):
        return [self.inbound.streams.get(sid, Stream()).report(sid) for sid in stream_ids]

    def result(self, **extra):
        ib = self.inbound
        out = {
            "mode": self.args.mode,
            "goaway": ib.goaways[-1] if ib.goaways else None,
            "goaways": ib.goaways,
            "goaway_debug": ib.goaway_debug,
            "goaway_at": None if self.goaway_at is None else round(self.goaway_at, 3),
            "closed": self.closed,
            "closed_at": None if self.closed_at is None else round(self.closed_at, 3),
            "resets": {str(k): v for k, v in sorted(ib.resets.items())},
            "elapsed": round(self.now() - self.start, 3),
            "error": self.error,
            "h2_error": self.h2_error,
            "parse_error": ib.broken,
            "alpn": self.alpn,
            "server_settings": {SETTING_NAMES.get(k, str(k)): v for k, v in sorted(ib.settings.items())},
            "frames_received": ib.counts,
            "stalled": self.stalled,
        }
        out.update(extra)
        return out

    def close(self):
        if self.sock is not None:
            try:
                self.sock.close()
            except OSError:
                pass


# -- request construction -----------------------------------------------------------------

def arg_bytes(s):
    """argv text back to the exact bytes the caller passed."""
    return s.encode("utf-8", "surrogateescape")


def parse_header(line):
    """'name: value' -> (name, value) bytes. A name may itself start with ':' (pseudo-header);
    one space after the separating colon is dropped, anything else is kept verbatim."""
    start = 1 if line.startswith(":") else 0
    colon = line.find(":", start)
    if colon < 0:
        raise argparse.ArgumentTypeError("header must look like 'name: value': %r" % line)
    name, value = line[:colon], line[colon + 1:]
    if value.startswith(" "):
        value = value[1:]
    return arg_bytes(name), arg_bytes(value)


def request_headers(a, default_method="GET"):
    """The header list: --raw-pseudo as given, or the four pseudo-headers; then --header fields."""
    if a.raw_pseudo is not None:
        headers = [(arg_bytes(n), arg_bytes(v)) for n, v in a.raw_pseudo]
    else:
        scheme = a.scheme or ("https" if a.tls else "http")
        headers = [(b":method", arg_bytes(a.method or default_method)), (b":scheme", arg_bytes(scheme)),
                   (b":authority", arg_bytes(a.authority)), (b":path", arg_bytes(a.path))]
    headers += a.header
    if getattr(a, "content_length_mismatch", False):
        headers.append((b"content-length", str(a.body_size + 10).encode()))
    return headers


def send_deadline(c):
    """Hostile writes stop early enough to leave time for reading the server's reaction."""
    return c.deadline - min(2.0, c.args.timeout * 0.2)


def flood(c, unit, total):
    """Writes unit(0) .. unit(total-1) (equal-sized byte strings) in batches of --batch,
    reading only what is already there between batches; stops at GOAWAY, close or the send
    deadline. Returns how many units were completely written."""
    size, sent, stop = len(unit(0)), 0, send_deadline(c)
    while sent < total and not c.closed and not c.inbound.goaways and c.now() < stop:
        n = min(c.args.batch, total - sent)
        payload = b"".join(unit(sent + i) for i in range(n))
        written = c.send_raw(payload, deadline=stop)
        sent += written // size
        if written < len(payload):
            break
        c.pump(0)
    return sent


# -- modes --------------------------------------------------------------------------------

def mode_request(c, a, wait_for_shutdown=False):
    headers = request_headers(a)
    if not c.handshake():
        return c.result(responses=[])
    c.h2_data_acks = c.manual_data_acks = not a.read_slowly
    opened, to_open, body_left, body_sent = [], a.count, {}, {}
    while not c.eof and c.now() < c.deadline:
        # Open streams while the server's concurrency limit (as h2 tracks it) allows.
        while to_open > 0 and c.h2_alive and not c.inbound.goaways:
            sid = c.h2.get_next_available_stream_id()
            try:
                c.h2.send_headers(sid, headers, end_stream=a.body_size == 0)
            except h2.exceptions.TooManyStreamsError:
                break
            except h2.exceptions.ProtocolError as e:
                c.h2_error = "send_headers: %s" % e
                to_open = 0
                break
            opened.append(sid)
            body_sent[sid] = 0
            to_open -= 1
            if a.body_size:
                body_left[sid] = a.body_size
        if c.inbound.goaways or not c.h2_alive:
            to_open = 0
        # Send request bodies as far as the flow-control windows allow.
        for sid in list(body_left):
            if not c.h2_alive or c.inbound.finished(sid):
                del body_left[sid]
                continue
            try:
                while body_left[sid] > 0:
                    n = min(body_left[sid], c.h2.local_flow_control_window(sid), c.h2.max_outbound_frame_size)
                    if n <= 0:
                        break       # wait for WINDOW_UPDATE
                    c.h2.send_data(sid, b"a" * n, end_stream=n == body_left[sid])
                    body_left[sid] -= n
                    body_sent[sid] += n
            except h2.exceptions.ProtocolError:
                body_left[sid] = 0
            if body_left[sid] == 0:
                del body_left[sid]
        c.flush()
        if to_open == 0 and not body_left and all(c.inbound.finished(s) for s in opened):
            break
        c.pump()
    if wait_for_shutdown:
        c.linger()
    responses = c.responses(opened)
    for r in responses:
        r["body_sent"] = body_sent[r["stream_id"]]
    return c.result(responses=responses, not_opened=a.count - len(opened))


def mode_goaway_wait(c, a):
    return mode_request(c, a, wait_for_shutdown=True)


def mode_rapid_reset(c, a):
    if not c.handshake():
        return c.result(sent=0)
    c.go_raw()
    block = stateless_block(request_headers(a))
    reset = struct.pack(">I", CANCEL)
    sent = flood(c, lambda i: header_frames(2 * i + 1, block, True) + frame(RST_STREAM, 0, 2 * i + 1, reset),
                 a.streams)
    c.linger()
    answered = sum(1 for s in c.inbound.streams.values() if s.blocks)
    return c.result(sent=sent, responses_received=answered)


def mode_continuation_flood(c, a):
    if not c.handshake():
        return c.result(sent=0)
    c.go_raw()
    first = frame(HEADERS, END_STREAM, 1, stateless_block(request_headers(a)))  # no END_HEADERS
    sent = 0
    if c.send_raw(first, deadline=send_deadline(c)) == len(first):
        fragment = hpack_literal_new_name(b"x-a", b"a" * a.value_size, 0x10)
        cont = frame(CONTINUATION, 0, 1, fragment)
        sent = flood(c, lambda i: cont, a.frames)
    c.linger()
    return c.result(sent=sent, responses=c.responses([1]))


def mode_hpack_bomb(c, a):
    if not c.handshake():
        return c.result(sent=0)
    c.go_raw()
    name = b"x-bomb"
    # The entry must fit the server's HPACK table (entry size = name + value + 32).
    table = c.inbound.settings.get(1, 4096)
    value_size = min(a.value_size, table - 32 - len(name))
    if value_size <= 0:
        c.error = "server HEADER_TABLE_SIZE %d leaves no room for the entry" % table
        return c.result(sent=0)
    request = request_headers(a)
    # Stream 1 stores "x-bomb: aaa..." (literal with incremental indexing) as dynamic entry 62.
    seed = stateless_block(request) + hpack_literal_new_name(name, b"a" * value_size, 0x40)
    c.send_raw(header_frames(1, seed, True))
    budget = min(c.deadline, c.now() + 2.0)
    while not c.inbound.finished(1) and not c.eof and c.now() < budget:
        c.pump()
    # Each bomb block: the request's own fields + --refs one-byte references (0xbe = index 62).
    max_frame = c.inbound.settings.get(5, 16384)
    bomb = stateless_block(request) + b"\xbe" * a.refs
    sent = 0
    for i in range(a.streams):
        if c.closed or c.inbound.goaways or c.now() >= send_deadline(c):
            break
        data = header_frames(3 + 2 * i, bomb, True, max_frame)
        if c.send_raw(data, deadline=send_deadline(c)) < len(data):
            break
        sent += 1
        c.pump(0)
    c.linger()
    return c.result(sent=sent, value_size=value_size, wire_bytes_per_stream=len(bomb),
                    decoded_bytes_per_stream=a.refs * (len(name) + value_size + 32),
                    responses=c.responses([1 + 2 * i for i in range(sent + 1)]))


def mode_frame_flood(c, a):
    if not c.handshake():
        return c.result(sent=0)
    c.go_raw()
    if a.mode == "settings-flood":
        unit = lambda i: frame(SETTINGS, 0, 0)
    elif a.mode == "ping-flood":
        unit = lambda i: frame(PING, 0, 0, struct.pack(">Q", i))
    elif a.mode == "priority-flood":
        # Idle odd streams, each depending on the previous one, weight 16.
        unit = lambda i: frame(PRIORITY, 0, 2 * i + 1, struct.pack(">IB", max(0, 2 * i - 1), 15))
    elif a.mode == "window-update-flood":
        unit = lambda i: frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", 1))
    else:  # empty-data-flood: one request stream left open, then empty DATA frames on it
        opening = header_frames(1, stateless_block(request_headers(a, default_method="POST")), False)
        if c.send_raw(opening) < len(opening):
            c.linger()
            return c.result(sent=0)
        unit = lambda i: frame(DATA, 0, 1)
    sent = flood(c, unit, a.frames)
    c.linger()
    return c.result(sent=sent)


def mode_excess_streams(c, a):
    if not c.handshake():
        return c.result(sent=0, max_concurrent_streams=None)
    c.go_raw()
    limit = c.inbound.settings.get(3)
    count = min(limit if limit is not None else 100, 1000) + a.extra
    block = stateless_block(request_headers(a))
    data = b"".join(header_frames(2 * i + 1, block, False) for i in range(count))
    written = c.send_raw(data, deadline=send_deadline(c))
    opened = count if written == len(data) else written // len(header_frames(1, block, False))
    c.linger()
    ids = [2 * i + 1 for i in range(opened)]
    refused = sum(1 for sid in ids if c.inbound.resets.get(sid) == 7)
    answered = [r for r in c.responses(ids) if r["status"] is not None]
    # The connection goes on: stream 1 ends (it is answered, a slot frees), then one more opens.
    first, after = None, None
    if not c.eof and not c.inbound.goaways and opened:
        c.send_raw(frame(DATA, END_STREAM, 1), deadline=send_deadline(c))
        while not c.eof and c.now() < c.deadline and not c.inbound.finished(1):
            c.pump()
        first = c.responses([1])[0]
        late = 2 * count + 1
        c.send_raw(header_frames(late, block, True), deadline=send_deadline(c))
        while not c.eof and c.now() < c.deadline and not c.inbound.finished(late):
            c.pump()
        after = c.responses([late])[0]
    return c.result(sent=opened, max_concurrent_streams=limit, refused=refused, responses=answered,
                    first_answered=first, after_refusals=after)


def mode_data_plan(c, a):
    if not c.handshake():
        return c.result(responses=[])
    c.go_raw()
    c.manual_replies = True     # SETTINGS/PING still answered by hand
    c.send_raw(header_frames(1, stateless_block(request_headers(a, "POST")), False))
    payload = a.body_text.encode() if a.body_text is not None else None
    offset = 0
    for step in [x.strip() for x in a.frames.split(",") if x.strip()]:
        if step == "-":
            end = c.now() + a.gap
            while not c.eof and c.now() < end:
                c.pump(min(IO_SLICE, max(0.0, end - c.now())))
            continue
        end_stream = step.endswith("es")
        size = int(step[:-2] if end_stream else step)
        if payload is not None:
            chunk, offset = payload[offset:offset + size], offset + size
        else:
            chunk = b"d" * size
        c.send_raw(frame(DATA, END_STREAM if end_stream else 0, 1, chunk))
    c.linger()
    return c.result(responses=c.responses([1]))


def mode_oversized_frame(c, a):
    if not c.handshake():
        return c.result(sent=0, responses=[])
    c.go_raw()
    headers = request_headers(a, "POST" if a.type == "data" else "GET")
    if a.type == "data":
        data = header_frames(1, stateless_block(headers), False) + frame(DATA, END_STREAM, 1, b"d" * a.size)
    else:
        block = stateless_block(headers)
        filler = max(0, a.size - len(block) - 16)
        block = stateless_block(headers + [(b"x-filler", b"f" * filler)])
        data = frame(HEADERS, END_HEADERS | END_STREAM, 1, block)
    written = c.send_raw(data, deadline=send_deadline(c))
    c.linger()
    return c.result(sent=written, frame_payload=len(data) - 9, responses=c.responses([1]))


def mode_zero_window(c, a):
    if not c.handshake({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 0}):
        return c.result(gave_up=False, data_received=0, responses=[])
    c.h2_data_acks = c.manual_data_acks = False   # SETTINGS/PING are still answered
    try:
        c.h2.send_headers(1, request_headers(a), end_stream=True)
        c.flush()
    except h2.exceptions.ProtocolError as e:
        c.h2_error = "send_headers: %s" % e
    while not c.eof and c.now() < c.deadline and not c.inbound.goaways and not c.inbound.finished(1):
        c.pump()
    if c.inbound.goaways:
        c.linger()
    gave_up = bool(c.inbound.goaways) or c.closed or 1 in c.inbound.resets
    return c.result(gave_up=gave_up, data_received=c.inbound.stream(1).body_length,
                    responses=c.responses([1]))


def mode_idle(c, a):
    if not c.handshake():
        return c.result(gave_up=False)
    c.go_raw()
    while not c.eof and c.now() < c.deadline and not c.inbound.goaways:
        c.pump()
    if c.inbound.goaways:
        c.linger()
    return c.result(gave_up=bool(c.inbound.goaways) or c.closed)


MODES = {
    "request": mode_request,
    "goaway-wait": mode_goaway_wait,
    "rapid-reset": mode_rapid_reset,
    "continuation-flood": mode_continuation_flood,
    "hpack-bomb": mode_hpack_bomb,
    "settings-flood": mode_frame_flood,
    "ping-flood": mode_frame_flood,
    "priority-flood": mode_frame_flood,
    "window-update-flood": mode_frame_flood,
    "empty-data-flood": mode_frame_flood,
    "excess-streams": mode_excess_streams,
    "data-plan": mode_data_plan,
    "oversized-frame": mode_oversized_frame,
    "zero-window": mode_zero_window,
    "idle": mode_idle,
}


def parse_args(argv):
    def common(p, suppress):
        d = (lambda v: argparse.SUPPRESS) if suppress else (lambda v: v)
        p.add_argument("--host", default=d("127.0.0.1"))
        p.add_argument("--port", type=int, default=d(None))
        p.add_argument("--tls", action="store_true", default=d(False))
        p.add_argument("--insecure", action="store_true", default=d(False))
        p.add_argument("--servername", default=d(None), help="TLS SNI / verified name")
        p.add_argument("--cafile", default=d(None), help="CA bundle to verify against")
        p.add_argument("--timeout", type=float, default=d(10.0), help="overall limit, seconds")
        p.add_argument("--linger", type=float, default=d(1.0),
                       help="silence (seconds) after which a finished run stops reading")
        p.add_argument("--batch", type=int, default=d(100), help="frames per write in floods")

    def positive(s):
        v = int(s)
        if v < 0:
            raise argparse.ArgumentTypeError("must be >= 0")
        return v

    parser = argparse.ArgumentParser(description="HTTP/2 test client (see module docstring)")
    common(parser, suppress=False)
    sub = parser.add_subparsers(dest="mode", required=True, metavar="MODE")
    for name in MODES:
        p = sub.add_parser(name)
        common(p, suppress=True)
        p.add_argument("--method", default=None)
        p.add_argument("--path", default="/")
        p.add_argument("--authority", default="localhost")
        p.add_argument("--scheme", default=None)
        p.add_argument("--header", action="append", type=parse_header, default=[])
        p.add_argument("--raw-pseudo", type=json.loads, default=None,
                       help='JSON [[name, value], ...] replacing the pseudo-headers (and defaults)')
        if name in ("request", "goaway-wait"):
            p.add_argument("--body-size", type=positive, default=0)
            p.add_argument("--count", type=positive, default=1)
            p.add_argument("--content-length-mismatch", action="store_true")
            p.add_argument("--read-slowly", action="store_true")
        if name in ("rapid-reset", "hpack-bomb"):
            p.add_argument("--streams", type=positive, default=10000 if name == "rapid-reset" else 10)
        if name.endswith("-flood"):
            p.add_argument("--frames", type=positive, default=10000 if name == "continuation-flood" else 100000)
        if name in ("continuation-flood", "hpack-bomb"):
            p.add_argument("--value-size", type=positive, default=100 if name == "continuation-flood" else 4000)
        if name == "hpack-bomb":
            p.add_argument("--refs", type=positive, default=1000)
        if name == "excess-streams":
            p.add_argument("--extra", type=positive, default=10)
        if name == "data-plan":
            p.add_argument("--frames", default="")
            p.add_argument("--gap", type=float, default=0.5)
            p.add_argument("--body-text", default=None,
                           help="DATA carries successive slices of this text instead of 'd's")
        if name == "oversized-frame":
            p.add_argument("--size", type=positive, default=20000)
            p.add_argument("--type", choices=["headers", "data"], default="headers")
    a = parser.parse_args(argv)
    if a.port is None:
        parser.error("--port is required")
    if a.raw_pseudo is not None and not (
            isinstance(a.raw_pseudo, list)
            and all(isinstance(p, list) and len(p) == 2 and all(isinstance(x, str) for x in p)
                    for p in a.raw_pseudo)):
        parser.error("--raw-pseudo must be a JSON list of [name, value] string pairs")
    if a.batch < 1 or a.timeout <= 0:
        parser.error("--batch must be >= 1 and --timeout > 0")
    return a


def main(argv):
    a = parse_args(argv)
    c = Client(a)
    try:
        result = MODES[a.mode](c, a)
    except Exception as e:  # a bug here must still yield the one JSON object
        c.error = "internal: %s: %s" % (type(e).__name__, e)
        result = c.result()
    finally:
        c.close()
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
