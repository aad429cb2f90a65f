#!/usr/bin/env bash
# `cmake --install` into a scratch prefix: the installed airlock carries no debug sections and no
# symbol table, its debug information sits under lib/debug/.build-id by its build id (which the
# stripped binary keeps), the installed tree runs a confined command and the quick start, its man
# pages render, its bash completion sources (tests/installed_checks.sh), and the install manifest
# lists every file it wrote (what `make uninstall` removes).
# Usage: tests/install_test.sh CMAKE BUILD-DIR
set -euo pipefail
source "$(dirname "$0")/installed_checks.sh"
cmake=${1:?usage: install_test.sh CMAKE BUILD-DIR}
build=${2:?usage: install_test.sh CMAKE BUILD-DIR}
prefix=$(mktemp -d /tmp/airlock-install-test.XXXXXX)
trap 'rm -rf "$prefix"' EXIT
fail() { echo "install_test: $*" >&2; exit 1; }
"$cmake" --install "$build" --prefix "$prefix" > "$prefix.log" 2>&1 || { cat "$prefix.log" >&2; rm -f "$prefix.log"; fail "install failed"; }
rm -f "$prefix.log"
# This install's manifest, taken before anything else installs from the build (CTest's RESOURCE_LOCK).
manifest=$prefix.manifest
trap 'rm -rf "$prefix" "$manifest"' EXIT
[ -f "$build/install_manifest.txt" ] || fail "no install_manifest.txt in the build directory"
cp "$build/install_manifest.txt" "$manifest"
for exe in airlock airlock-serve airlock-probe airlock-guest-agent airlock-container-check; do
  [ -x "$prefix/bin/$exe" ] || fail "bin/$exe is not installed"
done
build_id() { readelf -n "$1" | awk '/Build ID:/ && !id { id = $3 } END { print id }'; }
for exe in airlock airlock-serve; do
  bin=$prefix/bin/$exe
  sections=$(readelf -S -W "$bin")
  if grep -qE '\.debug_|\.symtab' <<<"$sections"; then fail "bin/$exe still has debug sections or symbols"; fi
  grep -q '\.gnu_debuglink' <<<"$sections" || fail "bin/$exe has no .gnu_debuglink"
  id=$(build_id "$bin")
  [ "$id" = "$(build_id "$build/src/$exe")" ] || fail "bin/$exe's build id differs from the built one"
  dbg=$prefix/lib/debug/.build-id/${id:0:2}/${id:2}.debug
  [ -f "$dbg" ] || fail "no debug file for bin/$exe at $dbg"
  dbg_sections=$(readelf -S -W "$dbg")  # captured: grep -q closing a pipe early fails it under pipefail
  grep -q '\.debug_info' <<<"$dbg_sections" || fail "$dbg holds no .debug_info"
  grep -q '\.symtab' <<<"$dbg_sections" || fail "$dbg holds no symbol table"
done
# The installed tree works on its own: a confined command on the Landlock tier (the sandbox's
# first line names the tier), and the doctor.
state=$prefix/state
out=$(echo '{"schema_version": "airlock.task_policy.v1", "executor": "landlock"}' > "$prefix/ll.json" &&
      "$prefix/bin/airlock" --state-dir "$state" run --policy "$prefix/ll.json" -- /bin/echo installed 2>&1) ||
  fail "the installed airlock could not run a command: $out"
grep -q '^airlock: landlock tier' <<<"$out" || fail "no tier line: $out"
grep -q '^installed$' <<<"$out" || fail "the command's output is missing: $out"
check_installed_tree "$prefix" "$prefix/scratch"
installed=$(stat -c %s "$prefix/bin/airlock")
rm -rf "$prefix/scratch" "$state" "$prefix/ll.json"
# The manifest names every file installed, the debug files too: nothing is left once they are gone.
xargs -d '\n' rm -f -- < "$manifest"
left=$(find "$prefix" -type f)
[ -z "$left" ] || fail "files the install manifest does not list: $left"
echo "install_test: ok ($installed bytes installed, $(stat -c %s "$build/src/airlock") built)"
