#!/usr/bin/env bash
# The network door's cost: a 100 MB download and a small request's time to first byte, through the
# door from inside the namespaces tier, against the same curl run directly on the host's loopback,
# in the same run. Rounds interleave the two so a noisy machine slows both alike.
#
#   bench/door_bench.sh build/src/airlock [ROUNDS] [MEGABYTES]
#
# Each round runs one `airlock run` whose command downloads the file once and makes 20 small
# requests; curl's own timings (-w) are taken inside, so sandbox start-up is not counted. The
# direct variant runs the same commands on the host with no proxy. Reports medians and ratios.
set -euo pipefail

airlock=$(realpath "${1:?usage: door_bench.sh AIRLOCK [ROUNDS] [MEGABYTES]}")
rounds=${2:-5}
megabytes=${3:-100}
work=$(mktemp -d)
server_pid=
cleanup() {
  [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

mkdir "$work/files" "$work/ws"  # served files stay out of the workspace the session copies
head -c "$((megabytes * 1024 * 1024))" /dev/urandom >"$work/files/blob"
printf 'x' >"$work/files/small"

# A loopback server that sends files with sendfile(2), one connection at a time: the server is
# not what is measured, so it must not be the bottleneck.
cat >"$work/server.py" <<'EOF'
import os, socket, sys
root = sys.argv[1]
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 0))
s.listen(64)
print(s.getsockname()[1], flush=True)
while True:
    c, _ = s.accept()
    head = b""
    while b"\r\n\r\n" not in head:
        b = c.recv(65536)
        if not b: break
        head += b
    try:
        name = head.split(b" ")[1].decode().rsplit("/", 1)[-1]
        f = open(os.path.join(root, name), "rb")
        size = os.fstat(f.fileno()).st_size
        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % size)
        c.sendfile(f)
        f.close()
    except Exception:
        c.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
    c.close()
EOF
python3 "$work/server.py" "$work/files" >"$work/port" &
server_pid=$!
for _ in $(seq 100); do [ -s "$work/port" ] && break; sleep 0.05; done
port=$(cat "$work/port")

cat >"$work/policy.json" <<EOF
{"schema_version": "airlock.task_policy.v1", "executor": "namespaces",
 "code_network": {"mode": "allowlist", "rules": [{"cidr": "127.0.0.1/32", "ports": [$port], "schemes": ["http"]}]},
 "limits": {"memory_mb": 1024, "command_timeout_seconds": 600}}
EOF

# One line per transfer: "big SECONDS BYTES_PER_SECOND" or "small TTFB_SECONDS".
measure='curl -sS -o /dev/null -w "big %{time_total} %{speed_download}\n" http://127.0.0.1:'$port'/blob
for i in $(seq 20); do curl -sS -o /dev/null -w "small %{time_starttransfer}\n" http://127.0.0.1:'$port'/small; done'

: >"$work/direct" && : >"$work/door"
for r in $(seq "$rounds"); do
  env -u http_proxy -u HTTP_PROXY -u https_proxy -u HTTPS_PROXY -u ALL_PROXY -u all_proxy sh -c "$measure" >>"$work/direct"
  "$airlock" --state-dir "$work/state" run -q --policy "$work/policy.json" --workspace "$work/ws" -- sh -c "$measure" \
    >>"$work/door"
  echo "round $r/$rounds done" >&2
done

python3 - "$work/direct" "$work/door" "$megabytes" <<'EOF'
import statistics, sys
def load(path):
    big, small = [], []
    for line in open(path):
        p = line.split()
        if p[0] == "big": big.append((float(p[1]), float(p[2])))
        elif p[0] == "small": small.append(float(p[1]))
    return big, small
d_big, d_small = load(sys.argv[1])
g_big, g_small = load(sys.argv[2])
mb = int(sys.argv[3])
dm = statistics.median(b[1] for b in d_big) / 1e6
gm = statistics.median(b[1] for b in g_big) / 1e6
dt = statistics.median(b[0] for b in d_big)
gt = statistics.median(b[0] for b in g_big)
dl = statistics.median(d_small) * 1e3
gl = statistics.median(g_small) * 1e3
print(f"{mb} MB download, {len(d_big)} rounds each (median):")
print(f"  direct loopback   {dt:8.3f} s   {dm:8.1f} MB/s")
print(f"  through the door  {gt:8.3f} s   {gm:8.1f} MB/s   throughput ratio {gm / dm:.2f}")
print(f"small request, time to first byte, {len(d_small)} requests each (median):")
print(f"  direct loopback   {dl:8.3f} ms")
print(f"  through the door  {gl:8.3f} ms   added {gl - dl:.3f} ms")
EOF
