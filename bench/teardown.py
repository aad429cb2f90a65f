#!/usr/bin/env python3
"""Kill-to-verified teardown: starts `airlock run` on a tier with a command that leaves a
double-forked tree of `sleep 300`, sends airlock SIGTERM, and times until airlock has exited
(it exits only after the sandbox's processes are gone, its cgroups verified empty and removed).
Also checks from the host that no sleeper survived. Prints median and p90 over N rounds.
Usage: bench/teardown.py PATH-TO-AIRLOCK EXECUTOR [ROUNDS]"""
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

airlock, executor = sys.argv[1], sys.argv[2]
rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 30
marker = f"300.{os.getpid()}"
script = (f"(setsid sh -c 'sleep {marker} & sleep {marker} & wait' &) ; "
          f"sleep {marker} & sleep {marker} & echo ready; wait")
times, survivors = [], 0
with tempfile.TemporaryDirectory(prefix="airlock-teardown.") as tmp:
    policy = os.path.join(tmp, "policy.json")
    with open(policy, "w") as f:
        json.dump({"schema_version": "airlock.task_policy.v1", "executor": executor,
                   "limits": {"command_timeout_seconds": 60}}, f)
    for _ in range(rounds):
        p = subprocess.Popen([airlock, "--state-dir", os.path.join(tmp, "state"), "run", "-q",
                              "--policy", policy, "--", "/bin/sh", "-c", script],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        assert p.stdout.readline().strip() == "ready"
        time.sleep(0.05)
        t0 = time.perf_counter()
        p.send_signal(signal.SIGTERM)
        p.wait()
        times.append((time.perf_counter() - t0) * 1000)
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as c:
                    cmd = c.read()
                with open(f"/proc/{pid}/stat") as s:
                    state = s.read().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if marker.encode() in cmd and state != "Z":
                survivors += 1
                os.kill(int(pid), signal.SIGKILL)
times.sort()
print(f"{executor:<12} kill-to-verified median {statistics.median(times):7.2f} ms  "
      f"p90 {times[int(0.9 * (len(times) - 1))]:7.2f} ms  rounds {rounds}  survivors {survivors}")
sys.exit(1 if survivors else 0)
