#!/usr/bin/env bash
# `make run`: the demo. Copies examples/demo-project to a fresh workspace, runs its test suite
# under examples/policies/demo.json, and shows what ran, what enforced and what was written back.
set -euo pipefail
airlock=${1:?usage: demo.sh PATH-TO-AIRLOCK}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d /tmp/airlock-demo.XXXXXX)
trap 'rm -rf "$work"' EXIT
cp -r "$here/demo-project" "$work/workspace"
state="$work/state"

echo "== the plan for examples/policies/demo.json on this host"
"$airlock" --state-dir "$state" plan --policy "$here/policies/demo.json"
echo
echo "== airlock run --policy examples/policies/demo.json --workspace $work/workspace -- python3 tests/run_tests.py"
set +e
"$airlock" --state-dir "$state" run --policy "$here/policies/demo.json" --workspace "$work/workspace" \
  -- python3 tests/run_tests.py
rc=$?
set -e
echo
echo "== exit status $rc; written back into the workspace:"
find "$work/workspace/reports" -type f -printf '   %P: ' -exec cat {} \;
echo
echo "== receipts (one JSON line per decision, hash-chained):"
for f in "$state"/receipts/*.jsonl; do
  python3 - "$f" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    extra = ""
    if r["kind"] == "session.open":
        extra = f'executor={r["executor"]} tier={r["tier"]} landlock_abi={r["landlock_abi"]} policy={r["policy_digest"][:16]}…'
    elif r["kind"] == "tool.run":
        o = r.get("outcome", {})
        extra = f'argv={r["argv"]} status={o.get("status")} wall_ms={o.get("wall_ms", 0):.1f}'
    elif r["kind"] == "session.close":
        extra = f'how={r["how"]} written_back={r.get("written_back", {}).get("written")}'
    print(f'   #{r["seq"]} {r["kind"]:<14} {extra}')
PY
done
exit $rc
