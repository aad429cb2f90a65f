#!/usr/bin/env bash
# make bench: spawn cost of `airlock run -- /bin/true` on the Landlock and namespaces tiers against
# plain /bin/true and bubblewrap, interleaved in one run, as root and as an unprivileged user
# (a tier the user cannot have is left out), then kill-to-verified teardown. Writes
# bench/results/latest.md and prints it.
# Usage: bench/run.sh PATH-TO-AIRLOCK [ROUNDS]
set -euo pipefail
airlock=${1:?usage: bench/run.sh PATH-TO-AIRLOCK [ROUNDS]}
rounds=${2:-300}
here=$(cd "$(dirname "$0")" && pwd)
bench_bin=$(dirname "$airlock")/../spawn_bench
[ -x "$bench_bin" ] || { echo "bench: $bench_bin not built (make build)" >&2; exit 1; }
work=$(mktemp -d /tmp/airlock-bench.XXXXXX)
trap 'rm -rf "$work"' EXIT
chmod 755 "$work"
cp "$airlock" "$work/airlock"
cp "$bench_bin" "$work/spawn_bench"
mkdir -p "$here/results"
for tier in landlock namespaces; do
  printf '{"schema_version": "airlock.task_policy.v1", "executor": "%s"}\n' "$tier" > "$work/$tier.json"
done
out="$here/results/latest.md"

run_as() {  # run_as LABEL PREFIX... -- runs spawn_bench as the given identity
  local label=$1; shift
  local state="$work/state-$label"
  mkdir -p "$state"
  [ "$label" = nobody ] && chown 65534:65534 "$state"
  local variants=("plain=/bin/true")
  for tier in landlock namespaces; do
    # Only the tiers this identity can have here (the plan says; nothing runs).
    if "$@" "$work/airlock" --state-dir "$state" plan --policy "$work/$tier.json" >/dev/null 2>&1; then
      variants+=("airlock-$tier=$work/airlock --state-dir $state run -q --policy $work/$tier.json -- /bin/true")
    else
      echo "(airlock-$tier: unavailable as $label: $("$@" "$work/airlock" --state-dir "$state" plan --policy "$work/$tier.json" 2>&1 | head -1))"
      echo
    fi
  done
  if command -v bwrap >/dev/null 2>&1; then
    variants+=("bwrap=/usr/bin/bwrap --unshare-all --die-with-parent --ro-bind / / --dev /dev --proc /proc --tmpfs /tmp /bin/true")
  fi
  echo "### as $label ($rounds interleaved rounds)"
  echo
  echo '```'
  "$@" "$work/spawn_bench" --rounds "$rounds" --warmup 20 "${variants[@]}"
  echo '```'
  echo
}

{
  echo "# airlock spawn cost"
  echo
  echo "$(date -u +%Y-%m-%dT%H:%MZ), kernel $(uname -r), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)."
  echo "Reproduce: \`make build && bench/run.sh build/src/airlock $rounds\`. Ratios and medians are from one"
  echo "interleaved run; each round runs every variant once."
  echo
  run_as "$(id -un)"
  if [ "$(id -u)" -eq 0 ]; then
    run_as nobody setpriv --reuid=65534 --regid=65534 --clear-groups
  fi
  echo "### teardown: SIGTERM to airlock until it exits with the sandbox verified empty"
  echo
  echo '```'
  for tier in landlock namespaces; do
    python3 "$here/teardown.py" "$work/airlock" "$tier" 30 || true
  done
  echo '```'
} | tee "$out"
