#!/usr/bin/python3
"""make bench: every benchmark in one run, airlock beside its peers. Writes a table per benchmark
to OUT/latest.md and one PNG chart per benchmark (OUT/NAME.png), and prints the tables.

Usage: bench/bench.py [--build DIR] [--peers DIR] [--only NAME,...] [--quick] [--no-peers] [--out DIR] [--list]

Every benchmark is a function registered with @benchmark below; `--only` runs some of them alone.
A benchmark returns a Section: rows (one per variant: a median and a spread, or the reason it could
not run), the issue's targets judged on this run's figures, and notes. Nothing here compares
against a figure from another run: every ratio is to a baseline measured in the same run."""
import argparse
import http.client
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
PYTHON = "/usr/bin/python3"  # Debian's: a pyenv shim on PATH would time a shell script


# ---------------------------------------------------------------------------------------------
# What a benchmark returns.

@dataclass
class Row:
    name: str
    kind: str                      # baseline | airlock CLI | airlock library | peer | airlock
    median: float | None = None    # in the section's unit
    low: float | None = None       # the spread drawn and printed: p10 (or best repetition) ...
    high: float | None = None      # ... to p90 (or p99, or worst repetition); the section says which
    samples: list = field(default_factory=list)
    runs: int = 0
    unavailable: str = ""          # why this variant has no figure (never dropped silently)
    extra: dict = field(default_factory=dict)  # more columns, by header
    cpu: float | None = None       # spawn rows: median CPU ms per run


@dataclass
class Target:
    text: str
    measured: str
    met: bool | None  # None: could not be judged (a variant it needs did not run)


@dataclass
class Section:
    name: str
    title: str
    unit: str
    spread: str                    # what low..high means, e.g. "p10-p90"
    rows: list
    lower_is_better: bool = True
    ratios: bool = True            # add x baseline and x best peer columns
    targets: list = field(default_factory=list)
    notes: list = field(default_factory=list)
    log_scale: bool = False


BENCHMARKS = []  # (name, function), in run order


def benchmark(name):
    """Registers fn(ctx) -> Section under `name` (the PNG's name and `--only`'s)."""
    def add(fn):
        BENCHMARKS.append((name, fn))
        return fn
    return add


def pct(values, p):
    if not values:
        return None
    v = sorted(values)
    return v[min(len(v) - 1, int(p * (len(v) - 1) + 0.5))]


def log(msg):
    print(f"bench: {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# The run's context: binaries, a scratch directory, policies, and the peers.

@dataclass
class Peer:
    name: str
    binary: str
    prefix: list  # the command line before the sandboxed command (bench/README.md says what each confines)


class Ctx:
    def __init__(self, args):
        self.build = Path(args.build).resolve()
        self.quick = args.quick
        self.work = Path(tempfile.mkdtemp(prefix="airlock-bench."))
        self.work.chmod(0o755)  # the unprivileged runs execute copies from here
        for b in ("spawn_bench", "broker_bench", "ledger_bench", "store_bench"):
            if not (self.build / b).exists():
                sys.exit(f"bench: {self.build / b} is not built (make build)")
        self.airlock = str(self.work / "airlock")
        shutil.copy(self.build / "src" / "airlock", self.airlock)
        shutil.copy(self.build / "src" / "airlock-serve", self.work / "airlock-serve")  # `airlock serve` runs it
        self._servers = {}
        shutil.copy(self.build / "spawn_bench", self.work / "spawn_bench")
        # The container tier's init and check, beside both airlock and spawn_bench (the library's host).
        shutil.copy(self.build / "src" / "airlock-container-check", self.work / "airlock-container-check")
        self.state = self.work / "state"
        self.state.mkdir()
        # An empty workspace: without one, `airlock run` works on (copies) the current directory.
        self.workspace = self.work / "workspace"
        self.workspace.mkdir()
        self.workspace.chmod(0o755)
        self.policies = {}
        # The container tier's image: directories and links to /usr, which its policy binds read-only,
        # so the same programs run in it as on every tier (bench/README.md).
        self.image_dir = self.work / "image"
        for d in ("usr", "etc", "tmp", "work", "proc", "dev", "sys"):
            (self.image_dir / d).mkdir(parents=True)
        for link in ("bin", "sbin", "lib", "lib64"):
            (self.image_dir / link).symlink_to(f"usr/{link}")
        self.image, self.image_why = self.build_image(self.state)
        for tier in ("host", "landlock", "namespaces", "container"):
            p = self.work / f"{tier}.json"
            doc = {"schema_version": "airlock.task_policy.v1", "executor": tier}
            if tier == "container" and self.image:
                doc.update({"image": self.image, "read_only_paths": ["/usr"]})
            p.write_text(json.dumps(doc))
            self.policies[tier] = str(p)
        srt_settings = self.work / "srt-settings.json"
        # No network, no writes anywhere, reads as the host allows: the closest srt comes to
        # airlock's default (it has no setting for fewer reads without naming paths).
        srt_settings.write_text(json.dumps({
            "network": {"allowedDomains": [], "deniedDomains": []},
            "filesystem": {"denyRead": [], "allowWrite": [], "denyWrite": []}}))
        srt = str(Path(args.peers).resolve() / "node_modules" / ".bin" / "srt")
        self.peers = [
            Peer("bwrap", "/usr/bin/bwrap",
                 ["/usr/bin/bwrap", "--unshare-all", "--die-with-parent", "--new-session", "--ro-bind", "/", "/",
                  "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]),
            Peer("firejail", "/usr/bin/firejail",
                 ["/usr/bin/firejail", "--quiet", "--noprofile", "--net=none", "--private-tmp", "--private-dev",
                  "--caps.drop=all", "--nonewprivs", "--seccomp", "--read-only=/"]),
            Peer("runsc", "/usr/bin/runsc",
                 ["/usr/bin/runsc", "--network=none", "do"]),
            self.podman_peer(args.no_peers),
            Peer("srt", srt,
                 [srt, "--settings", str(srt_settings), "--"]),
        ]
        self._peer_status = {p.name: "left out (--no-peers)" for p in self.peers} if args.no_peers else {}

    def build_image(self, state, runas=()):
        """(reference, "") of the bench's image built into `state` by `airlock image build`, or
        ("", why not)."""
        r = subprocess.run([*runas, self.airlock, "--state-dir", str(state), "image", "build", "localhost/airlock-bench",
                            "--from-dir", str(self.image_dir), "--json"], capture_output=True, text=True)
        try:
            return json.loads(r.stdout)["reference"], ""
        except (json.JSONDecodeError, KeyError, TypeError):
            why = (r.stderr.strip().splitlines() or [f"exit {r.returncode}"])[-1]
            log(f"the container tier's image was not built: {why}")
            return "", f"airlock image build: {why}"

    def podman_peer(self, no_peers):
        """Podman run directly on the bench's image (its own store, imported from the same directory),
        with the runtime airlock's probe chose and the confinement flags airlock passes it."""
        podman = "/usr/bin/podman"
        # Its own store, run and temporary directories: nothing of the host's engine is touched.
        store, runroot, tmp = self.work / "podman-store", self.work / "pr", self.work / "pt"
        base = [podman, "--root", str(store), "--runroot", str(runroot), "--tmpdir", str(tmp),
                "--storage-driver", "overlay", "--cgroup-manager", "cgroupfs", "--events-backend", "none"]
        self._podman = base if os.access(podman, os.X_OK) and not no_peers else None
        runtime = "runc"
        if self._podman:
            facts = subprocess.run([self.airlock, "--state-dir", str(self.state), "image", "list", "--json"],
                                   capture_output=True, text=True)
            try:
                runtime = json.loads(facts.stdout).get("runtime") or runtime
            except json.JSONDecodeError:
                pass
            tar = subprocess.Popen(["tar", "-C", str(self.image_dir), "-c", "."], stdout=subprocess.PIPE)
            imported = subprocess.run([*base, "import", "-", "localhost/airlock-bench-peer"], stdin=tar.stdout,
                                      capture_output=True, text=True)
            tar.wait()
            if imported.returncode != 0:
                log(f"podman import failed: {imported.stderr.strip()[-300:]}")
        return Peer("podman", podman,
                    [*base, "run", "--rm", "--pull", "never", "--runtime", runtime, "--network", "none", "--read-only",
                     "--cap-drop", "all", "--security-opt", "no-new-privileges", "--ulimit", "nofile=1024:1024",
                     "--ulimit", "nproc=4096:4096", "--volume", "/usr:/usr:ro", "localhost/airlock-bench-peer"])

    def close(self):
        if self._podman:
            # Never `system reset`: it clears the host engine's directories and networks too.
            subprocess.run([*self._podman, "rm", "--all", "--force"], capture_output=True)
            subprocess.run([*self._podman, "rmi", "--all", "--force"], capture_output=True)
            subprocess.run(["umount", "--recursive", "--lazy", str(self.work / "podman-store" / "overlay")],
                           capture_output=True)
        for proc, _ in self._servers.values():
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        shutil.rmtree(self.work, ignore_errors=True)

    def served(self, tier, cmd):
        """spawn_bench's serve variant: a run_tool request running `cmd` in a session of a running
        `airlock serve` (started once, its own state directory), or (None, why not)."""
        key = "serve"
        if key not in self._servers:
            state = self.work / "serve-state"
            state.mkdir()
            sock = self.work / "serve.sock"
            proc = subprocess.Popen([self.airlock, "--profile", "development", "--state-dir", str(state), "serve",
                                     "--socket", str(sock)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            line = proc.stdout.readline()
            self._servers[key] = (proc, str(sock) if line else None)
            if not line:
                self._servers[key] = (proc, None)
                return None, "airlock serve did not start: " + proc.stderr.read()[:300]
        proc, sock = self._servers[key]
        if not sock:
            return None, "airlock serve did not start"
        name = f"{tier}-{abs(hash(tuple(cmd))) % 10**8}"
        policy = self.work / f"serve-{name}.json"
        policy.write_text(json.dumps({"schema_version": "airlock.task_policy.v1", "executor": tier,
                                      "workspace": str(self.workspace),
                                      "tools": [{"name": "cmd", "argv": list(cmd)}],
                                      # every round's request, for as long as the benchmark runs
                                      "limits": {"max_actions_per_minute": 1000000,
                                                 "session_budget_seconds": 86400}}))
        return [f"serve:{sock}:{policy}", "cmd"], ""

    def rounds(self, full):
        return max(3, full // 40) if self.quick else full

    def cli(self, tier, cmd, state=None):
        return [self.airlock, "--profile", "development", "--state-dir", str(state or self.state), "run", "-q",
                "--policy", self.policies[tier], "--workspace", str(self.workspace), "--", *cmd]

    def tier_refusal(self, tier, runas=(), state=None):
        """Why `tier` cannot run here for this identity ("" when it can): airlock's own plan says."""
        r = subprocess.run([*runas, self.airlock, "--profile", "development", "--state-dir", str(state or self.state),
                            "plan", "--policy", self.policies[tier]], capture_output=True, text=True)
        return "" if r.returncode == 0 else (r.stderr.strip().splitlines() or [f"exit {r.returncode}"])[0]

    def peer_status(self, peer):
        """"" when `peer` runs /bin/true here, else the named reason it does not."""
        if peer.name not in self._peer_status:
            if not os.access(peer.binary, os.X_OK):
                why = f"not installed ({peer.binary}; `make bench` installs it: scripts/install-deps --bench)"
            else:
                try:
                    r = subprocess.run([*peer.prefix, "/bin/true"], capture_output=True, text=True, timeout=120,
                                       cwd=self.work)
                    lines = [l for l in (r.stderr + r.stdout).splitlines() if l.strip()]
                    why = "" if r.returncode == 0 else f"exit {r.returncode}: {(lines or ['no output'])[-1]}"
                except subprocess.TimeoutExpired:
                    why = "did not finish /bin/true within 120 s"
            self._peer_status[peer.name] = why
            if why:
                log(f"{peer.name} cannot run here: {why}")
        return self._peer_status[peer.name]


# ---------------------------------------------------------------------------------------------
# Spawn cost.

def spawn_rows(ctx, variants, unavailable, runas=(), rounds=200, budget=30):
    """Runs spawn_bench over `variants` [(name, kind, command list)] interleaved; rows in order,
    the unavailable [(name, kind, reason)] after them."""
    specs = []
    for name, _, cmd in variants:
        if any(" " in a for a in cmd):
            raise SystemExit(f"bench: {name}: spawn_bench splits commands on spaces: {cmd}")
        specs.append(f"{name}={' '.join(cmd)}")
    state = ctx.work / f"lib-state-{os.getpid()}-{len(specs)}-{time.monotonic_ns()}"
    state.mkdir()
    if runas:
        os.chown(state, 65534, 65534)
    # The library's container runs need the image in this state directory, as the CLI's in its own:
    # built here (each import has its own digest) and named by a policy of this state's.
    lib_container = f"lib:{ctx.policies['container']}"
    if any(cmd[0] == lib_container for _, _, cmd in variants):
        image, _ = ctx.build_image(state, runas)
        policy = state.with_suffix(".container.json")
        policy.write_text(json.dumps({**json.loads(Path(ctx.policies["container"]).read_text()), "image": image}))
        specs = [spec.replace(lib_container, f"lib:{policy}", 1) for spec in specs]
    argv = [*runas, str(ctx.work / "spawn_bench"), "--rounds", str(ctx.rounds(rounds)),
            "--warmup", "3" if ctx.quick else "10", "--budget", str(budget / 10 if ctx.quick else budget),
            "--min-runs", "3" if ctx.quick else "15", "--state-dir", str(state), "--json", *specs]
    # Every variant gets the same small environment: a peer or a plain run must not read more of
    # it (a pyenv, site directories) than airlock, which replaces it with an allow-list.
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": str(ctx.work), "LANG": "C.UTF-8"}
    r = subprocess.run(argv, capture_output=True, text=True, cwd=ctx.work, env=env)
    try:
        data = json.loads(r.stdout)
    except json.JSONDecodeError:
        raise SystemExit(f"bench: spawn_bench failed (exit {r.returncode}): {r.stderr.strip()}")
    rows = []
    for (name, kind, cmd), d in zip(variants, data):
        row = Row(name, kind, d["median_ms"], d["p10_ms"], d["p90_ms"], d["samples_ms"], d["runs"],
                  extra={"command": " ".join(cmd)})
        if "teardown_median_ms" in d:
            row.extra["of which teardown ms"] = f"{d['teardown_median_ms']:.2f}"
        # The cause beside the effect: CPU (user + system, the command and all it waited for) and
        # minor page faults per run, medians.
        row.cpu = d.get("cpu_median_ms")
        row.extra["CPU ms"] = f"{d['cpu_median_ms']:.2f}"
        row.extra["page faults"] = f"{d['faults_median']:.0f}"
        if d.get("unavailable"):
            row.unavailable = d["unavailable"]
        elif d["failures"]:
            row.unavailable = f"{d['failures']} of its runs failed: {d['last_failure']}"
        rows.append(row)
    rows += [Row(name, kind, unavailable=why) for name, kind, why in unavailable]
    return rows


def spawn_variants(ctx, cmd, tiers, peers, runas=(), state=None):
    """([(name, kind, command)], [(name, kind, reason)]): each tier through the CLI and through the
    library (a tier this identity cannot have, with airlock's refusal), then each peer."""
    variants, unavailable = [], []
    for tier in tiers:
        why = ctx.image_why if tier == "container" and ctx.image_why else ctx.tier_refusal(tier, runas, state)
        for via, kind, command in (("cli", "airlock CLI", ctx.cli(tier, cmd, state)),
                                   ("lib", "airlock library", [f"lib:{ctx.policies[tier]}", *cmd])):
            if why:
                unavailable.append((f"airlock-{tier}-{via}", kind, why))
            else:
                variants.append((f"airlock-{tier}-{via}", kind, command))
    for tier in [t for t in ("landlock", "namespaces") if t in tiers and not runas]:
        # The same tier with each sandbox built ahead: through the library, and (namespaces) as a
        # client of `airlock serve` (request to exit status), as an agent's session runs its commands.
        why = ctx.tier_refusal(tier, runas, state)
        rows = [(f"airlock-{tier}-warm", "airlock library", [f"warm:{ctx.policies[tier]}", *cmd], why)]
        if tier == "namespaces":
            served, serve_why = ctx.served(tier, cmd) if not why else (None, why)
            rows.append((f"airlock-{tier}-serve", "airlock serve", served, serve_why))
        for name, kind, command, no in rows:
            if no:
                unavailable.append((name, kind, no))
            else:
                variants.append((name, kind, command))
    for peer in peers:
        why = ctx.peer_status(peer)
        if why:
            unavailable.append((peer.name, "peer", why))
        else:
            variants.append((peer.name, "peer", [*peer.prefix, *cmd]))
    return variants, unavailable


def spawn_section(ctx, name, cmd, title):
    variants, unavailable = spawn_variants(ctx, cmd, ("host", "landlock", "namespaces", "container"), ctx.peers)
    variants = [("plain", "baseline", cmd), ("plain-fork", "baseline", ["fork:", *cmd])] + variants
    log(f"{name}: {len(variants)} variants interleaved")
    rows = spawn_rows(ctx, variants, unavailable)
    s = Section(name, title, "ms", "p10-p90", rows, log_scale=True)
    by = {r.name: r for r in rows if not r.unavailable}
    plain = by.get("plain")

    def ratio_target(text, variant, limit, base, inclusive=False):
        v = by.get(variant)
        if not v or not base:
            return Target(text, f"{variant} or its baseline did not run", None)
        x = v.median / base.median
        return Target(text, f"{x:.2f}x ({v.median:.2f} ms vs {base.name} {base.median:.2f} ms)",
                      x <= limit if inclusive else x < limit)

    def cpu_target(text, variant, limit, base):
        v, b = by.get(variant), base
        if not v or not b or v.cpu is None or not b.cpu:
            return Target(text, f"{variant} or its baseline did not run", None)
        x = v.cpu / b.cpu
        return Target(text, f"{x:.2f}x ({v.cpu:.2f} ms CPU vs {b.name} {b.cpu:.2f} ms)", x <= limit)

    if cmd == ["/bin/true"]:
        s.targets.append(ratio_target("Landlock tier via the CLI: at most 3x plain /bin/true", "airlock-landlock-cli",
                                      3.0, plain, inclusive=True))
        s.targets.append(ratio_target("Landlock tier via the library: at most 1.3x a plain fork+exec",
                                      "airlock-landlock-lib", 1.3, by.get("plain-fork"), inclusive=True))
    s.targets.append(ratio_target(f"Namespaces tier via the CLI: at most bubblewrap's wall time ({' '.join(cmd)})",
                                  "airlock-namespaces-cli", 1.0, by.get("bwrap"), inclusive=True))
    s.targets.append(cpu_target(f"Namespaces tier via the CLI: at most 2x bubblewrap's CPU time ({' '.join(cmd)})",
                                "airlock-namespaces-cli", 2.0, by.get("bwrap")))
    s.targets.append(ratio_target(f"Namespaces tier, sandboxes built ahead, through `airlock serve` (request to exit "
                                  f"status): at most 0.5x bubblewrap's wall time ({' '.join(cmd)})",
                                  "airlock-namespaces-serve", 0.5, by.get("bwrap"), inclusive=True))
    s.notes.append("plain: spawn_bench's own posix_spawn+waitpid of the command (vfork: no page tables copied); "
                   "plain-fork: fork+exec+waitpid, a copy of spawn_bench's process as the supervisor is a copy of "
                   "its host's. *-cli: a whole `airlock run` "
                   "(policy, plan, session view, receipts, store seat, supervisor, teardown). *-lib: "
                   "Executor::run on an executor opened once, as a C++ host holds it. -warm: the same with each "
                   "run's sandbox built ahead (Executor::keep_warm), between runs. -serve: a client's run_tool "
                   "request to a running `airlock serve` over its unix socket, in one session whose sandboxes are "
                   "built ahead, timed to the answer with the exit status (its CPU: the server's and its "
                   "sandboxes', per run on average). Peers: bench/README.md "
                   "gives each command line and what it confines.")
    # The container tier has no target of its own: its cost is the engine's, so it is shown beside
    # Podman run directly on the same image, in this run.
    container, podman = by.get("airlock-container-cli"), by.get("podman")
    if container and podman:
        s.notes.append(f"container tier via the CLI: {container.median / podman.median:.2f}x `podman run` directly "
                       f"({container.median:.1f} ms vs {podman.median:.1f} ms; each a fresh container, removed after)")
    return s


@benchmark("spawn-true")
def spawn_true(ctx):
    return spawn_section(ctx, "spawn-true", ["/bin/true"], "Spawn cost: /bin/true")


@benchmark("spawn-python")
def spawn_python(ctx):
    return spawn_section(ctx, "spawn-python", [PYTHON, "-c", "pass"], "Spawn cost: python3 -c pass")


@benchmark("spawn-unprivileged")
def spawn_unprivileged(ctx):
    runas = ("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups")
    if os.getuid() != 0:
        runas = ()  # already unprivileged: the same measurement as the user running it
    cmd = ["/bin/true"]
    state = ctx.work / "state-nobody"
    state.mkdir(exist_ok=True)
    if runas:
        os.chown(state, 65534, 65534)
    variants, unavailable = spawn_variants(ctx, cmd, ("landlock", "namespaces"), ctx.peers[:1], runas, state)
    variants = [("plain", "baseline", cmd)] + variants
    log(f"spawn-unprivileged: {len(variants)} variants interleaved as uid 65534")
    rows = spawn_rows(ctx, variants, unavailable, runas=runas)
    s = Section("spawn-unprivileged", "Spawn cost as an unprivileged user (uid 65534): /bin/true", "ms",
                "p10-p90", rows, log_scale=True)
    s.notes.append("As root the Landlock tier also creates, joins and removes a pids cgroup per run (RLIMIT_NPROC "
                   "does not bind uid 0); an unprivileged user gets RLIMIT_NPROC instead. A tier this identity "
                   "cannot have is listed with airlock's own refusal.")
    return s


# ---------------------------------------------------------------------------------------------
# Teardown and memory: a sandbox started, observed from the host, and ended.

def proc_table():
    """{pid: (ppid, state, cmdline bytes)} for every process on the host."""
    out = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                rest = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{d}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        out[int(d)] = (int(rest[1]), rest[0], cmd)
    return out


def tree(root, table):
    pids, frontier = {root}, [root]
    while frontier:
        p = frontier.pop()
        for c, (pp, _, _) in table.items():
            if pp == p and c not in pids:
                pids.add(c)
                frontier.append(c)
    return pids


def sleeper(cmd, marker):
    """Whether a /proc cmdline is one of the benchmark's `sleep MARKER` (a launcher's own command
    line may hold the marker too)."""
    return cmd.split(b"\0")[:2] == [b"sleep", marker.encode()]


def running(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def sandbox_variants(ctx):
    """[(name, kind, prefix or None, reason)] for the sandboxes a host-side observer can start."""
    out = []
    for tier in ("landlock", "namespaces"):
        why = ctx.tier_refusal(tier)
        out.append((f"airlock-{tier}", "airlock CLI", None if why else ctx.cli(tier, []), why))
    for peer in ctx.peers:
        why = ctx.peer_status(peer)
        out.append((peer.name, "peer", None if why else peer.prefix, why))
    return out


def start_sandbox(prefix, script, ready_timeout=30):
    """Starts prefix + sh -c script, which prints "ready" once its tree is up; returns the Popen."""
    p = subprocess.Popen([*prefix, "/bin/sh", "-c", script], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                         stdin=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + ready_timeout
    line = b""
    os.set_blocking(p.stdout.fileno(), False)
    while time.monotonic() < deadline and b"ready" not in line:
        try:
            chunk = os.read(p.stdout.fileno(), 64)
        except BlockingIOError:
            chunk = None
        if chunk == b"":
            break
        if chunk:
            line += chunk
        else:
            time.sleep(0.005)
    if b"ready" not in line:
        end(p)
        return None
    return p


def each_sandbox(label, variants, rounds, script, failed):
    """Interleaved rounds over the sandbox variants that can run: yields (name, marker, Popen) for
    each one started with `script` (its {m} a marker unique to the round) that reported ready. The
    caller ends it. One that never reports ready is left out of later rounds, its reason in `failed`."""
    log(f"{label}: {rounds} interleaved rounds")
    for r in range(rounds):
        for name, _, prefix, why in variants:
            if why or failed[name]:
                continue
            marker = f"300.{os.getpid()}{r}"
            p = start_sandbox(prefix, script.format(m=marker))
            if p is None:
                failed[name] = "the sandboxed command never reported ready"
                continue
            yield name, marker, p


def end(p):
    """Ends a sandbox the way its user would: SIGTERM, so that it can remove what it made (airlock's
    cgroups and session directory), then SIGKILL to its process group after 10 s."""
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    p.wait()


@benchmark("teardown")
def teardown(ctx):
    variants = sandbox_variants(ctx)
    times = {v[0]: [] for v in variants}
    survivors = {v[0]: 0 for v in variants}
    failed = {v[0]: "" for v in variants}
    # A forked tree: two sleepers in the command's group, two more escaped with setsid.
    script = ("(setsid sh -c 'sleep {m} & sleep {m} & wait' &) ; "
              "sleep {m} & sleep {m} & echo ready; wait")
    for name, marker, p in each_sandbox("teardown", variants, ctx.rounds(30), script, failed):
        time.sleep(0.05)
        table = proc_table()
        watched = tree(p.pid, table) | {pid for pid, (_, _, c) in table.items() if sleeper(c, marker)}
        watched.discard(p.pid)
        t0 = time.perf_counter()
        p.send_signal(signal.SIGTERM)
        deadline = t0 + 10
        while time.perf_counter() < deadline:
            if p.poll() is not None and not any(running(pid) for pid in watched):
                break
            time.sleep(0.0002)
        ms = (time.perf_counter() - t0) * 1000
        left = [pid for pid in watched if running(pid)]
        left += [pid for pid, (_, st, c) in proc_table().items()
                 if sleeper(c, marker) and st != "Z" and pid not in left]
        if left or p.poll() is None:
            survivors[name] += len(left)
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        else:
            times[name].append(ms)
        end(p)
    rows = []
    for name, kind, prefix, why in variants:
        t = times[name]
        why = why or failed[name]
        if survivors[name]:
            why = (why + "; " if why else "") + f"{survivors[name]} process(es) outlived the kill by 10 s"
        row = Row(name, kind, statistics.median(t) if t else None, pct(t, 0.1), pct(t, 0.9), t, len(t),
                  unavailable="" if t else why, extra={"survivors": survivors[name]})
        rows.append(row)
    s = Section("teardown", "Kill to verified-empty: a sandbox holding a forked tree", "ms", "p10-p90", rows,
                log_scale=True)
    s.notes.append("The sandbox runs `sh -c` with four `sleep`s, two of them escaped with `setsid` after a double "
                   "fork. Timed from SIGTERM to the sandbox's launcher until the launcher has exited and none of "
                   "the processes of its tree (taken from /proc just before the kill) nor any sleeper is left "
                   "running. airlock exits only after its cgroups are verified empty and removed. A variant that "
                   "left a process running 10 s after the kill is reported with its survivors, not timed.")
    best = {r.name: r for r in rows if not r.unavailable}
    for tier in ("landlock", "namespaces"):
        r = best.get(f"airlock-{tier}")
        s.targets.append(Target(f"Kill to verified-empty ({tier} tier): under 50 ms median",
                                f"{r.median:.1f} ms" if r else "did not run", r.median < 50 if r else None))
    return s


def smaps(pid):
    """(Pss KiB, private KiB, VmHWM KiB) of one process, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            roll = dict(re.findall(r"^(\w+):\s+(\d+) kB", f.read(), re.M))
        with open(f"/proc/{pid}/status") as f:
            hwm = int(re.search(r"^VmHWM:\s+(\d+) kB", f.read(), re.M).group(1))
    except (OSError, AttributeError):
        return None
    return int(roll.get("Pss", 0)), int(roll.get("Private_Clean", 0)) + int(roll.get("Private_Dirty", 0)), hwm


@benchmark("memory")
def memory(ctx):
    variants = sandbox_variants(ctx)
    got = {v[0]: [] for v in variants}
    failed = {v[0]: "" for v in variants}
    for name, marker, p in each_sandbox("memory", variants, ctx.rounds(8), "echo ready; exec sleep {m}", failed):
        time.sleep(0.3)  # let the launcher settle (node's heap, gVisor's sentry)
        table = proc_table()
        procs = [pid for pid in tree(p.pid, table) if not sleeper(table[pid][2], marker)]
        figures = [m for m in (smaps(pid) for pid in procs) if m]
        sup = [smaps(pid) for pid in procs if table[pid][0] == p.pid]  # the launcher's own children
        got[name].append({"pss": sum(m[0] for m in figures) / 1024, "uss": sum(m[1] for m in figures) / 1024,
                          "hwm": max(m[2] for m in figures) / 1024, "procs": len(figures),
                          "child_hwm": max((m[2] for m in sup if m), default=0) / 1024,
                          "child_pss": sum(m[0] for m in sup if m) / 1024})
        end(p)
    rows = []
    for name, kind, prefix, why in variants:
        g = got[name]
        if not g:
            rows.append(Row(name, kind, unavailable=why or failed[name]))
            continue
        pss = [x["pss"] for x in g]
        med = lambda k: statistics.median(x[k] for x in g)  # noqa: E731
        rows.append(Row(name, kind, statistics.median(pss), min(pss), max(pss), pss, len(g),
                        extra={"processes": f"{med('procs'):.0f}", "private MiB": f"{med('uss'):.1f}",
                               "largest peak RSS MiB": f"{med('hwm'):.1f}",
                               "its children: peak RSS MiB": f"{med('child_hwm'):.1f}",
                               "its children: PSS MiB": f"{med('child_pss'):.1f}"}))
    s = Section("memory", "Memory per sandbox: every process of the sandbox but the command itself", "MiB",
                "min-max", rows, ratios=False, log_scale=True)
    s.notes.append("One sandbox at a time runs `sleep`; the launcher and everything it started except that "
                   "sleep are summed: PSS (shared pages divided among their users), private pages, and the "
                   "largest peak RSS (VmHWM) of one process. `its children` are the launcher's direct children: "
                   "for airlock, the supervisor, a clone of `airlock run` that never execs, so its RSS is mostly "
                   "pages shared with its parent and PSS is the honest figure. For gVisor the command itself "
                   "runs inside the sentry and is counted with it.")
    for tier in ("landlock", "namespaces"):
        why = ctx.tier_refusal(tier)
        name = f"airlock-serve idle session ({tier})"
        if why:
            rows.append(Row(name, "airlock serve", unavailable=why))
            continue
        per, detail = idle_session_memory(ctx, tier, n=4 if ctx.quick else 16)
        if per is None:
            rows.append(Row(name, "airlock serve", unavailable=detail))
            continue
        rows.append(Row(name, "airlock serve", statistics.median(per), min(per), max(per), per, len(per), extra=detail))
    s.notes.append("`airlock serve idle session`: what one more open session adds to the server's whole process tree "
                   "(PSS), the server's own heap and each session's sandbox built ahead for its next command "
                   "(supervisor and init, waiting) included: a fresh server with no session is measured, then with "
                   "N sessions open and idle; (after - before) / N, one figure per repetition.")
    return s


class UnixHTTP(http.client.HTTPConnection):
    def __init__(self, path):
        super().__init__("localhost", timeout=120)
        self.unix_path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.connect(self.unix_path)


def unix_call(sock, method, path, body=None):
    c = UnixHTTP(sock)
    c.request(method, path, json.dumps(body) if body is not None else None, {"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, json.loads(data) if data else None


def tree_pss(root):
    """PSS in KiB of a process and every descendant."""
    table = proc_table()
    return sum(m[0] for m in (smaps(pid) for pid in tree(root, table)) if m)


def idle_session_memory(ctx, tier, n, reps=3):
    """([MiB per idle session, one per repetition], extra) or (None, why): a fresh `airlock serve`
    measured empty, then with n sessions of `tier` open and idle."""
    per, procs = [], []
    for rep in range(reps):
        state = ctx.work / f"idle-{tier}-{rep}"
        state.mkdir()
        sock = str(ctx.work / f"idle-{tier}-{rep}.sock")
        proc = subprocess.Popen([ctx.airlock, "--state-dir", str(state), "serve", "--socket", sock],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            if not proc.stdout.readline():
                return None, "airlock serve did not start: " + proc.stderr.read()[:300]
            time.sleep(0.5)
            before = tree_pss(proc.pid)
            ids = []
            for _ in range(n):
                status, opened = unix_call(sock, "POST", "/v1/sessions", {
                    "schema_version": "airlock.task_policy.v1", "executor": tier, "workspace": str(ctx.workspace)})
                if status != 201:
                    return None, f"a session did not open: {status} {opened}"
                ids.append(opened["session"])
            time.sleep(2)  # each session's sandbox for its next command is built in the background
            after = tree_pss(proc.pid)
            procs.append(len(tree(proc.pid, proc_table())))
            per.append((after - before) / n / 1024)
            for sid in ids:
                unix_call(sock, "POST", f"/v1/sessions/{sid}/close", {})
        finally:
            proc.terminate()
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            shutil.rmtree(state, ignore_errors=True)
    return per, {"sessions": str(n), "processes (server tree, sessions open)": f"{statistics.median(procs):.0f}"}


# ---------------------------------------------------------------------------------------------
# The hot paths (Google Benchmark binaries, JSON output).

def gbench(ctx, binary, *flags, wrapper=()):
    out = ctx.work / f"{Path(binary).name}.json"
    r = subprocess.run([*wrapper, str(ctx.build / binary), f"--benchmark_out={out}", "--benchmark_out_format=json",
                        "--benchmark_format=console", *flags], capture_output=True, text=True, cwd=ctx.work)
    if not out.exists():
        raise SystemExit(f"bench: {binary} failed (exit {r.returncode}): {r.stderr.strip()[-500:]}")
    return json.loads(out.read_text())["benchmarks"]


def by_run(benchmarks):
    """{run_name: [iteration rows]} without the aggregates Google Benchmark adds."""
    runs = {}
    for b in benchmarks:
        if b.get("run_type") == "aggregate":
            continue
        runs.setdefault(b["run_name"], []).append(b)
    return runs


@benchmark("broker")
def broker(ctx):
    runs = by_run(gbench(ctx, "broker_bench"))
    names = {"BM_PlainRead": ("plain open/fstat/read/close", "baseline"),
             "BM_SessionReadFile": ("session read_file + receipt", "airlock library"),
             "BM_SessionReadFileRefused": ("session read_file refused (..) + receipt", "airlock library")}
    rows = []
    for key, (label, kind) in names.items():
        reps = next((v for k, v in runs.items() if k.startswith(key + "/") or k == key), [])
        if not reps:
            rows.append(Row(label, kind, unavailable="not in broker_bench's output"))
            continue
        p50 = statistics.median(b["p50_us"] for b in reps)
        p99 = statistics.median(b["p99_us"] for b in reps)
        rows.append(Row(label, kind, p50, p50, p99, runs=sum(int(b["iterations"]) for b in reps),
                        extra={"p99 µs": f"{p99:.2f}", "calls/s": f"{statistics.median(b['per_s'] for b in reps):,.0f}"}))
    s = Section("broker", "Broker read_file decision with its receipt, in process (200-byte file)", "µs",
                "p50-p99 (median of repetitions)", rows)
    ok = next((r for r in rows if r.name.startswith("session read_file +") and not r.unavailable), None)
    s.targets.append(Target("Broker read_file decision with its receipt: p99 under 100 µs in process",
                            f"p99 {ok.high:.1f} µs" if ok else "did not run", ok.high < 100 if ok else None))
    s.notes.append("Every call is timed; 3 repetitions of 100,000 calls each. The receipt is "
                   "appended to the session's hash-chained JSONL file on each call.")
    s.notes.append("Over the server: not measured yet (`airlock serve` is not in this harness yet).")
    return s


@benchmark("ledger")
def ledger(ctx):
    reps = 2 if ctx.quick else 5
    runs = by_run(gbench(ctx, "ledger_bench", "--benchmark_filter=BM_AppendIntentOutcome",
                         f"--benchmark_repetitions={reps}", "--benchmark_min_time=0.05" if ctx.quick else
                         "--benchmark_min_time=0.5"))
    rows = []
    for fsync, label, kind in ((0, "intent + outcome, no fsync", "airlock library"),
                               (1, "intent + outcome, fdatasync per intent", "airlock library")):
        reps_ = runs.get(f"BM_AppendIntentOutcome/fsync:{fsync}/real_time", [])
        if not reps_:
            rows.append(Row(label, kind, unavailable="not in ledger_bench's output"))
            continue
        us = [b["real_time"] for b in reps_]  # microseconds per iteration (Unit kMicrosecond)
        rows.append(Row(label, kind, statistics.median(us), min(us), max(us), us, len(us),
                        extra={"appends/s": f"{1e6 / statistics.median(us):,.0f}"}))
    s = Section("ledger", "Effect ledger: one intent and its outcome appended", "µs",
                "best-worst repetition", rows, ratios=False, log_scale=True)
    s.notes.append(f"{reps} repetitions; wall time (fsync cost is waiting, not CPU), on the file system of $TMPDIR. "
                   "The 1,000,000-row scan is left out of `make bench` (it writes 1.4 GB): "
                   "`build/ledger_bench --benchmark_filter=Scan`.")
    return s


@benchmark("store")
def store(ctx):
    flags = ["--benchmark_filter=BM_sqlite/threads:1$"] if ctx.quick else []
    runs = by_run(gbench(ctx, "store_bench", *flags, wrapper=(str(HERE / "store_bench.sh"),)))
    rows = []
    for name, reps in runs.items():
        b = reps[0]
        backend, threads = re.match(r"BM_(\w+)/.*threads:(\d+)", name).groups()
        label = f"{'SQLite' if backend == 'sqlite' else 'PostgreSQL'}, {threads} thread(s)"
        if b.get("error_occurred"):
            rows.append(Row(label, "airlock library", unavailable=b.get("error_message", "error")))
            continue
        rows.append(Row(label, "airlock library", b["p50_us"], b["p50_us"], b["p99_us"], runs=int(b["iterations"]),
                        extra={"p99 µs": f"{b['p99_us']:.0f}", "reservations/s": f"{b['reservations_per_s']:,.0f}",
                               "admitted/refused": f"{b['admitted']:.0f}/{b['refused']:.0f}"}))
    s = Section("store", "Capacity reservations under contention: reserve a seat in a slot of 3, release it",
                "µs", "p50-p99", rows, ratios=False, log_scale=True)
    s.notes.append("Each thread has its own connection; SQLite is a file in a temp dir, PostgreSQL a throwaway "
                   "cluster bench/store_bench.sh starts with scripts/pg-test-cluster.")
    return s


# ---------------------------------------------------------------------------------------------
# A whole agent run: the real CLI through one scripted task.

AGENT_TASKS = {  # profile: (executable, arguments, its own base-URL arguments for the unconfined run)
    "claude-code": ("claude", ["-p", "do the task", "--allowedTools", "Bash"], lambda url: []),
    "codex": ("codex", ["exec", "--skip-git-repo-check", "-c", "analytics.enabled=false", "-c",
                        "features.plugins=false", "do the task"],
              lambda url: ["-c", "model_providers.direct.name=direct", "-c", f"model_providers.direct.base_url={url}/v1",
                           "-c", "model_providers.direct.env_key=OPENAI_API_KEY", "-c",
                           "model_providers.direct.wire_api=responses", "-c", "model_provider=direct", "-c",
                           'sandbox_mode="danger-full-access"']),
}


def start_model(ctx, name, key, tls):
    """tests/support/scripted_model.py on loopback; (Popen, port)."""
    d = ctx.work / f"model-{name}"
    d.mkdir()
    cmd = [PYTHON, str(REPO / "tests" / "support" / "scripted_model.py"), "--port", "0", "--port-file",
           str(d / "port"), "--log", str(d / "log"), "--expect-key", key]
    if tls:
        cmd += ["--tls-cert", str(ctx.work / "cert.pem"), "--tls-key", str(ctx.work / "key.pem")]
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(200):
        if (d / "port").exists() and (d / "port").read_text().strip():
            return p, int((d / "port").read_text())
        time.sleep(0.05)
    p.kill()
    raise RuntimeError("the scripted model server did not start")


@benchmark("agent-task")
def agent_task(ctx):
    clis = REPO / ".cache" / "agent-clis"
    rows = []
    s = Section("agent-task", "A real agent CLI through one scripted task (4 model turns, 3 shell commands)", "s",
                "p10-p90", rows, ratios=False)
    s.notes.append("Each CLI runs the task of tests/support/scripted_model.py: write result.txt, cat /etc/shadow, "
                   "fetch a host off the allow-list, end. Unconfined: the CLI talks to the model over plain HTTP on "
                   "loopback. airlock: `airlock agent run` on the namespaces tier, the model reached only through the "
                   "door's gateway (verified TLS to the same server, the key swapped in at the door). The Landlock "
                   "tier has no door, so an agent there cannot reach its model: it has no row.")
    if not (clis / ".complete").exists():
        why = f"the agent CLIs are not installed (scripts/agent-clis {clis})"
        for name in AGENT_TASKS:
            rows += [Row(f"{name} unconfined", "baseline", unavailable=why),
                     Row(f"{name} airlock-namespaces", "airlock CLI", unavailable=why)]
        return s
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(ctx.work / "key.pem"), "-out",
                    str(ctx.work / "cert.pem")], check=True, capture_output=True)
    key = "sk-bench-" + os.urandom(8).hex()
    plain, plain_port = start_model(ctx, "plain", key, False)
    tls, tls_port = start_model(ctx, "tls", key, True)
    try:
        pol = ctx.work / "agent.json"
        pol.write_text(json.dumps({
            "schema_version": "airlock.task_policy.v1", "executor": "namespaces", "read_only_paths": [str(clis)],
            "limits": {"memory_mb": 16384, "command_timeout_seconds": 180},
            "code_network": {"mode": "allowlist",
                             "rules": [{"cidr": "127.0.0.1/32", "ports": [tls_port], "schemes": ["https"]}]}}))
        refusal = ctx.tier_refusal("namespaces")
        rounds = 2 if ctx.quick else 5
        for name, (exe, args, direct) in AGENT_TASKS.items():
            binary = str(clis / "node_modules" / ".bin" / exe)
            var = "ANTHROPIC_API_KEY" if name == "claude-code" else "OPENAI_API_KEY"
            base = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", var: key,
                    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"}
            variants = [(f"{name} unconfined", "baseline", None),
                        (f"{name} airlock-namespaces", "airlock CLI", refusal)]
            times = {v[0]: [] for v in variants}
            failed = {}
            for i in range(rounds):
                for label, kind, why in variants:
                    if why or label in failed:
                        continue
                    ws = Path(tempfile.mkdtemp(dir="/var/tmp", prefix="airlock-bench-ws."))
                    home = Path(tempfile.mkdtemp(dir="/var/tmp", prefix="airlock-bench-home."))
                    env = dict(base, HOME=str(home))
                    if kind == "baseline":
                        env["ANTHROPIC_BASE_URL"] = f"http://127.0.0.1:{plain_port}"
                        cmd = [binary, *direct(f"http://127.0.0.1:{plain_port}"), *args]
                    else:
                        cmd = [ctx.airlock, "--state-dir", str(ctx.state), "agent", "run", "-q", "--profile", name,
                               "--pass-env", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "--policy", str(pol),
                               "--workspace", str(ws), "--executable", binary, "--model-upstream",
                               f"https://127.0.0.1:{tls_port}", "--model-ca", str(ctx.work / "cert.pem"), "--", *args]
                    t0 = time.monotonic()
                    r = subprocess.run(cmd, cwd=ws, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                       timeout=300)
                    took = time.monotonic() - t0
                    done = (ws / "result.txt").exists()
                    shutil.rmtree(ws, ignore_errors=True)
                    shutil.rmtree(home, ignore_errors=True)
                    if r.returncode != 0 or not done:
                        lines = [l for l in (r.stderr + r.stdout).splitlines() if l.strip()]
                        failed[label] = f"exit {r.returncode}, result.txt {'written' if done else 'missing'}: " \
                                        f"{(lines or ['no output'])[-1][:200]}"
                        log(f"{label}: {failed[label]}")
                        continue
                    times[label].append(took)
            mine = []
            for label, kind, why in variants:
                t = times[label]
                if why or label in failed or not t:
                    mine.append(Row(label, kind, unavailable=why or failed.get(label, "no run")))
                else:
                    mine.append(Row(label, kind, statistics.median(t), pct(t, 0.1), pct(t, 0.9), t, len(t)))
            if all(r.median for r in mine):  # each CLI against itself unconfined, in the same run
                mine[1].extra["x unconfined"] = f"{mine[1].median / mine[0].median:.2f}"
            rows += mine
    finally:
        for p in (plain, tls):
            p.terminate()
            p.wait()
    return s


# ---------------------------------------------------------------------------------------------
# Scale: sandboxed commands per second under concurrent clients.

def throughput(prefix, concurrency, total, env, cwd):
    """(commands per second, failures): `total` runs of PREFIX /bin/true x, `concurrency` at a
    time, spawned by xargs -P (a small C spawner, the same for every variant)."""
    lines = "x\n" * total
    t0 = time.monotonic()
    r = subprocess.run(["xargs", "-P", str(concurrency), "-n", "1", *prefix, "/bin/true"], input=lines, text=True,
                       capture_output=True, env=env, cwd=cwd)
    took = time.monotonic() - t0
    return total / took, ("" if r.returncode == 0 else f"exit {r.returncode}: {r.stderr.strip()[-200:]}")


@benchmark("scale")
def scale(ctx):
    levels = (1, 2, 8, 32)
    variants = [("plain", "baseline", [])]
    unavailable = []
    for tier in ("landlock", "namespaces"):
        why = ctx.tier_refusal(tier)
        (unavailable if why else variants).append(
            (f"airlock-{tier}-cli", "airlock CLI", why if why else ctx.cli(tier, [])[:-1]))
    bwrap = next(p for p in ctx.peers if p.name == "bwrap")
    why = ctx.peer_status(bwrap)
    (unavailable if why else variants).append(("bwrap", "peer", why if why else bwrap.prefix))
    reps = 2 if ctx.quick else 7
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": str(ctx.work), "LANG": "C.UTF-8"}
    samples = {(name, c): [] for name, _, _ in variants for c in levels}
    failed = {}
    log(f"scale: {len(variants)} variants x {len(levels)} concurrencies x {reps} repetitions, interleaved")
    for _ in range(reps):
        for c in levels:
            total = 2 * c if ctx.quick else max(64, 8 * c)
            for name, _, prefix in variants:
                rate, err = throughput(prefix, c, total, env, ctx.work)
                if err:
                    failed[(name, c)] = err
                samples[(name, c)].append(rate)
    rows = []
    for c in levels:
        base = statistics.median(samples[("bwrap", c)]) if ("bwrap", c) in samples else None
        for name, kind, _ in variants:
            v = samples[(name, c)]
            row = Row(f"{name} x{c}", kind, statistics.median(v), min(v), max(v), v, len(v))
            row.extra["clients"] = str(c)
            if base and name != "bwrap":
                row.extra["x bwrap (same clients)"] = f"{row.median / base:.2f}"
            if (name, c) in failed:
                row.unavailable = f"a run failed: {failed[(name, c)]}"
            rows.append(row)
        rows += [Row(f"{name} x{c}", kind, unavailable=why) for name, kind, why in unavailable]
    s = Section("scale", "Scale: sandboxed /bin/true per second with 1, 2, 8 and 32 concurrent clients",
                "commands/s", "worst-best repetition", rows, lower_is_better=False, ratios=False)
    per = "2 per client" if ctx.quick else "8 per client, at least 64"
    s.notes.append(f"Each figure: N runs ({per}) of the variant's command started by "
                   "`xargs -P CLIENTS` and timed from the first start to the last exit; the median of "
                   f"{reps} repetitions, variants interleaved. `x bwrap` divides by bubblewrap's rate at the "
                   "same concurrency (above 1: airlock sustains more). Every airlock run takes a seat in the "
                   "same run store and makes its own session view, cgroup and receipts. The machine has "
                   f"{os.cpu_count()} cores: beyond that, clients queue for CPU, so the rate is CPU per run.")
    return s


# ---------------------------------------------------------------------------------------------
# Output: ratios, Markdown, charts.

def add_ratios(s):
    live = [r for r in s.rows if not r.unavailable and r.median]
    base = next((r for r in live if r.kind == "baseline"), None)
    peers = [r for r in live if r.kind == "peer"]
    best = min(peers, key=lambda r: r.median) if peers else None
    for r in live:
        if base:
            r.extra["x baseline"] = f"{r.median / base.median:.2f}"
        if best:
            r.extra[f"x best peer ({best.name})"] = f"{r.median / best.median:.2f}"


def fmt_num(v):
    return "" if v is None else (f"{v:.3f}" if v < 10 else f"{v:.1f}" if v < 1000 else f"{v:,.0f}")


def verdict(met):
    return {True: "**met**", False: "**missed**", None: "not judged"}[met]


def markdown(s):
    lines = [f"## {s.title}", ""]
    extra_cols = []
    for r in s.rows:
        for k in r.extra:
            if k != "command" and k not in extra_cols:
                extra_cols.append(k)
    head = ["variant", "kind", f"median {s.unit}", f"spread {s.unit} ({s.spread})", *extra_cols, "runs"]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in s.rows:
        if r.unavailable:
            lines.append(f"| {r.name} | {r.kind} | not run: {r.unavailable} |" + " |" * (len(head) - 3))
            continue
        cells = [r.name, r.kind, fmt_num(r.median), f"{fmt_num(r.low)} – {fmt_num(r.high)}",
                 *[str(r.extra.get(k, "")) for k in extra_cols], str(r.runs)]
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    for t in s.targets:
        lines.append(f"- Target: {t.text} — {t.measured}: {verdict(t.met)}")
    if s.targets:
        lines.append("")
    for n in s.notes:
        lines += [n, ""]
    lines += [f"Chart: `{s.name}.png`. Reproduce this table alone: `make build && bench/bench.py --only {s.name}`.",
              ""]
    return "\n".join(lines)


COLORS = {"baseline": "#7f7f7f", "airlock CLI": "#1f77b4", "airlock library": "#2ca02c", "airlock serve": "#17becf",
          "peer": "#d62728", "airlock": "#1f77b4"}


def chart(s, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    rows = list(reversed(s.rows))  # first row on top
    fig, ax = plt.subplots(figsize=(10, 0.45 * len(rows) + 1.6))
    labels = []
    for y, r in enumerate(rows):
        labels.append(r.name if not r.unavailable else f"{r.name} (not run)")
        if r.unavailable:
            continue
        color = COLORS.get(r.kind, "#9467bd")
        if len(r.samples) >= 5:
            ax.boxplot([r.samples], positions=[y], vert=False, widths=0.6, whis=(10, 90), showfliers=False,
                       patch_artist=True, boxprops={"facecolor": color, "alpha": 0.6},
                       medianprops={"color": "black"})
        else:
            ax.barh(y, r.median, color=color, alpha=0.7, height=0.6)
            ax.errorbar(r.median, y, xerr=[[r.median - r.low], [r.high - r.median]], fmt="none", ecolor="black",
                        capsize=4)
        ax.annotate(f" {fmt_num(r.median)}", (r.high if r.high else r.median, y), va="center", fontsize=8)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels(labels, fontsize=9)
    highs = [r.high or r.median for r in rows if not r.unavailable]
    if s.log_scale:
        ax.set_xscale("log")
    if highs:  # room for the figure printed after the longest whisker
        ax.set_xlim(right=max(highs) * (4 if s.log_scale else 1.2))
    better = "lower is better" if s.lower_is_better else "higher is better"
    spread = "box p25-p75, whiskers p10-p90" if any(len(r.samples) >= 5 for r in rows) else f"bar median, " \
             f"whisker {s.spread}"
    ax.set_xlabel(f"{s.unit} ({better}; {spread})")
    ax.set_title(s.title, fontsize=11)
    ax.grid(axis="x", which="both", alpha=0.3)
    kinds = [k for k in COLORS if any(r.kind == k and not r.unavailable for r in rows)]
    ax.legend(handles=[Patch(color=COLORS[k], alpha=0.6, label=k) for k in kinds], fontsize=8, loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def header():
    load = open("/proc/loadavg").read().split()[:3]
    return [
        "# airlock benchmarks", "",
        f"{time.strftime('%Y-%m-%dT%H:%MZ', time.gmtime())}, kernel {os.uname().release}, {os.cpu_count()} cores, "
        f"load {' '.join(load)} at the start. Every figure is from this one run; variants of a benchmark are "
        "interleaved round by round so a noisy machine slows them alike, and every ratio is to a baseline from "
        "the same run. Reproduce all: `make bench`; one table: `bench/bench.py --only NAME`.", ""]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=str(REPO / "build"))
    ap.add_argument("--peers", default=None, help="npm prefix holding sandbox-runtime (default BUILD/bench-peers)")
    ap.add_argument("--only", default="", help="comma-separated benchmark names")
    ap.add_argument("--quick", action="store_true", help="a few rounds of each: checks the harness, not figures")
    ap.add_argument("--out", default=str(HERE / "results"))
    ap.add_argument("--no-peers", action="store_true", help="airlock and the baselines only")
    ap.add_argument("--list", action="store_true")
    args = ap.parse_args()
    if args.list:
        print("\n".join(n for n, _ in BENCHMARKS))
        return 0
    args.peers = args.peers or str(Path(args.build) / "bench-peers")
    names = [n for n in args.only.split(",") if n] or [n for n, _ in BENCHMARKS]
    unknown = [n for n in names if n not in dict(BENCHMARKS)]
    if unknown:
        sys.exit(f"bench: unknown benchmark(s) {', '.join(unknown)}; --list shows them")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    ctx = Ctx(args)
    started = time.monotonic()
    sections = []
    try:
        for name, fn in BENCHMARKS:
            if name in names:
                s = fn(ctx)
                if s.ratios:
                    add_ratios(s)
                chart(s, out / f"{s.name}.png")
                sections.append(s)
    finally:
        ctx.close()
    summary = ["## Targets (the issue's, each judged on this run)", "", "| target | measured | verdict |", "|---|---|---|"]
    summary += [f"| {t.text} | {t.measured} | {verdict(t.met)} |" for s in sections for t in s.targets]
    took = time.monotonic() - started
    trailer = [f"Load at the end: {' '.join(open('/proc/loadavg').read().split()[:3])}; the run took {took / 60:.1f} min.",
               ""]
    text = "\n".join(header() + summary + [""] + [markdown(s) for s in sections] + trailer)
    (out / "latest.md").write_text(text)
    print(text)
    missed = [t.text for s in sections for t in s.targets if t.met is False]
    if missed:
        log("targets missed: " + "; ".join(missed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
