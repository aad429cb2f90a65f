#!/bin/sh
# The generated references (docs/reference/) against the code: regenerates each with
# `airlock reference NAME` and fails, with the diff, when the committed file differs.
# Usage: tests/docs_reference_test.sh AIRLOCK SOURCE_DIR
set -eu
airlock=$1 src=$2
status=0
for pair in codes:refusal-codes policy:policy; do
  name=${pair%%:*} file=docs/reference/${pair#*:}.md
  if ! out=$("$airlock" reference "$name"); then
    echo "docs_reference: \`airlock reference $name\` failed (see above)" >&2
    status=1
    continue
  fi
  if ! printf '%s\n' "$out" | diff -u "$src/$file" - >&2; then
    echo "docs_reference: $file differs from what the code generates (diff above: - committed, + generated)." >&2
    echo "docs_reference: regenerate it with \`make docs\` and commit the result." >&2
    status=1
  fi
done
exit $status
