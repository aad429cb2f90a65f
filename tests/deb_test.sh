#!/usr/bin/env bash
# `make deb`'s packages, built by CPack into a scratch directory and unpacked into a clean tree: its
# control fields (name, the project's version, Depends from dpkg-shlibdeps plus libcurl4), its
# dependencies present on this host, and the unpacked /usr running the doctor and the quick start,
# with man pages that render and bash and zsh completions that complete (tests/installed_checks.sh);
# the executables without debug information, which is airlock-dbgsym's, found by build id.
# Usage: tests/deb_test.sh CPACK BUILD-DIR VERSION
set -euo pipefail
source "$(dirname "$0")/installed_checks.sh"
cpack=${1:?usage: deb_test.sh CPACK BUILD-DIR VERSION}
build=${2:?usage: deb_test.sh CPACK BUILD-DIR VERSION}
version=${3:?usage: deb_test.sh CPACK BUILD-DIR VERSION}
scratch=$(mktemp -d /tmp/airlock-deb-test.XXXXXX)
trap 'rm -rf "$scratch"' EXIT
fail() { echo "deb_test: $*" >&2; exit 1; }

"$cpack" --config "$build/CPackConfig.cmake" -G DEB -B "$scratch/out" > "$scratch/cpack.log" 2>&1 ||
  { cat "$scratch/cpack.log" >&2; fail "cpack failed"; }
debs=("$scratch"/out/*.deb)
[ ${#debs[@]} -eq 1 ] && [ -f "${debs[0]}" ] || fail "cpack made no single .deb: ${debs[*]}"
deb=${debs[0]}
ddeb=$scratch/out/airlock-dbgsym_${version}_$(dpkg --print-architecture).ddeb
[ -f "$ddeb" ] || fail "cpack made no debug symbols package: $(ls "$scratch/out")"
field() { dpkg-deb -f "$deb" "$1"; }
[ "$(field Package)" = airlock ] || fail "Package is $(field Package)"
[ "$(field Version)" = "$version" ] || fail "Version is $(field Version), the project's is $version"
[ "$(basename "$deb")" = "airlock_${version}_$(dpkg --print-architecture).deb" ] || fail "file name $(basename "$deb")"
depends=$(field Depends)
for need in libc6 libcurl4; do
  grep -qE "(^|, )$need( |,|$)" <<<"$depends" || fail "Depends lacks $need: $depends"
done
# Every dependency is a package this host has installed, at a version that satisfies it: the
# package would install here (dpkg checks the same relations).
IFS=',' read -ra relations <<<"$depends"
for rel in "${relations[@]}"; do
  rel=${rel# }
  pkg=${rel%% *}
  have=$(dpkg-query -W -f='${Version}' "$pkg" 2>/dev/null) || fail "Depends names $pkg, which is not installed here"
  if [[ $rel =~ \((\>=|\<=|=|\>\>|\<\<)\ ([^\)]+)\) ]]; then
    op=${BASH_REMATCH[1]}
    case $op in '>=') op=ge ;; '<=') op=le ;; '=') op=eq ;; '>>') op=gt ;; '<<') op=lt ;; esac
    dpkg --compare-versions "$have" "$op" "${BASH_REMATCH[2]}" || fail "Depends wants $rel; installed: $have"
  fi
done
contents=$(dpkg-deb -c "$deb")
for f in usr/bin/airlock usr/bin/airlock-serve usr/bin/airlock-probe usr/bin/airlock-guest-agent usr/bin/airlock-container-check \
         usr/share/man/man1/airlock.1 usr/share/bash-completion/completions/airlock \
         usr/share/zsh/vendor-completions/_airlock \
         usr/share/airlock/agents/codex.json; do
  grep -qE " \./$f$" <<<"$contents" || fail "the package lacks /$f"
done
grep -q ' \./usr/local/' <<<"$contents" && fail "the package installs under /usr/local"
grep -q ' \./usr/lib/debug/' <<<"$contents" && fail "the package carries debug information: $(grep /usr/lib/debug/ <<<"$contents")"

# The debug information is airlock-dbgsym's, for exactly this version, found by build id.
[ "$(dpkg-deb -f "$ddeb" Package)" = airlock-dbgsym ] || fail "the .ddeb's Package is $(dpkg-deb -f "$ddeb" Package)"
[ "$(dpkg-deb -f "$ddeb" Depends)" = "airlock (= $version)" ] || fail "airlock-dbgsym depends on $(dpkg-deb -f "$ddeb" Depends)"
dpkg-deb -x "$ddeb" "$scratch/dbgsym"

# A clean tree: the package's files and nothing else.
dpkg-deb -x "$deb" "$scratch/root"
check_installed_tree "$scratch/root/usr" "$scratch/scratch"
for exe in airlock airlock-serve; do
  bin=$scratch/root/usr/bin/$exe
  sections=$(readelf -S -W "$bin")  # captured: grep -q closing a pipe early fails it under pipefail
  if grep -qE '\.debug_|\.symtab' <<<"$sections"; then fail "usr/bin/$exe has debug sections or symbols"; fi
  id=$(readelf -n "$bin" | awk '/Build ID:/ && !id { id = $3 } END { print id }')
  dbg=$scratch/dbgsym/usr/lib/debug/.build-id/${id:0:2}/${id:2}.debug
  [ -f "$dbg" ] || fail "airlock-dbgsym has no debug file for usr/bin/$exe (build id $id)"
  dbg_sections=$(readelf -S -W "$dbg")
  grep -q '\.debug_info' <<<"$dbg_sections" || fail "$dbg holds no .debug_info"
done
echo "deb_test: ok ($(basename "$deb"), $(stat -c %s "$deb") bytes; Depends: $depends; $(basename "$ddeb"), $(stat -c %s "$ddeb") bytes)"
