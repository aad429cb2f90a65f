#!/usr/bin/env python3
"""Dispatch latency (issue 22): `/bin/true` run on another machine of the fleet with `airlock run
--machine`, against the same command run locally by `airlock run` and against plain `ssh HOST
/bin/true`, in one run, rounds interleaved, medians and ratios.

The far machine is an sshd test host on a loopback port (tests/fleet/fleet_ssh_test.py's FarHost),
so the network costs nothing and what is measured is ssh's own handshakes and airlock's work.
Needs root (sshd). Usage: bench/dispatch_bench.py AIRLOCK [ROUNDS]
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fleet"))
from fleet_ssh_test import FarHost  # noqa: E402


def main():
    airlock = os.path.abspath(sys.argv[1])
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 30
    if os.geteuid() != 0:
        sys.exit("dispatch_bench: sshd test hosts need root")
    with tempfile.TemporaryDirectory(prefix="airlock-dispatch-bench-") as tmp:
        key = os.path.join(tmp, "client_key")
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", key], check=True)
        far = FarHost(tmp, "far", key + ".pub")
        try:
            known = os.path.join(tmp, "known_hosts")
            with open(known, "w") as f:
                f.write(far.known_hosts_line())
            state = os.path.join(tmp, "state")
            al = [airlock, "--state-dir", state]
            ws = os.path.join(tmp, "ws")
            os.mkdir(ws)
            policy = os.path.join(tmp, "ns.json")
            with open(policy, "w") as f:
                json.dump({"schema_version": "airlock.task_policy.v1", "executor": "namespaces"}, f)
            for step in (["fleet", "init"],
                         ["machine", "add", "far", "--ssh", f"root@127.0.0.1:{far.port}", "--identity", key,
                          "--known-hosts", known, "--dir", far.install_dir],
                         ["machine", "install", "far"], ["machine", "probe", "far"]):
                subprocess.run(al + step, check=True, capture_output=True)
            variants = {
                "ssh": ["ssh", "-o", "BatchMode=yes", "-o", f"UserKnownHostsFile={known}", "-i", key,
                        "-p", str(far.port), "root@127.0.0.1", "/bin/true"],
                "airlock-local": al + ["run", "-q", "--policy", policy, "--workspace", ws, "--", "/bin/true"],
                "airlock-machine": al + ["run", "-q", "--machine", "far", "--policy", policy, "--workspace", ws,
                                         "--", "/bin/true"],
            }
            times = {k: [] for k in variants}
            for _ in range(rounds):
                for name, cmd in variants.items():
                    t0 = time.perf_counter()
                    p = subprocess.run(cmd, capture_output=True)
                    times[name].append((time.perf_counter() - t0) * 1000)
                    if p.returncode != 0:
                        sys.exit(f"{name} failed: {p.stderr.decode(errors='replace')}")
        finally:
            far.stop()
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"| variant | median ms | p10–p90 ms | vs ssh | vs local airlock |  ({rounds} rounds, interleaved)")
    print("|---|---|---|---|---|")
    for k, v in times.items():
        q = statistics.quantiles(v, n=10)
        print(f"| {k} | {med[k]:.1f} | {q[0]:.1f}–{q[-1]:.1f} | {med[k] / med['ssh']:.2f}× | "
              f"{med[k] / med['airlock-local']:.2f}× |")


if __name__ == "__main__":
    main()
