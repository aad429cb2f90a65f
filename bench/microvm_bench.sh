#!/usr/bin/env bash
# The microVM tier against the namespaces tier, interleaved in one run with spawn_bench: cold
# boot-to-result and pooled dispatch (a guest booted ahead) for `/bin/true` and `python3 -c pass`
# (python3 from the 9p-shared /usr), through the library and through `airlock run`; then the
# memory each tier's run used (airlock's reported max RSS: QEMU with the guest's touched memory
# for microvm, the command for namespaces). Needs `airlock vm build` and `airlock vm verify` done
# for STATE-DIR.
# Usage: bench/microvm_bench.sh PATH-TO-AIRLOCK STATE-DIR [ROUNDS]
set -euo pipefail
airlock=${1:?usage: bench/microvm_bench.sh PATH-TO-AIRLOCK STATE-DIR [ROUNDS]}
state=${2:?usage: bench/microvm_bench.sh PATH-TO-AIRLOCK STATE-DIR [ROUNDS]}
rounds=${3:-10}
bench_bin=$(dirname "$airlock")/../spawn_bench
[ -x "$bench_bin" ] || { echo "bench: $bench_bin not built (ninja spawn_bench)" >&2; exit 1; }
work=$(mktemp -d /tmp/airlock-vmbench.XXXXXX)
trap 'rm -rf "$work"' EXIT
printf '{"schema_version": "airlock.task_policy.v1", "executor": "namespaces", "limits": {"memory_mb": 256}}\n' > "$work/ns.json"
printf '{"schema_version": "airlock.task_policy.v1", "workload": "untrusted_code", "limits": {"memory_mb": 256}}\n' > "$work/vm.json"
"$airlock" --state-dir "$state" plan --policy "$work/vm.json" >/dev/null ||
  { echo "bench: the microvm tier is unavailable (airlock vm build; airlock vm verify)" >&2; exit 1; }
run="$airlock --state-dir $state run -q --policy"
echo "# microVM tier: cold boot-to-result and pooled dispatch vs the namespaces tier"
echo
echo "$(date -u +%Y-%m-%dT%H:%MZ), kernel $(uname -r), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)."
echo "Reproduce: \`bench/microvm_bench.sh build/src/airlock STATE-DIR $rounds\`."
echo
echo '```'
# lib: one executor opened once, Executor::run per call (as airlock serve holds a session);
# pool: the same with one guest booted ahead (the interleaved rounds give it time to boot).
"$bench_bin" --rounds "$rounds" --warmup 1 --state-dir "$state" \
  "namespaces-true=lib:$work/ns.json /bin/true" \
  "microvm-cold-true=lib:$work/vm.json /bin/true" \
  "microvm-pooled-true=pool:$work/vm.json /bin/true" \
  "namespaces-python=lib:$work/ns.json /usr/bin/python3 -c pass" \
  "microvm-cold-python=lib:$work/vm.json /usr/bin/python3 -c pass" \
  "microvm-pooled-python=pool:$work/vm.json /usr/bin/python3 -c pass" \
  "cli-namespaces-true=$run $work/ns.json -- /bin/true" \
  "cli-microvm-true=$run $work/vm.json -- /bin/true"
echo '```'
echo
echo "max RSS of one run of /bin/true (KiB; microvm: QEMU with the guest's touched memory):"
for t in ns vm; do
  rss=$("$airlock" --state-dir "$state" run --policy "$work/$t.json" -- /bin/true 2>&1 | sed -n 's/.*max rss \([0-9]*\) KiB.*/\1/p')
  echo "  $t: $rss"
done
