#!/usr/bin/env bash
# Builds the three minimal servers and the load client (g++ -O2, one file at a time) and measures
# them side by side with `airlock serve`, over loopback. See README.md.
# Usage: bench/http_libs/run.sh [PATH-TO-AIRLOCK] [bench.py options, e.g. --reps 3 --out FILE]
# The binaries go to $HTTP_LIBS_BUILD (default: build/http_libs under the repository).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
out=${HTTP_LIBS_BUILD:-$repo/build/http_libs}
mkdir -p "$out"
airlock=
if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then airlock=$1; shift; fi
build() {  # build NAME SOURCE FLAGS...
  local name=$1 src=$here/$2; shift 2
  if [ ! -x "$out/$name" ] || [ "$src" -nt "$out/$name" ]; then
    echo "building $name" >&2
    g++ -std=c++20 -O2 -o "$out/$name" "$src" "$@"
  fi
}
build httplib_server httplib_server.cpp $(pkg-config --cflags --libs cpp-httplib) -pthread
build mhd_server mhd_server.cpp $(pkg-config --cflags --libs libmicrohttpd) -pthread
build beast_server beast_server.cpp -pthread
build loadgen loadgen.cpp -pthread
# airlock serve runs from a copy (airlock and the airlock-serve beside it): a rebuild of the tree
# it came from must not change or break it halfway through the run.
if [ -n "$airlock" ]; then
  mkdir -p "$out/airlock"
  cp "$airlock" "$(dirname "$airlock")/airlock-serve" "$out/airlock/"
  airlock=$out/airlock/$(basename "$airlock")
fi
exec python3 "$here/bench.py" --bin-dir "$out" ${airlock:+--airlock "$airlock"} "$@"
