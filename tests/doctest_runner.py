#!/usr/bin/env python3
"""The doc-test runner: every console example in README.md and docs/*.md, run and checked.

What runs. A fenced block marked ```console is an example: each line starting with `$ ` is a
command, the lines after it (up to the next `$ ` line or the end of the block) the output it
shows, stdout and stderr together as a terminal would show them. A command continues on the
next line after a trailing `\\`, and a heredoc (`cat > policy.json <<'EOF'`) takes the lines up
to its delimiter, so a guide writes its files in the example itself. Blocks marked ```sh (or
anything but console) are never run: they are for what a test cannot do (a microVM guest, a
PostgreSQL server, a real agent CLI, root on another host).

Where it runs. Every file gets a fresh temporary directory, removed afterwards: `home/` is HOME,
`state/` is AIRLOCK_STATE_DIR, and `work/` (a copy of the repository's `examples/`, as
`examples/`) is the working directory of every command. The blocks of one file run in order in
that one directory, so a guide can build up: a file written in one block is there in the next.
Each command is its own `bash -c` (so `cd` and variables do not carry over), with the previous
command's exit status as `$?` (so `echo $?` shows it). The built airlock is first on PATH.

How output is compared. Line by line, after trailing spaces are dropped and trailing empty
lines ignored:
  - `…` (U+2026) in a line matches any run of characters within that line (ids, digests,
    paths, timings): `airlock: exit 0 in … ms`.
  - a line that is only `…` matches any number of lines, none included.
  - everything else must match exactly.
A command whose block shows no output must print nothing. The exit status is not checked
unless the example shows it (`echo $?`).

Who runs it. The user running the runner; as root, everything once more as uid 65534 (nobody),
so an example holds for a user without privileges too (there it runs on the tiers such a user
gets). `--no-unprivileged` skips that second pass.

Usage: doctest_runner.py --airlock PATH/TO/airlock SOURCE_DIR [FILE.md ...]
Exit status: 0 when every example matched, 1 otherwise (each mismatch reported with its file,
line, the command, what the document shows and what it printed).
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

ELLIPSIS = "\u2026"
FENCE = re.compile(r"^(\s*)(`{3,})(\S*)\s*$")
HEREDOC = re.compile(r"<<-?\s*(['\"]?)([A-Za-z_][A-Za-z0-9_]*)\1")
COMMAND_TIMEOUT = 120


class Example:
    def __init__(self, path, line, command, expected):
        self.path, self.line, self.command, self.expected = path, line, command, expected


def console_blocks(path):
    """Yields (first line number, [lines]) for every ```console block of the file."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence, lang = m.groups()
        j = i + 1
        while j < len(lines) and not (lines[j].strip().startswith(fence) and lines[j].strip().strip("`") == ""):
            j += 1
        if lang == "console":
            yield i + 2, [l[len(indent):] if l.startswith(indent) else l for l in lines[i + 1:j]]
        i = j + 1


def examples(path):
    for first, block in console_blocks(path):
        k = 0
        if block and not block[0].startswith("$ "):
            raise SystemExit(f"{path}:{first}: a console block starts with a `$ ` command line")
        while k < len(block):
            line_no = first + k
            command = block[k][2:]
            k += 1
            # Continuation lines, then a heredoc's body.
            while command.endswith("\\") and k < len(block):
                command += "\n" + block[k]
                k += 1
            m = HEREDOC.search(command)
            if m:
                delimiter = m.group(2)
                while k < len(block):
                    command += "\n" + block[k]
                    k += 1
                    if block[k - 1].strip() == delimiter:
                        break
            expected = []
            while k < len(block) and not block[k].startswith("$ "):
                expected.append(block[k])
                k += 1
            yield Example(path, line_no, command, expected)


def line_matches(pattern, text):
    if ELLIPSIS not in pattern:
        return pattern == text
    parts = [re.escape(p) for p in pattern.split(ELLIPSIS)]
    return re.fullmatch(".*?".join(parts), text, re.DOTALL) is not None


def lines_match(expected, actual):
    """Whether `actual` matches `expected`, a line `…` standing for any number of lines."""
    memo = {}

    def match(i, j):
        if (i, j) in memo:
            return memo[(i, j)]
        if i == len(expected):
            result = j == len(actual)
        elif expected[i] == ELLIPSIS:
            result = any(match(i + 1, k) for k in range(j, len(actual) + 1))
        else:
            result = j < len(actual) and line_matches(expected[i], actual[j]) and match(i + 1, j + 1)
        memo[(i, j)] = result
        return result

    return match(0, 0)


def trimmed(lines):
    lines = [l.rstrip() for l in lines]
    while lines and lines[-1] == "":
        lines.pop()
    return lines


def run_file(path, airlock, source_dir):
    failures = []
    ran = 0
    with tempfile.TemporaryDirectory(prefix="airlock-doctest-") as root:
        home, state, work = (os.path.join(root, d) for d in ("home", "state", "work"))
        os.makedirs(home)
        os.makedirs(state, mode=0o700)
        os.makedirs(work)
        shutil.copytree(os.path.join(source_dir, "examples"), os.path.join(work, "examples"))
        env = {
            "PATH": os.path.dirname(os.path.abspath(airlock)) + ":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "HOME": home,
            "AIRLOCK_STATE_DIR": state,
            "LANG": "C.UTF-8",
            "TERM": "dumb",
        }
        for var in ("AIRLOCK_CACHE_DIR", "AIRLOCK_REQUIRE_ALL_TIERS"):
            if var in os.environ:
                env[var] = os.environ[var]
        status = 0
        for ex in examples(path):
            ran += 1
            script = f"(exit {status})\n{ex.command}"
            try:
                p = subprocess.run(["bash", "-c", script], cwd=work, env=env, stdin=subprocess.DEVNULL,
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=COMMAND_TIMEOUT)
                out = p.stdout.decode("utf-8", "backslashreplace")
                status = p.returncode
            except subprocess.TimeoutExpired:
                out, status = f"(timed out after {COMMAND_TIMEOUT} s)", 124
            actual = trimmed(out.split("\n"))
            expected = trimmed(ex.expected)
            if not lines_match(expected, actual):
                failures.append((ex, expected, actual, status))
    return ran, failures


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--airlock", required=True)
    ap.add_argument("source_dir")
    ap.add_argument("--no-unprivileged", action="store_true", help="as root, do not run again as uid 65534")
    ap.add_argument("files", nargs="*", help="default: README.md and docs/*.md")
    args = ap.parse_args()
    source_dir = os.path.abspath(args.source_dir)
    files = args.files or [os.path.join(source_dir, "README.md")] + sorted(
        os.path.join(source_dir, "docs", f) for f in os.listdir(os.path.join(source_dir, "docs")) if f.endswith(".md"))
    total = 0
    failed = 0
    for path in files:
        ran, failures = run_file(path, args.airlock, source_dir)
        total += ran
        rel = os.path.relpath(path, source_dir)
        print(f"doctest: {rel}: {ran} example(s), {len(failures)} failed")
        for ex, expected, actual, status in failures:
            failed += 1
            print(f"\n{rel}:{ex.line}: the output differs\n  $ " + ex.command.replace("\n", "\n    "))
            print("  the document shows:")
            for l in expected:
                print("    | " + l)
            print(f"  it printed (exit {status}):")
            for l in actual:
                print("    | " + l)
            print()
    who = "root" if os.geteuid() == 0 else f"uid {os.geteuid()}"
    print(f"doctest: {total} example(s) as {who}, {failed} failed")
    if failed:
        print("doctest: fix the example or the code; `…` matches what varies (see tests/doctest_runner.py)")
    status = 1 if failed else 0
    if os.geteuid() == 0 and not args.no_unprivileged:
        # The system python, not a per-user one (a pyenv shim under /root is not nobody's to run).
        python = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
        print("doctest: again as uid 65534", flush=True)
        again = subprocess.run(["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups", python,
                                os.path.abspath(__file__), "--airlock", os.path.abspath(args.airlock), source_dir] + files)
        status = status or again.returncode
    return status


if __name__ == "__main__":
    sys.exit(main())
