#!/usr/bin/env python3
"""Side-by-side measurements of the HTTP servers in this directory and `airlock serve`, over loopback.

For each server and each repetition, every test starts a fresh server process and reads its peak
RSS (VmHWM) from /proc afterwards:
  load      keep-alive GET /v1/health from N clients: requests/s, p50/p99 latency (loadgen)
  headers   one request with H headers ("X-H: v"), no token: status, peak RSS
  chunked   POST with a chunked body of C MiB (limit 8 MiB): status, peak RSS
  idle      I connections opened and held: RSS, sockets the server holds, and when a new
            request is first answered (tried until --probe-seconds)
  slowloris S connections, opened one per 100 ms, each sending its headers one byte per 100 ms:
            when each is cut (from its own start), and when a new request is first answered after
            the last one opened (up to --slow-seconds)
Prints a Markdown table of medians (and ratios to cpp-httplib plain) and writes all runs as JSON.
Usage: bench.py --bin-dir DIR [--airlock PATH] [--reps 3] [--out FILE] (see --help)
"""
import argparse, json, os, resource, select, signal, socket, statistics, subprocess, sys, tempfile, time

TOKEN = "http-libs-bench-token-0123456789"
MIB = 1 << 20


def proc_status(pid):
    out = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                k, _, v = line.partition(":")
                if k in ("VmHWM", "VmRSS", "Threads"):
                    out[k] = int(v.split()[0])
    except FileNotFoundError:
        pass
    return out


class Server:
    def __init__(self, kind, args):
        self.kind, self.work = kind, None
        if kind == "airlock":
            self.work = tempfile.TemporaryDirectory(prefix="http-libs-airlock.")
            state, token = os.path.join(self.work.name, "state"), os.path.join(self.work.name, "token")
            os.mkdir(state, 0o700)
            with open(token, "w") as f:
                f.write(TOKEN)
            os.chmod(token, 0o600)
            cmd = [args.airlock, "--state-dir", state, "serve", "--listen", "127.0.0.1:0", "--token-file", token,
                   "--threads", "64"]
        else:
            # "mhd@1024": the same server given the argument 1024 (connections); "mhd@64+tpc": 64 tpc
            name, _, rest = kind.partition("@")
            cmd = [os.path.join(args.bin_dir, f"{name}_server")] + (rest.split("+") if rest else [])
        for attempt in range(3):
            self.err = tempfile.TemporaryFile()
            self.p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self.err, text=True)
            line = self.p.stdout.readline()
            if line:
                break
            self.p.wait()
            self.err.seek(0)
            why = self.err.read().decode(errors="replace")
            print(f"{kind}: server did not start (attempt {attempt + 1}): {why}", file=sys.stderr)
            time.sleep(2)
        else:
            if self.work:
                self.work.cleanup()
            raise RuntimeError(f"{kind}: server did not start")
        self.port = int(json.loads(line)["listening"]["tcp"].rsplit(":", 1)[1]) if kind == "airlock" else int(line)
        self.pid = self.p.pid
        time.sleep(0.2)
        self.start_rss = proc_status(self.pid).get("VmRSS", 0)

    def status(self):
        return proc_status(self.pid)

    def sockets(self):
        n = 0
        for fd in os.listdir(f"/proc/{self.pid}/fd"):
            try:
                n += os.readlink(f"/proc/{self.pid}/fd/{fd}").startswith("socket:")
            except OSError:
                pass
        return n

    def alive(self):
        return self.p.poll() is None

    def stop(self):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(30)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        if self.work:
            self.work.cleanup()


def dial(port, timeout=5):
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def read_status(s, timeout):
    """The status code of the answer on s (0 if none came before it closed or timeout)."""
    s.settimeout(timeout)
    data = b""
    try:
        while b"\r\n" not in data:
            b = s.recv(4096)
            if not b:
                break
            data += b
    except (socket.timeout, ConnectionResetError, BrokenPipeError, OSError):
        pass
    try:
        return int(data.split(b" ", 2)[1]) if data.startswith(b"HTTP/") else 0
    except (IndexError, ValueError):
        return 0


def health_request():
    return f"GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TOKEN}\r\n\r\n".encode()


def probe(port, timeout):
    """One GET /v1/health on a new connection: its status (0: no answer within timeout)."""
    try:
        s = dial(port, timeout)
    except OSError:
        return 0
    try:
        s.sendall(health_request())
        return read_status(s, timeout)
    except OSError:
        return 0
    finally:
        s.close()


def first_answer(port, limit, per_try):
    """Seconds until a new GET /v1/health is answered 200, trying again as each try fails; None if never."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < limit:
        t = time.monotonic()
        if probe(port, min(per_try, max(0.1, limit - (t - t0)))) == 200:
            return round(time.monotonic() - t0, 2)
        time.sleep(max(0.0, 0.1 - (time.monotonic() - t)))
    return None


def send_all(s, parts):
    try:
        for part in parts:
            s.sendall(part)
        return "all"
    except socket.timeout:
        return "stalled"
    except (BrokenPipeError, ConnectionResetError, OSError):
        return "cut"


def t_load(srv, a):
    out = subprocess.run([os.path.join(a.bin_dir, "loadgen"), str(srv.port), str(a.clients), str(a.seconds), TOKEN],
                         capture_output=True, text=True, timeout=a.seconds + 60)
    r = json.loads(out.stdout)
    return {"rps": r["rps"], "p50_us": r["p50_us"], "p99_us": r["p99_us"], "errors": r["errors"]}


def t_headers(srv, a):
    s = dial(srv.port, 60)
    t0 = time.monotonic()
    batch = b"X-H: v\r\n" * 10000
    sent = send_all(s, [b"GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\n"] + [batch] * (a.headers // 10000) + [b"\r\n"])
    status = read_status(s, 30)
    secs = time.monotonic() - t0
    s.close()
    time.sleep(0.3)
    return {"sent": sent, "status": status, "seconds": round(secs, 2), "hwm_mib": srv.status().get("VmHWM", 0) / 1024}


def t_chunked(srv, a):
    path = "/v1/sessions" if srv.kind == "airlock" else "/v1/echo"
    s = dial(srv.port, 60)
    t0 = time.monotonic()
    chunk = b"%x\r\n" % MIB + b"a" * MIB + b"\r\n"
    head = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TOKEN}\r\n"
            "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n").encode()
    sent = send_all(s, [head] + [chunk] * a.chunked_mib + [b"0\r\n\r\n"])
    status = read_status(s, 30)
    secs = time.monotonic() - t0
    s.close()
    time.sleep(0.3)
    return {"sent": sent, "status": status, "seconds": round(secs, 2), "hwm_mib": srv.status().get("VmHWM", 0) / 1024}


def dial_many(port, n, timeout):
    """n connections dialled at once (a listen backlog of 5 would make one-by-one dialling take minutes)."""
    pending = {}
    for _ in range(n):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        s.connect_ex(("127.0.0.1", port))
        pending[s.fileno()] = s
    done, deadline = [], time.monotonic() + timeout
    poller = select.poll()
    for fd in pending:
        poller.register(fd, select.POLLOUT)
    while pending and time.monotonic() < deadline:
        for fd, ev in poller.poll(100):
            s = pending.pop(fd)
            poller.unregister(fd)
            if s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0:
                done.append(s)
            else:
                s.close()
    for s in pending.values():
        s.close()
    return done


def t_idle(srv, a):
    t0 = time.monotonic()
    socks = dial_many(srv.port, a.idle, 20)
    dial_s = time.monotonic() - t0
    time.sleep(1.0)
    st = srv.status()
    held = srv.sockets()
    answered = first_answer(srv.port, a.probe_seconds, a.probe_seconds)
    hwm = srv.status().get("VmHWM", 0) / 1024
    for s in socks:
        s.close()
    return {"opened": len(socks), "dial_s": round(dial_s, 2), "server_sockets": held, "rss_mib": st.get("VmRSS", 0) / 1024, "hwm_mib": hwm,
            "threads": st.get("Threads", 0), "first_answer_s": answered}


def t_slowloris(srv, a):
    """Opens one connection per 100 ms tick until S are open (a ramp), and every tick sends each open
    one the next byte of its headers; a connection is cut when the server closes it or answers."""
    socks, begun, first_tick, cut, refused = [], [], [], {}, 0
    dribble = b"X-Slow: " + b"a" * 10**6
    t0 = time.monotonic()
    tick, answered, next_probe = 0, None, t0 + 1.0
    while time.monotonic() - t0 < a.slow_seconds + a.slow_conns * 0.1:
        if len(socks) + refused < a.slow_conns:
            try:
                s = dial(srv.port, 2)
                s.sendall(b"GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\n")
                s.setblocking(False)
                socks.append(s)
                begun.append(time.monotonic())
                first_tick.append(tick)
            except OSError:
                refused += 1
        elif len(cut) == len(socks) or time.monotonic() - begun[-1] >= a.slow_seconds:
            break
        for k, s in enumerate(socks):
            if k in cut:
                continue
            try:
                s.send(dribble[tick - first_tick[k]:tick - first_tick[k] + 1])
            except (BlockingIOError, InterruptedError):
                pass
            except OSError:
                cut[k] = (time.monotonic() - begun[k], 0)
        r, _, _ = select.select([s for k, s in enumerate(socks) if k not in cut], [], [], 0)
        for s in r:
            k = socks.index(s)
            try:
                data = s.recv(4096)
            except OSError:
                data = b""
            status = int(data.split(b" ", 2)[1]) if data.startswith(b"HTTP/") else 0
            cut[k] = (time.monotonic() - begun[k], status)
        tick += 1
        if answered is None and time.monotonic() >= next_probe and len(socks) + refused >= a.slow_conns:
            if probe(srv.port, 0.5) == 200:
                answered = round(time.monotonic() - begun[-1], 2) if begun else 0.0
            next_probe = time.monotonic() + 0.5
        time.sleep(max(0.0, t0 + tick * 0.1 - time.monotonic()))
    for s in socks:
        s.close()
    times = sorted(t for t, _ in cut.values())
    statuses = sorted({st for _, st in cut.values()})
    return {"cut": len(cut), "of": len(socks), "refused": refused,
            "cut_median_s": round(statistics.median(times), 2) if times else None,
            "cut_statuses": statuses, "first_answer_s": answered}


TESTS = {"load": t_load, "headers": t_headers, "chunked": t_chunked, "idle": t_idle, "slowloris": t_slowloris}


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def fmt(x, nd=1):
    return "—" if x is None else (f"{x:.{nd}f}" if isinstance(x, float) else str(x))


def ratio(x, base):
    return "" if x is None or not base else f" ({x / base:.2f}×)"


def summarize(results, kinds, a):
    base = "httplib"
    rows = []
    cols = ["", *kinds]

    def row(label, f, nd=1, rat=True):
        vals = {k: f(k) for k in kinds}
        rows.append([label] + [fmt(vals[k], nd) + (ratio(vals[k], vals.get(base)) if rat and k != base and
                                                    isinstance(vals[k], (int, float)) else "") for k in kinds])

    def m(k, test, key):
        return med([r[test][key] for r in results[k] if test in r and r[test].get(key) is not None])

    def modes(k, test, key):
        vs = [str(r[test][key]) for r in results[k] if test in r]
        return "/".join(sorted(set(vs), key=vs.index)) if vs else None

    def both(k, test):
        return None if modes(k, test, "status") is None else f'{modes(k, test, "status")} / {modes(k, test, "sent")}'

    def never(k, test, key, limit):
        vs = [r[test][key] for r in results[k] if test in r]
        if not vs:
            return None
        got = [v for v in vs if v is not None]
        if not got:
            return f"none in {limit:g} s"
        s = fmt(statistics.median(got), 1) + " s"
        return s if len(got) == len(vs) else s + f" ({len(vs) - len(got)}/{len(vs)} never)"

    row(f"load: requests/s ({a.clients} clients)", lambda k: m(k, "load", "rps"), 0)
    row("load: p50 µs", lambda k: m(k, "load", "p50_us"))
    row("load: p99 µs", lambda k: m(k, "load", "p99_us"))
    row("load: errors", lambda k: m(k, "load", "errors"), 0, False)
    row("RSS at start, MiB", lambda k: med([r["start_rss_mib"] for r in results[k]]))
    row(f"{a.headers:,} headers, no token: peak RSS MiB", lambda k: m(k, "headers", "hwm_mib"))
    row("  … status / sent", lambda k: both(k, "headers"), rat=False)
    row("  … seconds", lambda k: m(k, "headers", "seconds"), 2, False)
    row(f"{a.chunked_mib} MiB chunked body: peak RSS MiB", lambda k: m(k, "chunked", "hwm_mib"))
    row("  … status / sent", lambda k: both(k, "chunked"), rat=False)
    row("  … seconds", lambda k: m(k, "chunked", "seconds"), 2, False)
    row(f"{a.idle} idle connections: RSS MiB", lambda k: m(k, "idle", "rss_mib"))
    row("  … seconds to connect them all", lambda k: m(k, "idle", "dial_s"), 2, False)
    row("  … threads", lambda k: m(k, "idle", "threads"), 0)
    row("  … sockets open in the server after 1 s", lambda k: m(k, "idle", "server_sockets"), 0, False)
    row("  … a new request first answered after", lambda k: never(k, "idle", "first_answer_s", a.probe_seconds),
        rat=False)
    row(f"slowloris ({a.slow_conns} conn., 1 B/100 ms each): cut", lambda k: None if m(k, "slowloris", "cut") is None else f'{m(k, "slowloris", "cut")}/{a.slow_conns}',
        rat=False)
    row("  … cut after (median)", lambda k: never(k, "slowloris", "cut_median_s", a.slow_seconds), rat=False)
    row("  … status sent when cut", lambda k: modes(k, "slowloris", "cut_statuses"), rat=False)
    row("  … refused at connect", lambda k: m(k, "slowloris", "refused"), 0, False)
    row("  … a new request first answered after", lambda k: never(k, "slowloris", "first_answer_s", a.slow_seconds),
        rat=False)
    names = {"httplib": "cpp-httplib plain", "mhd": "libmicrohttpd", "beast": "Boost.Beast", "airlock": "airlock serve"}
    names.update({f"{k}@{a.wide}": f"{names[k]}, {a.wide} conn." for k in ("mhd", "beast")})
    names["mhd@64+tpc"] = "libmicrohttpd, thread per conn."
    names = {k: names.get(k, k) for k in kinds}
    out = ["| " + " | ".join([""] + [names[k] for k in kinds]) + " |", "|" + "---|" * len(cols)]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)


def main():
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # so every server started is stopped
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin-dir", required=True, help="where run.sh built httplib_server, mhd_server, beast_server, loadgen")
    ap.add_argument("--airlock", help="the airlock binary (airlock serve is measured too)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--headers", type=int, default=2_000_000)
    ap.add_argument("--chunked-mib", type=int, default=256)
    ap.add_argument("--idle", type=int, default=1000)
    ap.add_argument("--probe-seconds", type=float, default=15)
    ap.add_argument("--slow-conns", type=int, default=64)
    ap.add_argument("--slow-seconds", type=float, default=15)
    ap.add_argument("--servers", default="httplib,mhd,beast,airlock,mhd@64+tpc",
                    help="which to measure; KIND@ARG+ARG passes arguments (mhd@64+tpc: a thread per connection)")
    ap.add_argument("--wide", type=int, default=1024,
                    help="also run idle and slowloris against libmicrohttpd and Beast allowed this many connections (0: no)")
    ap.add_argument("--tests", default=",".join(TESTS))
    ap.add_argument("--out", help="write every run as JSON here")
    a = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 8192)), hard))
    kinds = [k for k in a.servers.split(",") if k != "airlock" or a.airlock]
    wide = [f"{k}@{a.wide}" for k in ("mhd", "beast")] if a.wide else []  # idle and slowloris only
    results = {k: [] for k in kinds + wide}
    for rep in range(a.reps):
        for k in kinds + wide:
            run = {}
            for name in a.tests.split(","):
                if k in wide and name not in ("idle", "slowloris"):
                    continue
                srv = Server(k, a)
                try:
                    run["start_rss_mib"] = srv.start_rss / 1024
                    run[name] = TESTS[name](srv, a)
                    run[name]["server_alive"] = srv.alive()
                finally:
                    srv.stop()
                print(f"rep {rep + 1} {k} {name}: {json.dumps(run[name])}", file=sys.stderr, flush=True)
            results[k].append(run)
            if a.out:  # after every server, so that an interrupted run keeps what it measured
                with open(a.out, "w") as f:
                    json.dump({"args": {k: v for k, v in vars(a).items() if k not in ("bin_dir", "airlock", "out")},
                               "results": results}, f, indent=1)
    print(summarize(results, kinds + wide, a))


if __name__ == "__main__":
    main()
