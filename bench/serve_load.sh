#!/usr/bin/env bash
# Load on `airlock serve` over loopback: many concurrent sessions doing mixed actions, bounded in
# count and time, over the unix socket and then over TCP with a bearer token. serve_load checks
# that every request was answered, every receipt chain verifies and no session's receipts hold
# another's; it prints requests/s and read_file p50/p99 per transport.
# Usage: bench/serve_load.sh PATH-TO-AIRLOCK [SESSIONS] [ACTIONS-PER-SESSION] [SECONDS]
set -euo pipefail
airlock=${1:?usage: bench/serve_load.sh PATH-TO-AIRLOCK [SESSIONS] [ACTIONS] [SECONDS]}
sessions=${2:-32}
actions=${3:-300}
seconds=${4:-30}
load=$(dirname "$airlock")/../serve_load
[ -x "$load" ] || { echo "serve_load: $load not built (make build)" >&2; exit 1; }
work=$(mktemp -d /tmp/airlock-serve-load.XXXXXX)
pid=
cleanup() {
  [ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$work/state" "$work/ws/src" "$work/ws/reports"
chmod 700 "$work/state"
echo "print('hi')" > "$work/ws/src/app.py"
head -c 32 /dev/urandom | base64 > "$work/token"
chmod 600 "$work/token"
cat > "$work/policy.json" <<JSON
{"schema_version": "airlock.task_policy.v1", "workspace": "$work/ws", "readable": ["src", "reports"],
 "write_back_paths": ["reports"], "tools": [{"name": "count", "argv": ["/usr/bin/wc", "-c", "src/app.py"]}],
 "limits": {"max_actions_per_minute": 100000}}
JSON
threads=$((sessions + 8))
"$airlock" --state-dir "$work/state" serve --listen 127.0.0.1:0 --token-file "$work/token" \
  --threads "$threads" --max-sessions "$((sessions * 2))" > "$work/ready" 2> "$work/serve.err" &
pid=$!
for _ in $(seq 600); do [ -s "$work/ready" ] && break; sleep 0.1; done
[ -s "$work/ready" ] || { cat "$work/serve.err" >&2; exit 1; }
tcp=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["listening"]["tcp"])' "$work/ready")
echo "airlock serve: $sessions sessions × up to $actions actions, at most $seconds s per transport" >&2
status=0
"$load" --unix "$work/state/airlock.sock" --policy "$work/policy.json" \
  --sessions "$sessions" --actions "$actions" --seconds "$seconds" || status=1
"$load" --tcp "$tcp" --token-file "$work/token" --policy "$work/policy.json" \
  --sessions "$sessions" --actions "$actions" --seconds "$seconds" || status=1
kill -TERM "$pid"
wait "$pid" || status=1
pid=
[ ! -e "$work/state/airlock.sock" ] || { echo "serve_load: the socket was left behind" >&2; status=1; }
exit $status
