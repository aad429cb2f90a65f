#!/usr/bin/env python3
"""Hostile requests against `airlock serve` over loopback TCP, without the token: the daemon's RSS
before and after each. Usage: bench/serve_hostile.py PATH-TO-AIRLOCK [HEADERS] [CHUNKED-MIB]"""
import json, os, socket, subprocess, sys, tempfile, time


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return -1


def answer(s, deadline=20):
    s.settimeout(deadline)
    data = b""
    try:
        while True:
            b = s.recv(65536)
            if not b:
                break
            data += b
            if b"\r\n\r\n" in data:
                head, _, body = data.partition(b"\r\n\r\n")
                n = [int(l.split(b":")[1]) for l in head.split(b"\r\n") if l.lower().startswith(b"content-length:")]
                if n and len(body) >= n[0]:
                    break
    except (socket.timeout, ConnectionResetError, BrokenPipeError):
        pass
    return data.split(b"\r\n", 1)[0].decode(errors="replace") or "(no answer)"


def send_all(s, gen):
    try:
        for part in gen:
            s.sendall(part)
    except (BrokenPipeError, ConnectionResetError):
        return False
    return True


def main():
    airlock = sys.argv[1]
    headers = int(sys.argv[2]) if len(sys.argv) > 2 else 2_000_000
    chunked_mib = int(sys.argv[3]) if len(sys.argv) > 3 else 64
    with tempfile.TemporaryDirectory(prefix="airlock-hostile.") as work:
        state = os.path.join(work, "state")
        os.mkdir(state, 0o700)
        token = os.path.join(work, "token")
        with open(token, "w") as f:
            f.write("hostile-bench-token-0123456789")
        os.chmod(token, 0o600)
        p = subprocess.Popen([airlock, "--state-dir", state, "serve", "--listen", "127.0.0.1:0", "--token-file", token],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        try:
            port = int(json.loads(p.stdout.readline())["listening"]["tcp"].rsplit(":", 1)[1])
            print(f"rss at start: {rss_kib(p.pid) / 1024:.1f} MiB")

            s = socket.create_connection(("127.0.0.1", port))
            t0 = time.time()
            ok = send_all(s, [b"GET /v1/health HTTP/1.1\r\nHost: x\r\n"] +
                          [b"X-H: v\r\n" * 10000 for _ in range(headers // 10000)] + [b"\r\n"])
            print(f"{headers} headers, no token: sent={'all' if ok else 'cut off'} answer={answer(s)!r} "
                  f"in {time.time() - t0:.1f} s; rss {rss_kib(p.pid) / 1024:.1f} MiB")
            s.close()

            s = socket.create_connection(("127.0.0.1", port))
            chunk = b"%x\r\n" % (1 << 20) + b"a" * (1 << 20) + b"\r\n"
            ok = send_all(s, [b"POST /v1/sessions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
                              b"Authorization: Bearer hostile-bench-token-0123456789\r\n\r\n"] +
                          [chunk] * chunked_mib + [b"0\r\n\r\n"])
            print(f"chunked body of {chunked_mib} MiB (limit 8 MiB), with token: sent={'all' if ok else 'cut off'} "
                  f"answer={answer(s)!r}; rss {rss_kib(p.pid) / 1024:.1f} MiB")
            s.close()
            time.sleep(1)
            print(f"rss after: {rss_kib(p.pid) / 1024:.1f} MiB")
        finally:
            p.terminate()
            p.wait(30)


if __name__ == "__main__":
    main()
