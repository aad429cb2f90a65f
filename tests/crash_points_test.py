#!/usr/bin/env python3
"""`airlock run` killed at each of its system calls, one kill per run.

A traced run lists the calls the airlock process makes (strace, its main thread). For each
(call, n) it is run again under `strace --inject=CALL:signal=KILL:when=n`: SIGKILL before the
n-th CALL, so every step between two calls is a crash point. After each kill:
  - the killed run's receipts file, if it has one, verifies or is repaired by the torn-tail rule
    (`airlock receipts repair`) into one that verifies;
  - the next run in the same state directory succeeds and sweeps what the killed one left: no
    session directory, no temporary file in the state directory, no cgroup named after the killed
    session, no mount under the state directory, no process started from it, no live seat in the
    run store.
Usage: crash_points_test.py AIRLOCK TIER   (exit 77: the tier, or strace, is missing here)
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

SKIP = 77


def main():
    airlock, tier = sys.argv[1], sys.argv[2]
    require_all = os.environ.get("AIRLOCK_REQUIRE_ALL_TIERS") == "1"

    def skip(why):
        print(f"SKIP: {why}")
        sys.exit(1 if require_all else SKIP)

    if not shutil.which("strace"):
        skip("strace is not installed (scripts/install-deps installs it)")
    doctor = json.loads(subprocess.run([airlock, "doctor", "--json"], capture_output=True, text=True).stdout)
    if not any(e["executor"] == tier and e["available"] for e in doctor["executors"]):
        skip(f"the {tier} tier is not available here")

    failures = []
    with tempfile.TemporaryDirectory(prefix="airlock-crash-") as tmp:
        state = os.path.join(tmp, "state")
        policy = os.path.join(tmp, "policy.json")
        with open(policy, "w") as f:
            json.dump({"schema_version": "airlock.task_policy.v1", "task_id": "crash", "executor": tier}, f)
        workspace = os.path.join(tmp, "workspace")  # empty: without it, run works on the current directory
        os.mkdir(workspace)
        run = [airlock, "--state-dir", state, "run", "-q", "--policy", policy, "--workspace", workspace, "--",
               "/bin/true"]
        receipts_dir = os.path.join(state, "receipts")

        def receipts():
            return set(os.listdir(receipts_dir)) if os.path.isdir(receipts_dir) else set()

        def must(cmd, what):
            p = subprocess.run(cmd, capture_output=True, text=True)
            if p.returncode != 0:
                raise SystemExit(f"{what} failed ({p.returncode}): {p.stderr.strip()}")
            return p

        must(run, "a first run")  # the facts cache and the store exist from here on, as in use
        trace = os.path.join(tmp, "trace")
        must(["strace", "-qq", "-o", trace] + run, "the traced run")
        counts, points = {}, []
        with open(trace) as f:
            for line in f:
                m = re.match(r"([a-z0-9_]+)\(", line)
                if m:
                    name = m.group(1)
                    counts[name] = counts.get(name, 0) + 1
                    points.append((name, counts[name]))
        if len(points) < 100:
            raise SystemExit(f"the traced run made only {len(points)} calls: is strace tracing it?")

        killed = 0
        for name, n in points:
            at = f"{name}#{n}"
            before = receipts()
            p = subprocess.run(["strace", "-qq", "-o", "/dev/null", "-e", f"trace={name}",
                                "-e", f"inject={name}:signal=KILL:when={n}"] + run,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            if p.returncode in (-9, 137):  # strace dies of the signal its tracee died of
                killed += 1
            elif p.returncode != 0:
                failures.append(f"{at}: the run neither finished nor was killed: exit {p.returncode}")
            new = receipts() - before
            for r in new:
                path = os.path.join(receipts_dir, r)
                if subprocess.run([airlock, "receipts", "verify", path], capture_output=True).returncode != 0:
                    rep = subprocess.run([airlock, "receipts", "repair", path], capture_output=True, text=True)
                    ver = subprocess.run([airlock, "receipts", "verify", path], capture_output=True, text=True)
                    if rep.returncode != 0 or ver.returncode != 0:
                        failures.append(f"{at}: {r} neither verifies nor is repaired: {rep.stderr.strip()} "
                                        f"{ver.stderr.strip()}")
            # The next run sweeps what the killed one left.
            nxt = subprocess.run(run, capture_output=True, text=True)
            if nxt.returncode != 0:
                failures.append(f"{at}: the next run failed: {nxt.stderr.strip()}")
            ids = {r.removesuffix(".jsonl") for r in new}
            failures += [f"{at}: {x}" for x in leftovers(state, ids, airlock)]
            if len(failures) > 20:
                break
        if killed < len(points) * 9 // 10:
            failures.append(f"only {killed} of {len(points)} runs were killed: the kill points missed")
        print(f"{tier}: {len(points)} crash points, {killed} runs killed, {len(failures)} failure(s)")

    for f in failures:
        print("FAIL", f)
    sys.exit(1 if failures else 0)


def leftovers(state, ids, airlock):
    out = []
    sessions = os.path.join(state, "sessions")
    left = os.listdir(sessions) if os.path.isdir(sessions) else []
    if left:
        out.append(f"session directories left: {left}")
        for d in left:
            subprocess.run(["rm", "-rf", os.path.join(sessions, d)])
    temps = [e for e in os.listdir(state) if ".tmp-" in e]
    if temps:
        out.append(f"temporary files left in the state directory: {temps}")
    for base in ("/sys/fs/cgroup", "/sys/fs/cgroup/unified"):
        for controller in [""] + (os.listdir(base) if os.path.isdir(base) else []):
            d = os.path.join(base, controller)
            try:
                names = os.listdir(d)
            except OSError:
                continue
            for name in names:
                if any(name.startswith(f"airlock-{i}-") for i in ids):
                    out.append(f"cgroup left: {os.path.join(d, name)}")
                    try:
                        os.rmdir(os.path.join(d, name))
                    except OSError:
                        pass
    with open("/proc/self/mountinfo") as f:
        if any(state in line for line in f):
            out.append("a mount under the state directory is left")
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read()
        except OSError:
            continue
        if state.encode() in cmdline and b"strace" not in cmdline.split(b"\0")[0]:
            shown = cmdline.replace(b"\0", b" ").decode(errors="replace")
            out.append(f"process {pid} left: {shown}")
            try:
                os.kill(int(pid), 9)
            except OSError:
                pass
    live = subprocess.run([airlock, "--state-dir", state, "runs", "list", "--live", "--json"],
                          capture_output=True, text=True)
    if live.returncode != 0 or json.loads(live.stdout)["runs"]:
        out.append(f"runs still live in the store: {live.stdout.strip()} {live.stderr.strip()}")
    return out


if __name__ == "__main__":
    main()
