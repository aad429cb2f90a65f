#!/usr/bin/env bash
# Seat reservations per second and p99 latency under contention, for both store backends:
# starts a throwaway PostgreSQL cluster (scripts/pg-test-cluster), runs store_bench, stops it.
# Usage: bench/store_bench.sh PATH-TO-store_bench [benchmark flags...]
set -euo pipefail
bench=${1:?usage: bench/store_bench.sh PATH-TO-store_bench [benchmark flags...]}
shift
here=$(cd "$(dirname "$0")" && pwd)
state=$(mktemp -d /tmp/airlock-store-bench-pg.XXXXXX)
trap '"$here/../scripts/pg-test-cluster" stop "$state/pg"; rm -rf "$state"' EXIT
"$here/../scripts/pg-test-cluster" start "$state/pg" >&2
if [ -f "$state/pg/conninfo" ]; then
  export AIRLOCK_BENCH_PG_URL=$(cat "$state/pg/conninfo")
fi
"$bench" "$@"
