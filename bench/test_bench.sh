#!/usr/bin/env bash
# The bench harness end to end, briefly: bench/bench.py --quick --no-peers on the benchmarks that
# need no server, then checks that every table has its rows with figures and every chart is a PNG.
# No figure is judged (a timing is never a test assertion); a variant that failed to run is.
# Usage: bench/test_bench.sh BUILD-DIR
set -euo pipefail
build=${1:?usage: bench/test_bench.sh BUILD-DIR}
here=$(cd "$(dirname "$0")" && pwd)
out=$(mktemp -d /tmp/airlock-bench-test.XXXXXX)
trap 'rm -rf "$out"' EXIT
names=spawn-true,spawn-unprivileged,teardown,memory,broker,ledger,scale
# The real agent CLIs, when scripts/agent-clis installed them (CTest's agent_clis fixture).
agents=0
if [ -e "$here/../.cache/agent-clis/.complete" ]; then names+=,agent-task; agents=1; fi
"$here/bench.py" --build "$build" --quick --no-peers --only "$names" --out "$out" > "$out/stdout"
md=$out/latest.md
fail() { echo "test_bench: $*" >&2; echo "--- latest.md" >&2; cat "$md" >&2; exit 1; }
cmp -s "$md" <(head -c "$(stat -c %s "$md")" "$out/stdout") || fail "the printed table is not latest.md"
for n in ${names//,/ }; do
  [ "$(head -c 4 "$out/$n.png" | od -An -tx1 | tr -d ' ')" = 89504e47 ] || fail "$n.png is not a PNG"
  grep -q "bench/bench.py --only $n\`" "$md" || fail "no reproduce line for $n"
done
number='[0-9][0-9,.]*'
row() {  # row VARIANT KIND: a row with a median
  grep -qE "^\| $1 \| $2 \| $number \| $number – $number \|" "$md" || fail "no figures for $1 ($2)"
}
row plain baseline
row plain-fork baseline
row airlock-landlock-cli 'airlock CLI'
row airlock-landlock-lib 'airlock library'
row airlock-landlock-warm 'airlock library'
row airlock-host-lib 'airlock library'
row airlock-landlock 'airlock CLI'  # teardown and memory
row 'airlock-serve idle session \(landlock\)' 'airlock serve'  # memory: the daemon per idle session
row 'session read_file \+ receipt' 'airlock library'
row 'intent \+ outcome, fdatasync per intent' 'airlock library'
for c in 1 2 8 32; do  # scale: a rate per concurrency
  row "plain x$c" baseline
  row "airlock-landlock-cli x$c" 'airlock CLI'
  [ "${AIRLOCK_REQUIRE_ALL_TIERS:-0}" = 1 ] && row "airlock-namespaces-cli x$c" 'airlock CLI'
done
if [ "$agents" = 1 ]; then
  for cli in claude-code codex; do
    row "$cli unconfined" baseline
    [ "${AIRLOCK_REQUIRE_ALL_TIERS:-0}" = 1 ] && row "$cli airlock-namespaces" 'airlock CLI'
  done
fi
if [ "${AIRLOCK_REQUIRE_ALL_TIERS:-0}" = 1 ]; then
  row airlock-namespaces-cli 'airlock CLI'
  row airlock-namespaces-lib 'airlock library'
  row airlock-namespaces-warm 'airlock library'
  row airlock-namespaces-serve 'airlock serve'
  row airlock-namespaces 'airlock CLI'
  row airlock-container-cli 'airlock CLI'
  row airlock-container-lib 'airlock library'
  row 'airlock-serve idle session \(namespaces\)' 'airlock serve'
fi
# Spawn rows carry their cause beside the effect: CPU ms and page faults per run.
grep -qE '^\| variant \| kind \| median ms \| spread ms \(p10-p90\) \| CPU ms \| page faults \|' "$md" ||
  fail "the spawn tables have no CPU and page-fault columns"
for v in plain airlock-landlock-cli airlock-landlock-lib; do
  grep -qE "^\| $v \| [A-Za-z ]+ \| $number \| $number – $number \| $number \| [1-9][0-9,]* \|" "$md" ||
    fail "no CPU and page-fault figures for $v"
done
# A peer left out is listed with its reason, never dropped.
grep -qE '^\| bwrap \| peer \| not run: left out \(--no-peers\) \|' "$md" || fail "bwrap is not listed as left out"
# Teardown left nothing behind: the survivors column is 0 for every airlock row.
teardown_rows=$(sed -n '/^## Kill to verified-empty/,/^## /p' "$md" | grep -E '^\| airlock-(landlock|namespaces) \| airlock CLI \|')
[ -n "$teardown_rows" ] || fail "no teardown rows"
if grep -vqE '\| 0 \| [0-9]+ \|$' <<<"$teardown_rows"; then
  fail "a sandbox left processes behind"
fi
# Every target is judged on this run's figures.
for t in 'Landlock tier via the CLI' 'Landlock tier via the library' 'Broker read_file decision' 'Kill to verified-empty (landlock tier)'; do
  grep -qE "^- Target: $(printf '%s' "$t" | sed 's/[()]/\\&/g').* \*\*(met|missed)\*\*$" "$md" || fail "target not judged: $t"
done
