#!/usr/bin/env python3
"""Small helpers for the load harness (stdlib only).

Subcommands:
  port                       print a free loopback TCP port
  cpu PID...                 print utime+stime (clock ticks) of each PID and all
                             its descendants, summed, then the tick rate
  rss PID                    print VmRSS of PID in KiB
  wrk FILE                   parse one wrk output file, print JSON
  mergewrk OUT FILE...       one wrk output from several runs at the same time (a fleet)
  lua HEADER...              print a wrk Lua script that sets the given headers
  redisstats reset|read PORT...
                             reset: CONFIG RESETSTAT on each redis-server; read: print
                             "CALLS KEYS", the rate-limit script's calls and the keys it
                             charged on the masters among them since (see redis_charges)
  table ROWSJSON [--summary FILE --script NAME --section S]
                             print the Markdown table from collected results
                             (with --summary: also append one JSON line per row
                             to FILE, see write_summary)
  h2run ROW ROUND OUT LOG PROTO CPU_TICKS HZ
                             h2.sh: parse one h2load run (stdout OUT, --log-file
                             LOG), print one JSON result line; exit 3 with the
                             reason on stderr if the run is not usable
  h2table ROWS RESULTS [--summary FILE]
                             h2.sh: print its Markdown table (ROWS: tab-separated
                             row, section, label, failure reason; RESULTS: h2run lines)
  tlstable ROWS RESULTS DURATION SIGN X25519 [--summary FILE]
                             tls.sh: print its Markdown table (ROWS: tab-separated
                             row, label, failure reason; RESULTS: lines
                             "row mode handshakes cpu_ticks hz resumed")
  alltable DIR SECTION=RC... [--baseline]
                             all.sh: one Markdown table from DIR/SECTION.summary.jsonl
                             of every SECTION run (RC: the script's exit status)
"""
import json
import math
import os
import socket
import statistics
import subprocess
import sys


_handed_out = set()


def free_port():
    """A free port below the ephemeral range, at random, never the same twice in one process:
    port 0's answer may come back on the next call (two servers of one run were once given
    one port) or be taken by a client's outgoing connection before the server binds it.
    The chaos harness and propagation.py use this one too."""
    import random
    for _ in range(1000):
        port = random.randrange(10000, 32768)
        if port in _handed_out:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
                s.listen(1)
            except OSError:
                continue
        _handed_out.add(port)
        return port
    raise SystemExit("no free port on 127.0.0.1")


def _children():
    """Map ppid -> [pid] for every process visible in /proc."""
    kids = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        # comm may hold spaces or parentheses: fields start after the last ')'.
        fields = stat[stat.rindex(")") + 2:].split()
        kids.setdefault(int(fields[1]), []).append(int(name))
    return kids


def cpu_ticks(pids):
    """utime+stime of the processes and all their descendants (all threads)."""
    kids = _children()
    seen, todo, total = set(), list(pids), 0
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15)
        todo.extend(kids.get(pid, []))
    return total


def redis_cli(port, *args):
    """One redis-cli command to the server on 127.0.0.1:`port`; its output as text."""
    return subprocess.run(["redis-cli", "-h", "127.0.0.1", "-p", str(port), *args],
                          capture_output=True, text=True, timeout=10).stdout


def redis_charges(ports, reset=False):
    """The rate-limit script's work on the masters among `ports` since their last
    CONFIG RESETSTAT: (script calls, keys charged), from INFO commandstats: EVALSHA and EVAL
    calls, and the SETs they made (one per key charged and allowed; a replica applying them
    counts its own, so replicas are skipped). reset: CONFIG RESETSTAT on every port instead."""
    if reset:
        for port in ports:
            redis_cli(port, "CONFIG", "RESETSTAT")
        return None
    calls = keys = 0
    for port in ports:
        if not redis_cli(port, "ROLE").startswith("master"):
            continue
        for line in redis_cli(port, "INFO", "commandstats").splitlines():
            name, _, fields = line.partition(":")
            counted = dict(f.split("=", 1) for f in fields.split(",") if "=" in f)
            if name in ("cmdstat_evalsha", "cmdstat_eval"):
                calls += int(counted.get("calls", 0))
            elif name == "cmdstat_set":
                keys += int(counted.get("calls", 0))
    return calls, keys


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise SystemExit(f"no VmRSS for pid {pid}")


def _ms(text):
    """wrk latency like 812.00us, 1.23ms, 2.01s -> milliseconds."""
    for unit, scale in (("us", 0.001), ("ms", 1.0), ("m", 60000.0), ("s", 1000.0)):
        if text.endswith(unit):
            return float(text[: -len(unit)]) * scale
    return float(text)


def parse_wrk(path):
    out = {"requests": 0, "rps": 0.0, "p50": None, "p99": None,
           "socket_errors": 0, "non2xx": 0, "error_text": []}
    with open(path) as f:
        lines = f.read().splitlines()
    for line in lines:
        s = line.strip()
        if s.startswith("Requests/sec:"):
            out["rps"] = float(s.split()[1])
        elif " requests in " in s:
            out["requests"] = int(s.split()[0])
        elif s.startswith("50%"):
            out["p50"] = _ms(s.split()[1])
        elif s.startswith("99%"):
            out["p99"] = _ms(s.split()[1])
        elif s.startswith("Socket errors:"):
            # Socket errors: connect 0, read 0, write 0, timeout 0
            parts = s[len("Socket errors:"):].split(",")
            out["socket_errors"] = sum(int(p.split()[1]) for p in parts)
            out["error_text"].append(s)
        elif s.startswith("Non-2xx or 3xx responses:"):
            out["non2xx"] = int(s.split(":")[1])
            out["error_text"].append(s)
    return out


def merge_wrk(out_path, paths):
    """The wrk runs of a fleet (one per instance, at the same time) as one wrk output that
    parse_wrk reads: requests, req/s and errors summed; p50/p99 the larger of the runs'
    (percentiles of separate runs do not add up; the larger one is the honest bound)."""
    runs = [parse_wrk(p) for p in paths]
    def worst(key):
        values = [r[key] for r in runs if r[key] is not None]
        return f"{max(values):.2f}ms" if values else "0ms"
    socket = sum(r["socket_errors"] for r in runs)
    non2xx = sum(r["non2xx"] for r in runs)
    with open(out_path, "w") as f:
        f.write(f"merged from {len(runs)} wrk runs: {' '.join(paths)}\n")
        f.write(f"  {sum(r['requests'] for r in runs)} requests in the runs together\n")
        f.write(f"     50% {worst('p50')}\n")
        f.write(f"     99% {worst('p99')}\n")
        if socket:
            f.write(f"  Socket errors: connect {socket}, read 0, write 0, timeout 0\n")
        if non2xx:
            f.write(f"  Non-2xx or 3xx responses: {non2xx}\n")
        f.write(f"Requests/sec: {sum(r['rps'] for r in runs):.2f}\n")


def lua_string(text):
    out = ['"']
    for ch in text.encode():
        if ch in (0x22, 0x5C) or ch < 0x20 or ch > 0x7E:
            out.append("\\%03d" % ch)
        else:
            out.append(chr(ch))
    out.append('"')
    return "".join(out)


def lua(headers):
    lines = ["-- generated by Benchmarks/load/run.sh: extra request headers"]
    for h in headers:
        if ":" not in h:
            raise SystemExit(f"--header '{h}': expected 'Name: value'")
        name, value = h.split(":", 1)
        lines.append(f"wrk.headers[{lua_string(name.strip())}] = {lua_string(value.strip())}")
    return "\n".join(lines) + "\n"


def _fmt(v, spec):
    return "—" if v is None else format(v, spec)


def _median(xs):
    """Median of the figures that exist (None where nothing was measured)."""
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def _options(args, flags=(), values=()):
    """Split ARGS into positionals and --name options (values: take an argument)."""
    pos, opts, i = [], {}, 0
    while i < len(args):
        a = args[i]
        if a.startswith("--") and a[2:] in values and i + 1 < len(args):
            opts[a[2:]] = args[i + 1]
            i += 2
        elif a.startswith("--") and a[2:] in flags:
            opts[a[2:]] = True
            i += 1
        else:
            pos.append(a)
            i += 1
    return pos, opts


def write_summary(path, script, entries):
    """Append one JSON line per row to PATH (machine-readable, for all.sh and for you):
    {"script", "section", "row" (a stable key: the row names of the script's --only and
    table code), "label", "unit", "rate" (median req/s or handshakes/s; null when the row
    failed), "cpu_us" (median server CPU µs per request or handshake), "store_cpu_us" (the
    redis-servers' CPU per request, for rows whose gateways share Redis; else absent),
    "script_calls_per_1k" and "keys_charged_per_1k" (the rate-limit script's calls and the
    keys it charged per 1,000 requests, on the masters, for rows with a limit on Redis), "rounds" (the
    per-round rates), "p50", "p99" (ms, when measured), "errors", "failed" (the reason,
    or null)}. The medians are the ones the script's own table prints."""
    if not path:
        return
    with open(path, "a") as f:
        for e in entries:
            line = {"script": script, "section": e.get("section"), "row": e["row"],
                    "label": e.get("label"), "unit": e.get("unit", "req/s"),
                    "rate": e.get("rate"), "cpu_us": e.get("cpu_us"),
                    "rounds": e.get("rounds", []), "p50": e.get("p50"), "p99": e.get("p99"),
                    "errors": e.get("errors", 0), "failed": e.get("failed")}
            if e.get("store_cpu_us") is not None:
                line["store_cpu_us"] = e["store_cpu_us"]
            if e.get("calls_per_1k") is not None:
                line["script_calls_per_1k"], line["keys_charged_per_1k"] = e["calls_per_1k"], e["keys_per_1k"]
            f.write(json.dumps(line, ensure_ascii=False) + "\n")


def table(path, summary_path=None, script="run.sh", section=None):
    """path: JSON lines {row, label, round, wrk-file, cpu_ticks, hz[, store_ticks]}: store_ticks,
    the CPU of the redis-servers the row's gateways share (a column of its own)."""
    runs = {}
    order = []
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            w = parse_wrk(r["file"])
            w.update(r)
            if r["row"] not in runs:
                order.append(r["row"])
            runs.setdefault(r["row"], []).append(w)

    med = _median
    summary = {}
    for row in order:
        rs = runs[row]
        cpu = []
        store = []
        charges = []
        for w in rs:
            if w.get("cpu_ticks") is not None and w["requests"] > 0:
                cpu.append(w["cpu_ticks"] / w["hz"] * 1e6 / w["requests"])
            if w.get("store_ticks") is not None and w["requests"] > 0:
                store.append(w["store_ticks"] / w["hz"] * 1e6 / w["requests"])
            if w.get("script_calls") is not None and w["requests"] > 0:
                charges.append((w["script_calls"] * 1000 / w["requests"], w["keys_charged"] * 1000 / w["requests"]))
        summary[row] = {
            "label": rs[0]["label"],
            "rps": med([w["rps"] for w in rs]),
            "p50": med([w["p50"] for w in rs]),
            "p99": med([w["p99"] for w in rs]),
            "cpu": med(cpu) if cpu else None,
            "store_cpu": med(store) if store else None,
            "calls_per_1k": med([c for c, _ in charges]) if charges else None,
            "keys_per_1k": med([k for _, k in charges]) if charges else None,
            "rounds": len(rs),
            "rps_all": [w["rps"] for w in rs],
            "errors": sum(w["socket_errors"] + w["non2xx"] for w in rs),
            "error_text": [f"round {w['round']}: {t}" for w in rs for t in w["error_text"]],
        }
    base = summary.get("nginx", {}).get("rps")
    haproxy = summary.get("haproxy", {}).get("rps")
    show_cpu = any(s["cpu"] is not None for s in summary.values())
    head = "| row | req/s | ratio to nginx proxy |" + (" ratio to HAProxy |" if haproxy else "") + " p50 ms | p99 ms |"
    sep = "|---|---:|---:|" + ("---:|" if haproxy else "") + "---:|---:|"
    if show_cpu:
        head += " server CPU µs per request |"
        sep += "---:|"
    show_store = any(s["store_cpu"] is not None for s in summary.values())
    if show_store:
        head += " Redis CPU µs per request |"
        sep += "---:|"
    show_charges = any(s["calls_per_1k"] is not None for s in summary.values())
    if show_charges:
        head += " script calls / keys charged per 1,000 requests |"
        sep += "---:|"
    head += " errors | req/s per round |"
    sep += "---:|---|"
    print(head)
    print(sep)
    for row in order:
        s = summary[row]
        ratio = s["rps"] / base if base and s["rps"] is not None else None
        line = f"| {s['label']} | {s['rps']:,.0f} | {_fmt(ratio, '.2f')} | "
        if haproxy:
            line += f"{_fmt(s['rps'] / haproxy if s['rps'] is not None else None, '.2f')} | "
        line += f"{_fmt(s['p50'], '.2f')} | {_fmt(s['p99'], '.2f')} |"
        if show_cpu:
            line += f" {_fmt(s['cpu'], '.1f')} |"
        if show_store:
            line += f" {_fmt(s['store_cpu'], '.1f')} |"
        if show_charges:
            line += (f" {s['calls_per_1k']:.0f} / {s['keys_per_1k']:.0f} |" if s["calls_per_1k"] is not None else " — |")
        line += f" {s['errors']} | {', '.join(f'{x:,.0f}' for x in s['rps_all'])} |"
        print(line)
    problems = [t for row in order for t in
                (f"{summary[row]['label']}: {e}" for e in summary[row]["error_text"])
                if "Non-2xx" in t or not t.endswith("connect 0, read 0, write 0, timeout 0")]
    if problems:
        print()
        print("wrk reported errors:")
        for p in problems:
            print(f"- {p}")
    write_summary(summary_path, script, [
        {"section": section, "row": row, "label": summary[row]["label"], "rate": summary[row]["rps"],
         "cpu_us": summary[row]["cpu"], "store_cpu_us": summary[row]["store_cpu"],
         "calls_per_1k": summary[row]["calls_per_1k"], "keys_per_1k": summary[row]["keys_per_1k"],
         "rounds": summary[row]["rps_all"], "p50": summary[row]["p50"],
         "p99": summary[row]["p99"], "errors": summary[row]["errors"]} for row in order])


def parse_h2load(path):
    """One h2load output file (nghttp2 1.52) -> dict; missing figures stay None."""
    out = {"rps": None, "started": None, "done": None, "succeeded": None, "failed": None,
           "errored": None, "timeout": None, "status": None, "protocol": None, "tls": None,
           "cipher": None, "temp_key": None, "last_line": "", "alpn_failure": None}
    with open(path, errors="replace") as f:
        lines = f.read().splitlines()
    for line in lines:
        s = line.strip()
        if s:
            out["last_line"] = s
        if s.startswith("finished in ") and "req/s" in s:
            # finished in 3.00s, 65689.00 req/s, 4.26MB/s
            out["rps"] = float(s.split(",")[1].split()[0])
        elif s.startswith("requests: "):
            # requests: N total, N started, N done, N succeeded, N failed, N errored, N timeout
            for part in s[len("requests: "):].split(","):
                n, name = part.split()
                if name in ("started", "done", "succeeded", "failed", "errored", "timeout"):
                    out[name] = int(n)
        elif s.startswith("status codes: "):
            # status codes: N 2xx, N 3xx, N 4xx, N 5xx
            out["status"] = {p.split()[1]: int(p.split()[0]) for p in s[len("status codes: "):].split(",")}
        elif s.startswith("Application protocol: "):
            out["protocol"] = s.split(": ", 1)[1]
        elif s.startswith("TLS Protocol: "):
            out["tls"] = s.split(": ", 1)[1]
        elif s.startswith("Cipher: "):
            out["cipher"] = s.split(": ", 1)[1]
        elif s.startswith("Server Temp Key: "):
            out["temp_key"] = s.split(": ", 1)[1]
        elif s.startswith("No supported protocol was negotiated") or s.startswith("No protocol negotiated"):
            out["alpn_failure"] = out["alpn_failure"] or s
    return out


def _percentile(sorted_xs, q):
    """Nearest-rank percentile of an ascending list."""
    if not sorted_xs:
        return None
    k = max(0, min(len(sorted_xs) - 1, math.ceil(q * len(sorted_xs)) - 1))
    return sorted_xs[k]


def h2_latencies(log_path):
    """h2load --log-file: start µs since epoch, status (-1 = failed stream), µs to end of response."""
    times = []
    with open(log_path) as f:
        for line in f:
            parts = line.split("\t")
            if len(parts) >= 3 and parts[1] != "-1":
                times.append(int(parts[2]))
    times.sort()
    return times


def h2run(row, rnd, out_path, log_path, proto, cpu_ticks, hz):
    h = parse_h2load(out_path)
    st = h["status"] or {}
    ok = st.get("2xx", 0)
    if h["rps"] is None or h["done"] is None:
        _why(f"h2load did not finish: {h['last_line'] or 'no output'}")
        raise SystemExit(3)
    if h["protocol"] is None and h["alpn_failure"]:
        _why(f"the server did not negotiate {proto} through ALPN (h2load: {h['alpn_failure']})")
        raise SystemExit(3)
    if h["protocol"] is None:
        _why(f"no connection established (0 requests started, {h['errored']} errored: "
             "refused, closed, or the TLS handshake failed)")
        raise SystemExit(3)
    if h["protocol"] != proto:
        _why(f"negotiated {h['protocol']} instead of {proto}")
        raise SystemExit(3)
    if h["done"] == 0:
        _why(f"no response over {proto}: {h['failed']} requests failed, {h['errored']} errored"
             + (" (the server does not answer the h2c preface: no prior-knowledge support?)" if proto == "h2c" else ""))
        raise SystemExit(3)
    if ok == 0:
        _why(f"no 2xx response in {h['done']} requests (status codes: "
             f"{', '.join(f'{v} {k}' for k, v in st.items())})")
        raise SystemExit(3)
    times = h2_latencies(log_path) if os.path.exists(log_path) else []
    errors = (h["failed"] or 0) + (h["errored"] or 0) + (h["timeout"] or 0) + sum(
        v for k, v in st.items() if k != "2xx")
    cpu_us = None
    if cpu_ticks not in ("", "null") and ok > 0:
        cpu_us = int(cpu_ticks) / int(hz) * 1e6 / ok
    print(json.dumps({
        "row": row, "round": int(rnd), "rps": h["rps"], "requests": h["done"], "ok": ok,
        "errors": errors, "status": st,
        "p50": _percentile(times, 0.50) / 1000 if times else None,
        "p99": _percentile(times, 0.99) / 1000 if times else None,
        "logged": len(times), "cpu_us": cpu_us, "protocol": h["protocol"],
        "tls": h["tls"], "cipher": h["cipher"], "temp_key": h["temp_key"]}))


def _why(text):
    sys.stderr.write(text.replace("\n", " ")[:300] + "\n")
    return True


def h2table(rows_path, results_path, summary_path=None):
    rows = []
    with open(rows_path) as f:
        for line in f:
            row, section, label, reason = (line.rstrip("\n").split("\t") + ["", "", "", ""])[:4]
            rows.append({"row": row, "section": section, "label": label, "reason": reason})
    runs = {}
    if os.path.exists(results_path):
        with open(results_path) as f:
            for line in f:
                r = json.loads(line)
                runs.setdefault(r["row"], []).append(r)

    med = _median
    summary = {}
    for r in rows:
        rs = runs.get(r["row"], [])
        if r["reason"] or not rs:
            continue
        summary[r["row"]] = {
            "rps": med([x["rps"] for x in rs]), "p50": med([x["p50"] for x in rs]),
            "p99": med([x["p99"] for x in rs]), "cpu": med([x["cpu_us"] for x in rs]),
            "errors": sum(x["errors"] for x in rs), "rps_all": [x["rps"] for x in rs],
            "status": [(x["round"], x["status"], x["errors"]) for x in rs if x["errors"]]}
    # Each section's reference: its HAProxy row; the authenticated rows compare with HAProxy h2 (TLS).
    ref = {"h2": summary.get("haproxy-tls"), "h2c": summary.get("haproxy-h2c"),
           "auth": summary.get("haproxy-tls")}
    show_cpu = any(s["cpu"] is not None for s in summary.values())
    head = "| protocol | row | req/s | ratio to HAProxy | p50 ms | p99 ms |"
    sep = "|---|---|---:|---:|---:|---:|"
    if show_cpu:
        head += " server CPU µs per request |"
        sep += "---:|"
    head += " errors | req/s per round |"
    sep += "---:|---|"
    names = {"h2": "h2 (TLS 1.3)", "h2c": "h2c (prior knowledge)", "auth": "h2 (TLS 1.3) + RS256 Bearer"}
    print(head)
    print(sep)
    failed = []
    for r in rows:
        proto = names.get(r["section"], r["section"])
        s = summary.get(r["row"])
        if s is None:
            reason = r["reason"] or "no measurement"
            failed.append((r["label"], proto, reason))
            cells = 4 + (1 if show_cpu else 0) + 2
            print(f"| {proto} | {r['label']} | failed | " + " | ".join(["—"] * (cells - 1)) + " |")
            continue
        base = ref.get(r["section"])
        ratio = s["rps"] / base["rps"] if base and base["rps"] else None
        line = (f"| {proto} | {r['label']} | {s['rps']:,.0f} | {_fmt(ratio, '.2f')} | "
                f"{_fmt(s['p50'], '.2f')} | {_fmt(s['p99'], '.2f')} |")
        if show_cpu:
            line += f" {_fmt(s['cpu'], '.1f')} |"
        line += f" {s['errors']} | {', '.join(f'{x:,.0f}' for x in s['rps_all'])} |"
        print(line)
    # Authentication cost: each authenticated row against the same binary's unauthenticated h2 row.
    pairs = [("portcullis-auth", "portcullis-tls"), ("baseline-auth", "baseline-tls"), ("haproxy-auth", "haproxy-tls")]
    notes = []
    for a, b in pairs:
        sa, sb = summary.get(a), summary.get(b)
        if sa and sb and sb["rps"]:
            label = next(r["label"] for r in rows if r["row"] == a)
            against = "the same instance without the header" if a == "haproxy-auth" else "the same binary without auth"
            text = f"- {label} against {against} (h2, TLS): req/s x{sa['rps'] / sb['rps']:.2f}"
            if sa["p99"] is not None and sb["p99"] is not None:
                text += f", p99 {sa['p99'] - sb['p99']:+.2f} ms"
            if sa["cpu"] is not None and sb["cpu"] is not None:
                text += f", server CPU {sa['cpu'] - sb['cpu']:+.1f} µs per request"
            notes.append(text)
    if notes:
        print()
        print("Cost of the Bearer token:")
        print("\n".join(notes))
    problems = [f"- {next(r['label'] for r in rows if r['row'] == row)}: round {rnd}: {err} errors, status codes {st}"
                for row, s in summary.items() for rnd, st, err in s["status"]]
    if problems:
        print()
        print("h2load reported errors (failed/errored/timed-out streams and non-2xx responses):")
        print("\n".join(problems))
    if failed:
        print()
        print("Rows that could not be measured:")
        for label, proto, reason in failed:
            print(f"- {proto}, {label}: {reason}")
    entries = []
    for r in rows:
        s = summary.get(r["row"])
        e = {"section": r["section"], "row": r["row"], "label": r["label"]}
        if s is None:
            e["failed"] = r["reason"] or "no measurement"
        else:
            e.update(rate=s["rps"], cpu_us=s["cpu"], rounds=s["rps_all"], p50=s["p50"], p99=s["p99"],
                     errors=s["errors"])
        entries.append(e)
    write_summary(summary_path, "h2.sh", entries)


def tlstable(rows_path, results_path, duration, sign, x25519, summary_path=None):
    """tls.sh: ROWS lines "row<TAB>label<TAB>failure reason"; RESULTS lines
    "row mode handshakes cpu_ticks hz resumed" (mode -new or -reuse, one line per run)."""
    duration, sign, x = float(duration), float(sign or 0), float(x25519 or 0)
    rows = []
    with open(rows_path) as f:
        for line in f:
            row, label, reason = (line.rstrip("\n").split("\t") + ["", "", ""])[:3]
            rows.append({"row": row, "label": label, "reason": reason})
    runs = {}
    if os.path.exists(results_path):
        with open(results_path) as f:
            for line in f:
                row, mode, conns, ticks, hz, reused = line.split()
                runs.setdefault((row, mode), []).append({
                    "rate": int(conns) / duration, "conns": int(conns), "reused": int(reused),
                    "cpu": int(ticks) / int(hz) * 1e6 / max(1, int(conns))})
    modes = (("-new", "full", "full (TLS 1.3)"), ("-reuse", "resumed", "resumed (TLS 1.2 ticket)"))
    summary = {}
    for r in rows:
        for mode, key, _ in modes:
            rs = runs.get((r["row"], mode), [])
            if r["reason"] or not rs:
                continue
            summary[(r["row"], mode)] = {
                "rate": _median([x["rate"] for x in rs]), "cpu": _median([x["cpu"] for x in rs]),
                "rates": [x["rate"] for x in rs], "conns": sum(x["conns"] for x in rs),
                "reused": sum(x["reused"] for x in rs)}
    limit = 1 / (1 / sign + 2 / x) if sign and x else None
    print("| handshake | server | per s | ratio to nginx | server CPU µs per handshake |")
    print("|---|---|---:|---:|---:|")
    for mode, _, name in modes:
        base = summary.get(("nginx", mode), {}).get("rate")
        for r in rows:
            s = summary.get((r["row"], mode))
            if s is None:
                print(f"| {name} | {r['label']} | failed | — | — |")
                continue
            ratio = s["rate"] / base if base else None
            print(f"| {name} | {r['label']} | {s['rate']:,.0f} | {_fmt(ratio, '.2f')} | {s['cpu']:,.0f} |")
    if limit:
        print()
        print(f"Physical limit per core (`openssl speed`): P-256 sign {sign:,.0f}/s, X25519 {x:,.0f} op/s -> "
              f"{limit:,.0f} full handshakes/s per core ({1e6 / limit:,.0f} µs of public-key work each); the machine has the same 2 cores for clients and server.")
    # s_time prints one character per connection: 'r' when the session was resumed.
    notes = []
    for r in rows:
        full, resumed = summary.get((r["row"], "-new")), summary.get((r["row"], "-reuse"))
        if full and full["reused"]:
            notes.append(f"- {r['label']}, full: {full['reused']:,} of {full['conns']:,} handshakes resumed a session")
        if resumed and resumed["conns"] and resumed["reused"] < 0.9 * resumed["conns"]:
            notes.append(f"- {r['label']}, resumed: only {resumed['reused']:,} of {resumed['conns']:,} handshakes "
                         "resumed the session (the others were full handshakes)")
    if notes:
        print()
        print("Resumption not as asked for (from s_time's per-connection marks):")
        print("\n".join(notes))
    failed = [r for r in rows if r["reason"] or not any((r["row"], m) in summary for m, _, _ in modes)]
    if failed:
        print()
        print("Rows that could not be measured:")
        for r in failed:
            print(f"- {r['label']}: {r['reason'] or 'no measurement'}")
    entries = []
    for mode, key, _ in modes:
        for r in rows:
            s = summary.get((r["row"], mode))
            e = {"section": key, "row": f"{r['row']}-{key}", "label": r["label"], "unit": "handshakes/s"}
            if s is None:
                e["failed"] = r["reason"] or "no measurement"
            else:
                e.update(rate=s["rate"], cpu_us=s["cpu"], rounds=s["rates"])
            entries.append(e)
    write_summary(summary_path, "tls.sh", entries)


# all.sh: the rows of issue #37, each beside its anchors. Per row: section, title, the
# Portcullis and baseline row keys of that section's summary, the anchors (key, name) of
# which the one with the highest rate in the run is shown, the baseline's own anchor when
# the comparison is with the same binary, the target for Portcullis ÷ anchor, and whether
# "server CPU per request <= the anchor's" is a target too.
ALL_SECTIONS = {"http1": "run.sh", "https": "run.sh --tls", "h2": "h2.sh", "tls": "tls.sh", "auth": "auth.sh"}
ALL_ROWS = [
    ("http1", "plain HTTP/1.1, keep-alive", "portcullis", "baseline",
     (("nginx", "nginx"), ("haproxy", "HAProxy")), None, 1.0, True),
    ("https", "HTTPS keep-alive, HTTP/1.1", "portcullis", "baseline",
     (("nginx", "nginx"), ("haproxy", "HAProxy")), None, 1.0, True),
    ("h2", "h2 over TLS 1.3", "portcullis-tls", "baseline-tls",
     (("h2o-tls", "h2o"), ("nginx-tls", "nginx"), ("haproxy-tls", "HAProxy")), None, 1.0, True),
    ("h2", "h2c, prior knowledge", "portcullis-h2c", "baseline-h2c",
     (("h2o-h2c", "h2o"), ("nginx-h2c", "nginx"), ("haproxy-h2c", "HAProxy")), None, 1.0, True),
    ("h2", "h2 + RS256 Bearer, one token", "portcullis-auth", "baseline-auth",
     (("haproxy-auth", "HAProxy, same header passed through"),), None, 1.0, True),
    ("h2", "h2 + RS256 Bearer ÷ plain h2", "portcullis-auth", "baseline-auth",
     (("portcullis-tls", "Portcullis, h2 without token"),), "baseline-tls", 0.9, False),
    ("tls", "full TLS 1.3 handshakes/s", "portcullis-full", "baseline-full",
     (("h2o-full", "h2o"), ("nginx-full", "nginx"), ("haproxy-full", "HAProxy")), None, 1.0, True),
    ("tls", "resumed handshakes/s (TLS 1.2 ticket)", "portcullis-resumed", "baseline-resumed",
     (("h2o-resumed", "h2o"), ("nginx-resumed", "nginx"), ("haproxy-resumed", "HAProxy")), None, 1.0, True),
    ("auth", "RS256 Bearer, HTTP/1.1, 1 token", "portcullis1", "base1",
     (("haproxy1", "HAProxy jwt_verify, 1 token"),), None, 2.5, True),
    ("auth", "RS256 Bearer, HTTP/1.1, {N} tokens", "portcullisN", "baseN",
     (("haproxyN", "HAProxy jwt_verify, {N} tokens"),), None, 2.5, True),
    ("auth", "RS256 Bearer, {N} tokens ÷ 1 token", "portcullisN", "baseN",
     (("portcullis1", "Portcullis, 1 token"),), "base1", 0.95, False),
]


def alltable(directory, section_rcs, baseline=False):
    sections = []
    for item in section_rcs:
        name, _, rc = item.partition("=")
        sections.append((name, int(rc or 0)))
    data = {}
    for name, _ in sections:
        rows = {}
        path = os.path.join(directory, f"{name}.summary.jsonl")
        if os.path.exists(path):
            with open(path) as f:
                for line in f:
                    if line.strip():
                        r = json.loads(line)
                        rows[r["row"]] = r   # a later line for the same row wins
        data[name] = rows
    rcs = dict(sections)

    def measured(sec, key):
        r = data.get(sec, {}).get(key)
        return r if r and r.get("rate") is not None else None

    def cell(sec, key):
        r = data.get(sec, {}).get(key)
        if r and r.get("rate") is not None:
            return f"{r['rate']:,.0f}"
        return "failed" if r else "not measured"

    def mark(ok):
        return "✓" if ok else "✗"

    head = "| section | row | Portcullis |"
    sep = "|---|---|---:|"
    if baseline:
        head += " baseline | after ÷ before |"
        sep += "---:|---:|"
    head += " best anchor (same run) | Portcullis ÷ anchor | target | server CPU µs per request: Portcullis" + (
        " / baseline" if baseline else "") + " / anchor |"
    sep += "---|---:|---|---:|"
    print(head)
    print(sep)
    missing, errors, seen = [], [], set()
    for sec, title, pkey, bkey, anchors, banchor, target, cpu_target in ALL_ROWS:
        if sec not in rcs:
            continue
        n = None
        for k in (pkey, bkey, "portcullisN", "haproxyN"):
            label = (data[sec].get(k) or {}).get("label") or ""
            if "tokens" in label:
                n = label.rsplit(" tokens", 1)[0].split()[-1]
                break
        fill = lambda t: t.replace("{N}", f"{int(n):,}" if n and n.isdigit() else (n or "N"))
        title = fill(title)
        p = measured(sec, pkey)
        b = measured(sec, bkey) if baseline else None
        measured_anchors = [(measured(sec, k), fill(name)) for k, name in anchors]
        measured_anchors = [(r, name) for r, name in measured_anchors if r]
        best = max(measured_anchors, key=lambda a: a[0]["rate"]) if measured_anchors else None
        line = f"| {sec} | {title} | {cell(sec, pkey)} |"
        if baseline:
            line += f" {cell(sec, bkey)} | {_fmt(p['rate'] / b['rate'] if p and b and b['rate'] else None, '.2f')} |"
        if best:
            a, aname = best
            line += f" {aname} {a['rate']:,.0f} |"
        else:
            line += " not measured (" + ", ".join(fill(name) for _, name in anchors) + ") |"
        ratio = p["rate"] / best[0]["rate"] if p and best and best[0]["rate"] else None
        rcell = "—" if ratio is None else f"{ratio:.2f} {mark(ratio >= target)}"
        if baseline:
            bref = measured(sec, banchor) if banchor else (best[0] if best else None)
            if b and bref and bref["rate"]:
                rcell += f" (baseline {b['rate'] / bref['rate']:.2f})"
        tcell = f"{target:.1f}" if round(target, 1) == target else f"{target:.2f}"
        line += f" {rcell} | ≥ {tcell}×" + ("; CPU ≤ anchor" if cpu_target else "") + " |"
        cpus = [p] + ([b] if baseline else []) + [best[0] if best else None]
        ccell = " / ".join(_fmt(r.get("cpu_us") if r else None, ".1f") for r in cpus)
        if cpu_target and p and best and p.get("cpu_us") is not None and best[0].get("cpu_us") is not None:
            ccell += f" {mark(p['cpu_us'] <= best[0]['cpu_us'])}"
        line += f" {ccell} |"
        print(line)
        names = [(pkey, "Portcullis")] + ([(bkey, "Portcullis baseline")] if baseline else []) + [
            (k, fill(name)) for k, name in anchors]
        for key, name in names:
            if (sec, key) in seen:
                continue
            seen.add((sec, key))
            r = data[sec].get(key)
            if r is None or r.get("rate") is None:
                if r:
                    why = r.get("failed") or "no measurement"
                elif data[sec]:
                    why = f"not in the summary of {ALL_SECTIONS[sec]} (row '{key}' not run)"
                else:
                    why = (f"{ALL_SECTIONS[sec]} exited {rcs[sec]} before its table" if rcs[sec]
                           else f"{ALL_SECTIONS[sec]} wrote no summary")
                missing.append(f"- {sec}, {title}: {(r or {}).get('label') or name}: {why}")
            elif r.get("errors"):
                errors.append(f"- {sec}, {title}: {r['label']}: {r['errors']} errors (see the script's output)")
    print()
    print("Rates are medians over the rounds (req/s; handshakes/s and CPU µs per handshake in the tls rows); "
          "✓/✗: the target of issue #37 met or missed in this run. The anchor is the best of the row's anchors "
          "in the same run; for the ÷ rows it is the same binary's other row"
          + (", and (baseline …) is the baseline's own ratio." if baseline else "."))
    if errors:
        print()
        print("Rows with errors (failed requests or non-2xx responses):")
        print("\n".join(errors))
    if missing:
        print()
        print("Not measured:")
        print("\n".join(missing))


def main():
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "port":
        print(free_port())
    elif cmd == "cpu":
        print(cpu_ticks([int(a) for a in args]), os.sysconf("SC_CLK_TCK"))
    elif cmd == "rss":
        print(rss_kib(int(args[0])))
    elif cmd == "wrk":
        print(json.dumps(parse_wrk(args[0])))
    elif cmd == "mergewrk":
        merge_wrk(args[0], args[1:])
    elif cmd == "redisstats":
        result = redis_charges([int(a) for a in args[1:]], reset=args[0] == "reset")
        if result:
            print(*result)
    elif cmd == "lua":
        sys.stdout.write(lua(args))
    elif cmd == "table":
        pos, opts = _options(args, values=("summary", "script", "section"))
        table(pos[0], opts.get("summary"), opts.get("script", "run.sh"), opts.get("section"))
    elif cmd == "h2run":
        h2run(*args)
    elif cmd == "h2table":
        pos, opts = _options(args, values=("summary",))
        h2table(pos[0], pos[1], opts.get("summary"))
    elif cmd == "tlstable":
        pos, opts = _options(args, values=("summary",))
        tlstable(*pos[:5], summary_path=opts.get("summary"))
    elif cmd == "alltable":
        pos, opts = _options(args, flags=("baseline",))
        alltable(pos[0], pos[1:], bool(opts.get("baseline")))
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main()
