#!/usr/bin/env python3
"""Other machines over real OpenSSH: `airlock machine add|install|probe` against test hosts.

The whole test runs in a network namespace it makes. Each far "machine" is Debian's sshd on port
22 of a network namespace of its own, reached over a veth pair, with its own host key, hostname
(UTS namespace), machine id (its /etc/machine-id, bound in a mount namespace whose /run is a fresh
tmpfs: sshd's privilege separation needs /run/sshd), authorized key and installation directory.
Nothing outside the test's temporary directory and namespaces is written, and every sshd is
stopped at the end.

Checked: a machine not installed yet cannot be probed; install copies this airlock, checked there
by the platform's sha256sum, and records its digest; probe records the far airlock's own
measurement, signed; a far binary replaced after install is refused by digest and the row is kept;
a host key other than the one believed, a stopped sshd, and a row whose transport was changed in
the store are each refused by name, before anything is copied or run. `airlock run --machine`:
the run is composed there only from a believed, fresh row whose facts allow its plan (stale,
never probed, a tier the row lacks, a far binary replaced: refused by name with the fix), its
stdout and exit status pass through, its far receipts verify here and join this run's chain, and
its seat is held in this store under the far machine's id (a slot of one seat refuses a second).
One far host runs under a seccomp filter that makes landlock_create_ruleset fail with ENOSYS, as a
kernel without Landlock would: its probe says so and a Landlock-tier run there is refused by name.
Two dispatchers with machine ids and states of their own share the test PostgreSQL cluster
(AIRLOCK_TEST_PG_DIR, fixture pg) as their store: 3 seats across the 2 far machines are held
exactly under 50 concurrent dispatches, the other 47 refused by name. `airlock doctor` shows each
machine's attested level and why.
Usage: fleet_ssh_test.py AIRLOCK   (exit 77: not root, or no sshd here)
"""
import hashlib
import http.client
import json
import os
import re
import signal
import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time

SKIP = 77
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print(f"FAIL: {what}", flush=True)


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def without_landlock():
    """In the child before sshd starts: a seccomp filter that makes landlock_create_ruleset fail
    with ENOSYS, as on a kernel without Landlock, for sshd and everything it starts."""
    import ctypes
    import struct
    libc = ctypes.CDLL(None, use_errno=True)
    def stmt(code, k, jt=0, jf=0):
        return struct.pack("HBBI", code, jt, jf, k)
    ld_abs, jeq, ret = 0x20, 0x15, 0x06
    prog = b"".join([
        stmt(ld_abs, 4),                       # arch
        stmt(jeq, 0xC000003E, 0, 3),           # x86_64, else allow
        stmt(ld_abs, 0),                       # syscall number
        stmt(jeq, 444, 0, 1),                  # landlock_create_ruleset
        stmt(ret, 0x00050000 | 38),            # SECCOMP_RET_ERRNO | ENOSYS
        stmt(ret, 0x7FFF0000),                 # SECCOMP_RET_ALLOW
    ])
    buf = ctypes.create_string_buffer(prog)
    class Fprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]
    fprog = Fprog(len(prog) // 8, ctypes.addressof(buf))
    if libc.prctl(22, 2, ctypes.byref(fprog), 0, 0) != 0:  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER
        raise OSError(ctypes.get_errno(), "seccomp")


class FarHost:
    """One sshd on port 22 of a network namespace of its own, reached from the test's namespace over
    a veth pair, with a host key, a hostname (its own UTS namespace) and a machine id (its own
    /etc/machine-id, bound in a mount namespace of its own) of its own."""

    count = 0

    def __init__(self, root, name, client_pub, landlock=True):
        FarHost.count += 1
        self.n = FarHost.count
        self.name = name
        self.landlock = landlock
        self.dir = os.path.join(root, name)
        os.makedirs(self.dir)
        self.addr = f"10.77.{self.n}.2"
        self.machine_id = hashlib.sha256(f"{name}-{os.getpid()}".encode()).hexdigest()[:32]
        self.host_key = os.path.join(self.dir, "host_key")
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", self.host_key], check=True)
        auth = os.path.join(self.dir, "authorized_keys")
        shutil.copy(client_pub, auth)
        # Every command line the far login shell is given is logged, then run as sshd would run it.
        self.log = os.path.join(self.dir, "commands.log")
        force = os.path.join(self.dir, "force.sh")
        with open(force, "w") as f:
            f.write(f"#!/bin/sh\nprintf '%s\\n' \"$SSH_ORIGINAL_COMMAND\" >> {self.log}\n"
                    "exec /bin/sh -c \"$SSH_ORIGINAL_COMMAND\"\n")
        os.chmod(force, 0o755)
        self.config = os.path.join(self.dir, "sshd_config")
        with open(self.config, "w") as f:
            f.write(f"Port 22\nListenAddress {self.addr}\nHostKey {self.host_key}\nPidFile none\n"
                    f"AuthorizedKeysFile {auth}\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
                    "UsePAM no\nStrictModes no\nPermitRootLogin prohibit-password\nLogLevel ERROR\n"
                    "MaxStartups 100:30:200\n"
                    f"ForceCommand {force}\n")
        with open(os.path.join(self.dir, "machine-id"), "w") as f:
            f.write(self.machine_id + "\n")
        self.install_dir = os.path.join(self.dir, "airlock")
        self.proc = None
        self.start()

    def start(self):
        # In its namespaces: /run a fresh tmpfs (privilege separation needs /run/sshd), its own
        # hostname and machine id; then it waits for the test to hand it its end of the veth pair.
        ready = os.path.join(self.dir, "ready")
        script = ("set -e; mount -t tmpfs -o mode=755 tmpfs /run; mkdir -m 755 /run/sshd; hostname \"$2\"; "
                  "mount --bind \"$3\"/machine-id /etc/machine-id; ip link set lo up; touch \"$3\"/ready; "
                  "i=0; until ip link show eth0 >/dev/null 2>&1; do i=$((i+1)); test $i -lt 500; sleep 0.01; done; "
                  "ip addr add \"$4\"/24 dev eth0; ip link set eth0 up; exec /usr/sbin/sshd -D -e -f \"$1\"")
        self.proc = subprocess.Popen(
            ["unshare", "--net", "--mount", "--uts", "--propagation", "private", "sh", "-c", script,
             "sh", self.config, self.name, self.dir, self.addr],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            preexec_fn=None if self.landlock else without_landlock)
        for _ in range(500):
            if os.path.exists(ready) or self.proc.poll() is not None:
                break
            time.sleep(0.01)
        if not os.path.exists(ready):
            raise SystemExit(f"the far host's namespaces were not made: {self.proc.stderr.read() if self.proc.poll() is not None else 'timeout'}")
        veth = f"fleet{self.n}"
        subprocess.run(["ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", str(self.proc.pid)],
                       check=True)
        subprocess.run(["ip", "addr", "add", f"10.77.{self.n}.1/24", "dev", veth], check=True)
        subprocess.run(["ip", "link", "set", veth, "up"], check=True)
        for _ in range(200):
            with socket.socket() as s:
                s.settimeout(1)
                if s.connect_ex((self.addr, 22)) == 0:
                    return
            if self.proc.poll() is not None:
                raise SystemExit(f"sshd did not start: {self.proc.stderr.read()}")
            time.sleep(0.05)
        raise SystemExit("sshd did not listen within 10 s")

    def stop(self):
        # Its network namespace (and the veth pair with it) goes with its last process.
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)
        self.proc = None

    def ssh(self):
        return f"root@{self.addr}"

    def known_hosts_line(self):
        with open(self.host_key + ".pub") as f:
            kind, key = f.read().split()[:2]
        return f"{self.addr} {kind} {key}\n"


def main():
    airlock = sys.argv[1]
    require_all = os.environ.get("AIRLOCK_REQUIRE_ALL_TIERS") == "1"
    if os.geteuid() != 0:
        print("SKIP: sshd's privilege separation needs root to serve a test host")
        sys.exit(SKIP)
    if not os.path.exists("/usr/sbin/sshd") or not shutil.which("ssh"):
        print("SKIP: no sshd (Debian's openssh-server; scripts/install-deps installs it)")
        sys.exit(1 if require_all else SKIP)

    if os.environ.get("AIRLOCK_FLEET_NETNS") != str(os.getpid()):
        # The whole test runs in a network namespace it makes: the far hosts' veth pairs and
        # addresses never touch the host's network.
        os.execvp("unshare", ["unshare", "--net", "sh", "-c",
                              'AIRLOCK_FLEET_NETNS=$$ exec "$@"', "sh", sys.executable, *sys.argv])
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    with tempfile.TemporaryDirectory(prefix="airlock-fleet-") as tmp:
        hosts = []
        try:
            run_checks(airlock, tmp, hosts)
        finally:
            for h in hosts:
                h.stop()
    if failures:
        print(f"{len(failures)} check(s) failed")
        sys.exit(1)
    print("all checks passed")


def run_checks(airlock, tmp, hosts):
    state = os.path.join(tmp, "state")
    client_key = os.path.join(tmp, "client_key")
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", client_key], check=True)
    far1 = FarHost(tmp, "far1", client_key + ".pub")
    hosts.append(far1)
    far2 = FarHost(tmp, "far2", client_key + ".pub")
    hosts.append(far2)
    known = os.path.join(tmp, "known_hosts")
    with open(known, "w") as f:
        f.write(far1.known_hosts_line() + far2.known_hosts_line())
    wrong_known = os.path.join(tmp, "wrong_known_hosts")  # far2's address with far1's key
    with open(wrong_known, "w") as f:
        f.write(far1.known_hosts_line().replace(far1.addr, far2.addr, 1))

    def al(*args):
        p = subprocess.run([airlock, "--state-dir", state, *args], capture_output=True, text=True, timeout=600)
        return p
    al.cmd = [airlock, "--state-dir", state]

    def refused(p, code, what):
        check(p.returncode == 125 and f"AIRLOCK_{code}" in p.stderr,
              f"{what}: expected AIRLOCK_{code}, got status {p.returncode}: {p.stderr.strip()[-600:]}")

    def rows():
        p = al("machine", "list", "--json")
        check(p.returncode == 0, f"machine list: {p.stderr}")
        return {m["id"]: m for m in json.loads(p.stdout)["machines"]}

    p = al("fleet", "init")
    check(p.returncode == 0, f"fleet init: {p.stderr}")
    for h, kh in ((far1, known), (far2, known)):
        name = os.path.basename(h.dir)
        p = al("machine", "add", name, "--ssh", h.ssh(), "--identity", client_key,
               "--known-hosts", kh, "--dir", h.install_dir)
        check(p.returncode == 0, f"machine add {name}: {p.stderr}")

    # Nothing installed yet: a probe says so, and names the fix.
    p = al("machine", "probe", "far1")
    refused(p, "CONFIG_ERROR", "probe before install")
    check("airlock machine install far1" in p.stderr, f"probe before install names the fix: {p.stderr}")

    # Install: the far copy is ours, byte for byte, executable, nothing half-written left.
    local_sha = sha256(airlock)
    p = al("machine", "install", "far1", "--json")
    check(p.returncode == 0, f"install far1: {p.stderr}")
    if p.returncode == 0:
        out = json.loads(p.stdout)
        check(out["installed"]["sha256"] == local_sha, f"install records the digest sent: {out}")
    far_bin = os.path.join(far1.install_dir, "airlock")
    check(os.path.exists(far_bin) and sha256(far_bin) == local_sha, "the far airlock is this airlock")
    check(os.path.exists(far_bin) and os.stat(far_bin).st_mode & 0o111, "the far airlock is executable")
    check(not [f for f in os.listdir(far1.install_dir) if ".new-" in f] if os.path.isdir(far1.install_dir) else False,
          "no temporary copy is left in the installation directory")

    # An install stopped midway (Ctrl-C while a copy is on its way) leaves no partial copy there.
    stopped = subprocess.Popen([*al.cmd, "machine", "install", "far1"], stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True, start_new_session=True)
    for _ in range(200):
        if os.path.isdir(far1.install_dir) and [f for f in os.listdir(far1.install_dir) if ".new-" in f]:
            break
        time.sleep(0.01)
    os.killpg(stopped.pid, signal.SIGINT)
    stopped.wait(60)
    left = []
    for _ in range(100):
        left = [f for f in os.listdir(far1.install_dir) if ".new-" in f]
        if not left:
            break
        time.sleep(0.1)
    check(not left, f"a stopped install leaves no partial copy there: {left}")
    check(os.path.exists(far_bin) and sha256(far_bin) == local_sha, "the installed airlock is untouched")
    p = al("machine", "install", "far1")
    check(p.returncode == 0, f"install again after the stopped one: {p.stderr}")

    # Probe over ssh: the far airlock's own measurement, signed, believed; the same facts this
    # machine measures of itself (it is the same kernel).
    p = al("machine", "probe", "far1")
    check(p.returncode == 0, f"probe far1: {p.stderr}")
    local = al("machine", "facts")
    check(local.returncode == 0, f"machine facts: {local.stderr}")
    r = rows()
    check(r.get("far1", {}).get("believed") is True, f"far1's row is believed after its probe: {r.get('far1')}")
    if r.get("far1", {}).get("believed") and local.returncode == 0:
        mine = json.loads(local.stdout)
        check(r["far1"]["facts"]["landlock_abi"] == mine["facts"]["landlock_abi"],
              "far1's Landlock ABI is what this kernel has")
        check(r["far1"]["hostname"] == "far1", f"far1's hostname is the far side's own: {r['far1']['hostname']}")
        check(r["far1"]["transport"]["installed"]["sha256"] == local_sha, "the row keeps the installed digest")

    check_dispatch(al, refused, tmp, far1, far2, client_key, known, hosts)

    # The far binary replaced after install: refused by digest, the row is not rewritten.
    probed_at = rows().get("far1", {}).get("probed_at_ms")
    with open(far_bin, "ab") as f:
        f.write(b"\0")
    p = al("machine", "probe", "far1")
    refused(p, "CUSTODY_UNSAFE", "probe of a far binary replaced after install")
    check("replaced" in p.stderr, f"the refusal says the binary was replaced: {p.stderr}")
    check(rows().get("far1", {}).get("probed_at_ms") == probed_at, "a refused probe leaves the row as it was")
    p = al("machine", "install", "far1")
    check(p.returncode == 0, f"install again: {p.stderr}")
    p = al("machine", "probe", "far1")
    check(p.returncode == 0, f"probe after install again: {p.stderr}")

    # A host key other than the one believed: ssh refuses, nothing is copied.
    p = al("machine", "add", "far2b", "--ssh", far2.ssh(), "--identity", client_key,
           "--known-hosts", wrong_known, "--dir", far2.install_dir)
    check(p.returncode == 0, f"machine add far2b: {p.stderr}")
    p = al("machine", "install", "far2b")
    refused(p, "SERVER_UNREACHABLE", "install with a host key not believed")
    check("Host key verification failed" in p.stderr, f"the refusal says what ssh said: {p.stderr}")
    check(not os.path.exists(far2.install_dir), "nothing was copied to a host whose key is not believed")

    # A row whose transport was changed in the store: its signature fails, nothing is contacted.
    db = os.path.join(state, "airlock.db")
    con = sqlite3.connect(db)
    con.execute("UPDATE machines SET transport = json_set(transport, '$.dir', ?) WHERE id = 'far2'",
                (os.path.join(tmp, "elsewhere"),))
    con.commit()
    con.close()
    for verb in ("install", "probe"):
        p = al("machine", verb, "far2")
        refused(p, "CUSTODY_UNSAFE", f"{verb} through a row changed in the store")
        check("signature_invalid" in p.stderr, f"the refusal names the signature: {p.stderr}")
    check(not os.path.exists(os.path.join(tmp, "elsewhere")), "nothing was written where the changed row pointed")

    # No far login shell ever parsed a byte of ours: every command line it was given is the fixed
    # decoder around base64 (fish or csh would read quotes and backslashes otherwise).
    shape = re.compile(r"^exec /bin/sh -c 'eval \"\$\(echo [A-Za-z0-9+/=]+ \| base64 -d\)\"'$")
    for h in hosts:
        if os.path.exists(h.log):
            with open(h.log) as f:
                lines = f.read().splitlines()
            odd = [l for l in lines if not shape.match(l)]
            check(lines and not odd, f"{os.path.basename(h.dir)}'s login shell saw only base64: {odd[:2]}")

    # An older signed row put back (someone with the database keeps a copy): the install made
    # here moved this machine's mark on, so it is taken as replayed, without any `machine list`
    # in between.
    con = sqlite3.connect(db)
    old_row = con.execute("SELECT * FROM machines WHERE id = 'far3'").fetchone()
    con.close()
    check(old_row is not None, "far3 was recorded")
    if old_row is not None:
        time.sleep(0.01)
        p = al("machine", "install", "far3")
        check(p.returncode == 0, f"install far3 once more: {p.stderr}")
        con = sqlite3.connect(db)
        con.execute("DELETE FROM machines WHERE id = 'far3'")
        con.execute(f"INSERT INTO machines VALUES ({','.join('?' * len(old_row))})", old_row)
        con.commit()
        con.close()
        for verb in ("install", "probe"):
            p = al("machine", verb, "far3")
            refused(p, "CUSTODY_UNSAFE", f"{verb} through an older signed row put back")
            check("replayed" in p.stderr, f"the refusal names the replay: {p.stderr}")
        # Recovered by removing the row and adding the machine again: a new signature, later
        # than the mark.
        p = al("machine", "remove", "far3")
        check(p.returncode == 0, f"machine remove far3: {p.stderr}")
        check("far3" not in rows(), "the removed row is gone")
        p = al("machine", "remove", "far3")
        refused(p, "NOT_FOUND", "removing a machine that is not there")
        steps = [["machine", "add", "far3", "--ssh", far2.ssh(), "--identity", client_key, "--known-hosts", known,
                  "--dir", os.path.join(tmp, "far3")], ["machine", "install", "far3"], ["machine", "probe", "far3"]]
        for step in steps:
            p = al(*step)
            check(p.returncode == 0, f"{' '.join(step[:2])} far3 after its removal: {p.stderr}")
        check(rows().get("far3", {}).get("believed") is True, f"far3 is believed again: {rows().get('far3')}")

    check_shared_store(airlock, tmp, far1, far2, client_key, known)

    # A stopped sshd: unreachable, by name.
    far1.stop()
    p = al("machine", "probe", "far1")
    refused(p, "SERVER_UNREACHABLE", "probe of a machine whose sshd is stopped")

    # Options that could be read otherwise are refused.
    p = al("machine", "add", "x", "--ssh", "root@127.0.0.1:1", "--dir", "../up")
    refused(p, "OPTION_INVALID", "--dir with ..")
    os.symlink(known, os.path.join(tmp, "kh-link"))
    p = al("machine", "add", "x", "--ssh", "root@127.0.0.1:1", "--known-hosts", os.path.join(tmp, "kh-link"))
    refused(p, "CUSTODY_UNSAFE", "--known-hosts through a link")


def check_shared_store(airlock, tmp, far1, far2, client_key, known):
    """Two dispatching machines sharing the test PostgreSQL cluster as their store: 3 seats across 2
    far machines (2 on far1, 1 on far2) are held exactly under 50 concurrent dispatches."""
    pg_dir = os.environ.get("AIRLOCK_TEST_PG_DIR", "")
    conninfo = os.path.join(pg_dir, "conninfo")
    if not pg_dir or not os.path.exists(conninfo):
        why = open(os.path.join(pg_dir, "missing")).read().strip() if pg_dir and os.path.exists(
            os.path.join(pg_dir, "missing")) else "AIRLOCK_TEST_PG_DIR is not set (run through CTest, fixture pg)"
        print(f"SKIP shared store: {why}")
        check(os.environ.get("AIRLOCK_REQUIRE_ALL_TIERS") != "1", f"the shared-store checks need PostgreSQL: {why}")
        return
    admin = open(conninfo).read().strip()
    db = f"airlock_fleet{os.getpid()}"
    subprocess.run(["psql", "-q", "-d", admin, "-c", f"CREATE DATABASE {db}"], check=True, capture_output=True)
    try:
        at = admin.index("/postgres?")
        url = admin[:at] + "/" + db + admin[at + 9:]
        run_shared_store(airlock, tmp, far1, far2, client_key, known, url)
    finally:
        subprocess.run(["psql", "-q", "-d", admin, "-c", f"DROP DATABASE IF EXISTS {db} WITH (FORCE)"],
                       capture_output=True)


def run_shared_store(airlock, tmp, far1, far2, client_key, known, url):
    # Dispatcher A holds the fleet key and records the machines; dispatcher B, another machine
    # id with a state of its own, trusts A's public key and dispatches through the same rows.
    a_state, b_state = os.path.join(tmp, "ctl-a"), os.path.join(tmp, "ctl-b")
    a = [airlock, "--state-dir", a_state, "--store", url, "--machine-id", "ctl-a"]
    b = [airlock, "--state-dir", b_state, "--store", url, "--machine-id", "ctl-b"]

    def run(cmd, *args):
        return subprocess.run([*cmd, *args], capture_output=True, text=True, timeout=600)
    p = run(a, "fleet", "init")
    check(p.returncode == 0, f"fleet init (A): {p.stderr}")
    pub = re.search(r"public key (\S+)", p.stdout)
    check(pub is not None, f"fleet init prints its public key: {p.stdout}")
    if not pub:
        return
    p = run(b, "fleet", "trust", pub.group(1))
    check(p.returncode == 0, f"fleet trust (B): {p.stderr}")
    for h in (far1, far2):
        steps = [["machine", "add", h.name, "--ssh", h.ssh(), "--identity", client_key, "--known-hosts", known,
                  "--dir", os.path.join(h.dir, "airlock-shared")],
                 ["machine", "install", h.name], ["machine", "probe", h.name]]
        for step in steps:
            p = run(a, *step)
            check(p.returncode == 0, f"{' '.join(step[:2])} {h.name} (A, shared store): {p.stderr}")
    listed = run(b, "machine", "list", "--json")
    check(listed.returncode == 0 and all(m["believed"] for m in json.loads(listed.stdout or '{"machines":[]}')["machines"]),
          f"B believes the rows A signed: {listed.stdout} {listed.stderr}")
    for spec, n in (("far1:default", "2"), ("far2:default", "1")):
        p = run(a, "slot", "set", spec, "--max-sessions", n)
        check(p.returncode == 0, f"slot set {spec}: {p.stderr}")
    ws = os.path.join(tmp, "shared-ws")
    os.mkdir(ws)
    policy = os.path.join(tmp, "shared-ns.json")
    with open(policy, "w") as f:
        json.dump({"schema_version": "airlock.task_policy.v1", "executor": "namespaces",
                   "limits": {"command_timeout_seconds": 300}}, f)
    # 50 at once, from both dispatchers, to both machines; an admitted run holds its seat until
    # the test writes its stdin, so every request is decided while the seats are held.
    procs = []
    for i in range(50):
        cmd = a if i % 2 == 0 else b
        machine = far1.name if (i // 2) % 2 == 0 else far2.name
        procs.append((machine, subprocess.Popen([*cmd, "run", "-q", "--machine", machine, "--policy", policy,
                                                 "--workspace", ws, "--", "sh", "-c", "read x; echo ran:$x"],
                                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)))
    refused, deadline = [], time.time() + 300
    while time.time() < deadline and len(refused) < 47:
        refused = [(m, pr) for m, pr in procs if pr.poll() is not None]
        time.sleep(0.1)
    time.sleep(1)
    refused = [(m, pr) for m, pr in procs if pr.poll() is not None]
    held = [(m, pr) for m, pr in procs if pr.poll() is None]
    live = run(a, "runs", "list", "--live", "--json")
    live_runs = json.loads(live.stdout)["runs"] if live.returncode == 0 else []
    check(len(held) == 3 and sorted(m for m, _ in held) == ["far1", "far1", "far2"],
          f"exactly 3 dispatches hold seats, 2 on far1 and 1 on far2: {sorted(m for m, _ in held)}")
    check(sorted(r["machine"] for r in live_runs) == ["far1", "far1", "far2"],
          f"the shared store shows the 3 seats under the far machines' ids: {live_runs}")
    codes = []
    for _, pr in refused:
        err = pr.stderr.read().decode(errors="replace")
        codes.append("CAPACITY_EXHAUSTED" if pr.returncode == 125 and "AIRLOCK_CAPACITY_EXHAUSTED" in err
                     else f"{pr.returncode}: {err[-300:]}")
    odd = [c for c in codes if c != "CAPACITY_EXHAUSTED"]
    check(len(codes) == 47 and not odd, f"the other 47 are refused for capacity, by name: {len(codes)} {odd[:3]}")
    for _, pr in held:
        out, err = pr.communicate(b"go\n", timeout=120)
        check(pr.returncode == 0 and out == b"ran:go\n", f"a seated dispatch ran to its end: {pr.returncode} {out} {err[-300:]}")
    for _, pr in procs:
        if pr.poll() is None:
            pr.kill()
            pr.wait()
    live = run(b, "runs", "list", "--live", "--json")
    check(live.returncode == 0 and not json.loads(live.stdout)["runs"], f"every seat was released: {live.stdout}")


class UnixHTTP(http.client.HTTPConnection):
    def __init__(self, path):
        super().__init__("localhost", timeout=300)
        self.unix_path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.connect(self.unix_path)


def api(sock, method, path, body=None):
    c = UnixHTTP(sock)
    c.request(method, path, json.dumps(body) if body is not None else None, {"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, json.loads(data) if data else None


def check_served_session(al, tmp, ws):
    """`airlock serve`: a posted session with "machine" is opened there, through the same gate."""
    sock = os.path.join(tmp, "serve.sock")
    server = subprocess.Popen([*al.cmd, "serve", "--socket", sock], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)
    try:
        line = server.stdout.readline()
        check(line and "listening" in line, f"airlock serve started: {line} {server.poll()}")
        body = {"schema_version": "airlock.task_policy.v1", "executor": "namespaces", "task_id": "far-task",
                "machine": "far1", "workspace": ws}
        status, opened = api(sock, "POST", "/v1/sessions", body)
        check(status == 201 and opened.get("machine") == "far1" and opened.get("executor") == "namespaces",
              f"a served session opens on far1: {status} {opened}")
        if status != 201:
            return
        sid = opened["session"]
        base = f"/v1/sessions/{sid}"
        status, w = api(sock, "POST", base + "/write_file", {"path": "served.txt", "content": "served far\n"})
        check(status == 200 and w.get("bytes") == 11, f"write_file through the server, there: {status} {w}")
        status, r = api(sock, "POST", base + "/read_file", {"path": "served.txt"})
        check(status == 200 and r.get("content") == "served far\n", f"read_file there: {status} {r}")
        status, bad = api(sock, "POST", base + "/read_file", {"path": "/etc/shadow"})
        check(status >= 400 and bad["error"]["code"].startswith("AIRLOCK_"), f"a refusal there is the far session's: {status} {bad}")
        status, rec = api(sock, "GET", base + "/receipts")
        check(status == 200 and rec.get("path") == opened.get("receipts") and rec["receipts"][:1]
              and rec["receipts"][0]["kind"] == "dispatch.open",
              f"a far session's receipts route answers from this server's chain, at once: {status} {str(rec)[:300]}")
        status, listed = api(sock, "GET", "/v1/sessions")
        mine = [x for x in listed["sessions"] if x["session"] == sid]
        check(mine and mine[0]["machine"] == "far1" and mine[0]["actions"] == 3 and mine[0]["refused"] == 1,
              f"GET /v1/sessions shows the far session: {mine}")
        status, closed = api(sock, "POST", base + "/close", {})
        check(status == 200 and closed.get("closed") is True, f"close there: {status} {closed}")
        with open(os.path.join(ws, "served.txt")) as f:
            check(f.read() == "served far\n", "what the served far session wrote landed there on close")
        chain = opened.get("receipts", "")
        kinds = []
        for _ in range(300):
            if os.path.exists(chain):
                with open(chain) as f:
                    kinds = [json.loads(l)["kind"] for l in f if l.endswith("\n")]
                if kinds and kinds[-1] == "dispatch.close":
                    break
            time.sleep(0.1)
        check(kinds[:1] == ["dispatch.open"] and kinds[-1:] == ["dispatch.close"] and kinds.count("far.receipt") >= 4,
              f"the served far session's receipts came back into its chain: {kinds}")
        v = al("receipts", "verify", chain)
        check(v.returncode == 0, f"that chain verifies: {v.stdout} {v.stderr}")
        status, after = api(sock, "POST", base + "/read_file", {"path": "served.txt"})
        check(status >= 400 and after["error"]["code"] in ("AIRLOCK_SESSION_CLOSED", "AIRLOCK_SESSION_UNKNOWN"),
              f"a closed far session takes no more actions: {status} {after}")
        # Refused by the gate, by name, before anything runs there: a machine not in the fleet.
        status, nope = api(sock, "POST", "/v1/sessions", dict(body, machine="nowhere"))
        check(status >= 400 and nope["error"]["code"] == "AIRLOCK_NOT_FOUND", f"an unknown machine: {status} {nope}")
        status, nows = api(sock, "POST", "/v1/sessions", {k: v for k, v in body.items() if k != "workspace"})
        check(status == 400 and "workspace" in nows["error"]["message"], f"a far session without a workspace: {status} {nows}")
        # The kill switch reaches the far session; its receipts still come back.
        status, k_open = api(sock, "POST", "/v1/sessions", body)
        check(status == 201, f"a second served far session: {status} {k_open}")
        if status == 201:
            status, killed = api(sock, "POST", f"/v1/sessions/{k_open['session']}/kill", {})
            check(status == 200 and killed.get("killed") is True, f"kill there: {status} {killed}")
            kinds = []
            for _ in range(300):
                if os.path.exists(k_open["receipts"]):
                    with open(k_open["receipts"]) as f:
                        kinds = [json.loads(l) for l in f if l.endswith("\n")]
                    if kinds and kinds[-1]["kind"] == "dispatch.close":
                        break
                time.sleep(0.1)
            far_kinds = [r["receipt"]["kind"] for r in kinds if r["kind"] == "far.receipt"]
            check(far_kinds[-1:] == ["session.close"] and kinds[-1:] and kinds[-1]["kind"] == "dispatch.close",
                  f"a killed far session's receipts came back: {far_kinds}")
    finally:
        server.terminate()
        try:
            server.wait(120)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def check_dispatch(al, refused, tmp, far1, far2, client_key, known, hosts_started):
    """`airlock run --machine`: composed on the far machine only where its row allows."""
    ws = os.path.join(tmp, "far1-workspace")  # a path on the far machine (the same host here)
    os.mkdir(ws)
    policy = os.path.join(tmp, "ns.json")
    with open(policy, "w") as f:
        json.dump({"schema_version": "airlock.task_policy.v1", "executor": "namespaces",
                   "limits": {"command_timeout_seconds": 2}}, f)

    def dispatch(*cmd, extra=(), pol=policy, machine="far1"):
        return al("run", "--machine", machine, "--policy", pol, "--workspace", ws, *extra, "--", *cmd)

    # A run there: its stdout relayed, its exit status passed through, its write-back on the far
    # workspace, its receipts verified here and appended to this run's own chain.
    p = dispatch("sh", "-c", "echo hello; echo made > out.txt; test -e /proc/1/cmdline && cat /proc/1/comm", extra=("--json",))
    check(p.returncode == 0, f"dispatch: {p.returncode} {p.stderr}")
    lines = p.stdout.splitlines()
    check(lines[:1] == ["hello"], f"the far command's stdout is relayed: {p.stdout!r}")
    summary = json.loads(lines[-1]) if lines else {}
    check(summary.get("machine") == "far1" and summary.get("executor") == "namespaces",
          f"the summary names the machine and the tier that ran: {summary}")
    check(summary.get("far_receipts", {}).get("verified") is True, f"the far receipts verify here: {summary}")
    with open(os.path.join(ws, "out.txt")) as f:
        check(f.read() == "made\n", "the far run's write-back landed in the far workspace")
    local = summary.get("receipts", "")
    v = al("receipts", "verify", local)
    check(v.returncode == 0, f"this run's own chain verifies: {v.stdout} {v.stderr}")
    kinds = []
    with open(local) as f:
        for line in f:
            r = json.loads(line)
            kinds.append(r["kind"] if r["kind"] != "far.receipt" else "far:" + r["receipt"]["kind"])
    check(kinds[0] == "dispatch.open" and kinds[-1] == "dispatch.close" and "far:session.open" in kinds
          and "far:session.close" in kinds, f"the far receipts are in this run's chain: {kinds}")
    runs = json.loads(al("runs", "list", "--json").stdout)["runs"]
    mine = [r for r in runs if r["id"] == summary.get("run")]
    check(mine and mine[0]["machine"] == "far1" and mine[0]["outcome"] == "exit 0",
          f"the seat was taken under the far machine's id: {mine}")

    # A session there: the action protocol over the same stdio, through the same gate; what it
    # wrote lands on close, and its receipts come back into this run's chain.
    reqs = [{"id": 1, "action": "write_file", "path": "from-session.txt", "content": "far session\n"},
            {"id": 2, "action": "read_file", "path": "from-session.txt"},
            {"id": 3, "action": "list_dir", "path": "."},
            {"id": 4, "action": "close"}]
    p = subprocess.run([*al.cmd, "session", "--machine", "far1", "--policy", policy, "--workspace", ws],
                       input="".join(json.dumps(r) + "\n" for r in reqs), capture_output=True, text=True, timeout=120)
    out = [json.loads(l) for l in p.stdout.splitlines() if l.strip()]
    check(p.returncode == 0 and len(out) == 7, f"a far session answers every request: {p.returncode} {p.stdout[-600:]} {p.stderr[-600:]}")
    if len(out) == 7:
        check(out[0].get("event") == "dispatch.open" and out[0]["result"]["machine"] == "far1",
              f"the dispatch says its run and chain first: {out[0]}")
        check(out[1].get("event") == "session.open" and out[1]["result"]["executor"] == "namespaces",
              f"then the far session says what confines it: {out[1]}")
        check(all(o.get("ok") for o in out[2:]), f"every action there succeeded: {out[2:]}")
        check(out[3]["result"].get("content") == "far session\n", f"a far session reads what it wrote: {out[3]}")
        check(out[5]["result"].get("closed") is True, f"the far session closed: {out[5]}")
        check(out[6].get("event") == "dispatch.close" and out[6]["result"]["far_receipts"]["verified"] is True,
              f"the dispatch ends saying the far receipts verified here: {out[6]}")
    with open(os.path.join(ws, "from-session.txt")) as f:
        check(f.read() == "far session\n", "what the far session wrote landed in the far workspace on close")
    chain = re.search(r"added to (\S+\.jsonl)", p.stderr)
    check(chain is not None, f"the far session's receipts are added here: {p.stderr[-400:]}")
    if chain:
        v = al("receipts", "verify", chain.group(1))
        check(v.returncode == 0, f"the far session's chain verifies here: {v.stdout} {v.stderr}")
        with open(chain.group(1)) as f:
            kinds = [json.loads(l) for l in f]
        fk = [r["receipt"]["kind"] for r in kinds if r["kind"] == "far.receipt"]
        check(kinds[0]["kind"] == "dispatch.open" and kinds[0].get("verb") == "session" and kinds[-1]["kind"] == "dispatch.close"
              and fk[:1] == ["session.open"] and fk[-1:] == ["session.close"],
              f"the far session's receipts are in this chain: {[r['kind'] for r in kinds]} {fk}")
    p = subprocess.run([*al.cmd, "session", "--machine", "far1", "--policy", policy, "--workspace", ws, "--run-id", "x"],
                       capture_output=True, text=True, timeout=60)
    refused(p, "OPTION_INVALID", "a far session with an option not sent there")

    check_served_session(al, tmp, ws)

    # The far machine took its own seat in its own store, under its own machine id.
    far_db = os.path.join(far1.install_dir, "state", "airlock.db")
    ids = set()
    if os.path.exists(far_db):
        con = sqlite3.connect(far_db)
        ids = {r[0] for r in con.execute("SELECT machine_id FROM runs")}
        con.close()
    check(ids == {far1.machine_id}, f"the far run was seated under far1's own machine id: {ids}")

    # Arguments that quote differently in other shells reach the command as they were typed.
    odd = ["x\\'", " (id >PWNED) ", "y\\'", "$(id)", "a\nb", "`id`", "'\""]
    p = dispatch("printf", "[%s]", *odd)
    check(p.returncode == 0 and p.stdout == "".join(f"[{a}]" for a in odd),
          f"odd arguments pass through unchanged: {p.stdout!r} {p.stderr}")
    check(not os.path.exists(os.path.join(ws, "PWNED")), "no argument was run as a command")
    # An argument that is not UTF-8 runs as its bytes, and the far receipts still bind to it.
    p = subprocess.run([*al.cmd, "run", "--machine", "far1", "--policy", policy, "--workspace", ws, "--",
                        "printf", "[%s]", os.fsdecode(b"\xff\xfe-x")], capture_output=True, timeout=120)
    check(p.returncode == 0 and p.stdout == b"[\xff\xfe-x]",
          f"a non-UTF-8 argument passes through and its receipts verify: {p.returncode} {p.stdout!r} {p.stderr[-400:]!r}")

    # stdin is the command's: from a pipe, and from a terminal the dispatcher runs on (ssh reads
    # it in the terminal's foreground group; it must not stop there).
    p = subprocess.run([*al.cmd, "run", "--machine", "far1", "--policy", policy, "--workspace", ws, "--",
                        "sh", "-c", "read x; echo got:$x"], input="piped\n", capture_output=True, text=True, timeout=120)
    check(p.returncode == 0 and p.stdout == "got:piped\n", f"stdin from a pipe: {p.stdout!r} {p.stderr}")
    import pty, termios, fcntl, select
    master, slave = pty.openpty()
    def on_terminal():
        os.setsid()
        fcntl.ioctl(slave, termios.TIOCSCTTY, 0)
    term = subprocess.Popen([*al.cmd, "run", "-q", "--machine", "far1", "--policy", policy, "--workspace", ws, "--",
                             "sh", "-c", "read x; echo got:$x"], stdin=slave, stdout=slave, stderr=slave,
                            preexec_fn=on_terminal)
    os.close(slave)
    time.sleep(1.5)
    os.write(master, b"typed\n")
    seen = b""
    deadline = time.time() + 60
    while time.time() < deadline and b"got:typed" not in seen:
        r, _, _ = select.select([master], [], [], 1)
        if r:
            try:
                seen += os.read(master, 4096)
            except OSError:
                break
    try:
        term.wait(30)
    except subprocess.TimeoutExpired:
        term.kill()
        term.wait()
    os.close(master)
    check(b"got:typed" in seen and term.returncode == 0,
          f"stdin from a terminal reaches the far command: {term.returncode} {seen[-300:]!r}")

    # Output is the command's, byte for byte, as it comes: no newline added, nothing held back.
    p = dispatch("printf", "no newline")
    check(p.stdout == "no newline", f"stdout unchanged: {p.stdout!r}")

    # Ctrl-C of the dispatcher stops the far run (its airlock kills the command, writes nothing
    # back, and its receipts say so); nothing of it is left running, its seat is released.
    # A wall limit far beyond the stop: on a loaded machine the dispatch alone can take the 2 s
    # limit of the policy above, and the run would end by its timeout before the Ctrl-C came.
    long_policy = os.path.join(tmp, "ns-long.json")
    with open(long_policy, "w") as f:
        json.dump({"schema_version": "airlock.task_policy.v1", "executor": "namespaces",
                   "limits": {"command_timeout_seconds": 120}}, f)
    slow = subprocess.Popen([*al.cmd, "run", "--machine", "far1", "--policy", long_policy, "--workspace", ws, "--",
                             "sh", "-c", "sleep 29.25; touch interrupted-wrote"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
    dispatch_dir = os.path.join(far1.install_dir, "dispatch")
    for _ in range(200):
        if os.path.isdir(dispatch_dir) and any(os.path.exists(os.path.join(dispatch_dir, d, "pid"))
                                               for d in os.listdir(dispatch_dir)):
            break
        time.sleep(0.05)
    time.sleep(0.5)
    os.killpg(slow.pid, signal.SIGINT)  # as a terminal's Ctrl-C: to the whole foreground group
    try:
        slow.wait(60)
    except subprocess.TimeoutExpired:
        slow.kill()
    err = slow.stderr.read()
    check(slow.returncode == 125 and "AIRLOCK_SESSION_KILLED" in err, f"the stopped far run is refused: {slow.returncode} {err}")
    left = subprocess.run(["pgrep", "-f", "sleep 29.25"], capture_output=True, text=True).stdout.split()
    check(not left, f"nothing of the stopped far run is left running: {left}")
    check(not os.path.exists(os.path.join(ws, "interrupted-wrote")), "the stopped far run wrote nothing back")
    check(not json.loads(al("runs", "list", "--live", "--json").stdout)["runs"], "its seat was released")
    check(not os.listdir(dispatch_dir), f"the far run's directory is removed: {os.listdir(dispatch_dir)}")

    # The far airlock SIGKILLed mid-run (its machine's operator, the OOM killer): what it recorded
    # still comes back, verifies here and joins this run's chain; the run is refused as killed.
    slow = subprocess.Popen([*al.cmd, "run", "--machine", "far1", "--policy", long_policy, "--workspace", ws, "--",
                             "sh", "-c", "sleep 29.75"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
    far_pid = None
    for _ in range(200):
        pids = [os.path.join(dispatch_dir, d, "pid") for d in os.listdir(dispatch_dir)] if os.path.isdir(dispatch_dir) else []
        if pids and os.path.exists(pids[0]) and open(pids[0]).read().strip():
            far_pid = int(open(pids[0]).read())
            break
        time.sleep(0.05)
    time.sleep(0.5)
    check(far_pid is not None, "the far run's pid is kept in its directory")
    if far_pid:
        os.kill(far_pid, signal.SIGKILL)
    try:
        slow.wait(90)
    except subprocess.TimeoutExpired:
        slow.kill()
    err = slow.stderr.read()
    check(slow.returncode == 125 and "AIRLOCK_SESSION_KILLED" in err and "verify here" in err,
          f"a far run killed midway: {slow.returncode} {err}")
    chain = [l for l in err.split() if l.endswith(".jsonl") and "/receipts/" in l]
    if chain:
        v = al("receipts", "verify", chain[0].rstrip(")"))
        check(v.returncode == 0, f"the killed run's chain verifies here: {v.stdout} {v.stderr}")
        with open(chain[0].rstrip(")")) as f:
            kinds = [json.loads(l)["kind"] for l in f]
        check("far.receipt" in kinds and kinds[-1] == "dispatch.close", f"its far receipts are in the chain: {kinds}")
    check(not subprocess.run(["pgrep", "-f", "sleep 29.75"], capture_output=True).stdout,
          "nothing of the killed far run is left running")
    check(not json.loads(al("runs", "list", "--live", "--json").stdout)["runs"], "its seat was released")

    # The exit status passes through; a far refusal (the wall-time limit) is the far run's.
    p = dispatch("sh", "-c", "exit 7")
    check(p.returncode == 7, f"a far exit status passes through: {p.returncode} {p.stderr}")
    p = dispatch("sleep", "30")
    check(p.returncode == 125 and "AIRLOCK_TOOL_TIMEOUT" in p.stderr, f"a far run stopped by its limit: {p.stderr}")
    check("verified here" in p.stderr, f"a stopped far run's receipts still verify here: {p.stderr}")

    # Capacity: the far machine's slot, held in this store under its id.
    p = al("slot", "set", "far1:default", "--max-sessions", "1")
    check(p.returncode == 0, f"slot set: {p.stderr}")
    slow = subprocess.Popen([*al.cmd, "run", "--machine", "far1", "--policy", policy, "--workspace", ws, "--",
                             "sleep", "1.5"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    for _ in range(100):
        live = json.loads(al("runs", "list", "--live", "--json").stdout)["runs"]
        if live:
            break
        time.sleep(0.05)
    p = dispatch("true")
    refused(p, "CAPACITY_EXHAUSTED", "a second run on a far slot of one seat")
    slow.wait(60)
    check(slow.returncode == 0, f"the run holding the seat: {slow.stderr.read()}")

    # A dispatcher SIGKILLed mid-run (with its ssh): the far run goes on, and the store judges the
    # seat's holder dead. The next dispatch there is admitted and stops that orphan before its
    # own command starts, so what runs there is what the store seats; the one after removes the
    # orphan's directory.
    before = set(os.listdir(dispatch_dir))
    orphan = subprocess.Popen([*al.cmd, "run", "--machine", "far1", "--policy", policy, "--workspace", ws, "--",
                               "sh", "-c", "sleep 28.5"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)
    orphan_dir = None
    for _ in range(200):
        new = [d for d in os.listdir(dispatch_dir) if d not in before]
        if new and os.path.exists(os.path.join(dispatch_dir, new[0], "pid")):
            orphan_dir = os.path.join(dispatch_dir, new[0])
            break
        time.sleep(0.05)
    time.sleep(0.5)
    os.killpg(orphan.pid, signal.SIGKILL)
    orphan.wait()
    running = lambda: subprocess.run(["pgrep", "-f", "sleep 28.5"], capture_output=True).stdout
    check(orphan_dir is not None and running(), "the far run of a SIGKILLed dispatcher goes on there")
    p = dispatch("true")
    check(p.returncode == 0, f"the next dispatch is admitted (the orphan's seat is free): {p.stderr}")
    for _ in range(100):
        if not running():
            break
        time.sleep(0.1)
    check(not running(), "the orphaned far run was stopped by the next dispatch")
    p = dispatch("true")
    check(p.returncode == 0, f"a dispatch after the orphan was stopped: {p.stderr}")
    check(orphan_dir is not None and not os.path.exists(orphan_dir),
          f"the orphan's directory there is removed: {os.listdir(dispatch_dir)}")
    al("slot", "set", "far1:default", "--max-sessions", "4")

    # Isolation claimed on evidence: a policy asking for an attested level is refused until the
    # escape suite, run there, shows it; a level above what it showed stays refused.
    def with_isolation(level):
        path = os.path.join(tmp, f"iso-{level}.json")
        with open(path, "w") as f:
            json.dump({"schema_version": "airlock.task_policy.v1", "executor": "namespaces",
                       "machine_isolation": level}, f)
        return path
    p = dispatch("true", pol=with_isolation("sandboxed"))
    refused(p, "EXECUTOR_UNAVAILABLE", "a run asking for an attested machine before any attestation")
    check("never attested" in p.stderr and "airlock machine attest far1" in p.stderr, f"names the fix: {p.stderr}")
    # An attestation stopped midway (Ctrl-C) cancels the suite there and records nothing.
    stopped = subprocess.Popen([*al.cmd, "machine", "attest", "far1"], stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True, start_new_session=True)
    attest_dir = os.path.join(far1.install_dir, "attest")
    for _ in range(300):
        if os.path.isdir(attest_dir) and os.listdir(attest_dir):
            break
        time.sleep(0.05)
    time.sleep(1)
    os.killpg(stopped.pid, signal.SIGINT)
    try:
        stopped.wait(120)
    except subprocess.TimeoutExpired:
        stopped.kill()
        stopped.wait()
    err = stopped.stderr.read()
    check(stopped.returncode == 125 and "AIRLOCK_SESSION_KILLED" in err, f"a stopped attestation: {stopped.returncode} {err[-400:]}")
    suite = f"{far1.install_dir}/airlock --state-dir .* escape-suite"
    for _ in range(100):
        if not subprocess.run(["pgrep", "-f", suite], capture_output=True).stdout:
            break
        time.sleep(0.1)
    check(not subprocess.run(["pgrep", "-f", suite], capture_output=True).stdout,
          "the escape suite there stopped with the attestation")
    check(not os.listdir(attest_dir), f"its pid file is gone: {os.listdir(attest_dir)}")
    far1_now = [m for m in json.loads(al("machine", "list", "--json").stdout)["machines"] if m["id"] == "far1"]
    check(far1_now and far1_now[0].get("attestation") is None, f"a stopped attestation records nothing: {far1_now}")
    p = al("machine", "attest", "far1", "--json")
    check(p.returncode == 0, f"attest far1: {p.stderr}")
    if p.returncode == 0:
        att = json.loads(p.stdout)["attestation"]
        by = {e["executor"]: e for e in att["executors"]}
        check(by.get("namespaces", {}).get("contained") is True and by["namespaces"]["rows"] > 20,
              f"the namespaces tier contained every escape row there: {by.get('namespaces')}")
        check(att["level"] == ("isolated" if by.get("microvm", {}).get("contained") else "sandboxed"),
              f"the level follows from the rows: {att['level']}")
        check(att["airlock_sha256"] == sha256(al.cmd[0]), "the attestation names the airlock that ran the suite")
    listed = json.loads(al("machine", "list", "--json").stdout)["machines"]
    far1_row = [m for m in listed if m["id"] == "far1"]
    check(far1_row and far1_row[0]["isolation"] in ("sandboxed", "isolated"), f"machine list shows the level: {far1_row}")
    doc = al("doctor", "--json")
    doc_far1 = [m for m in json.loads(doc.stdout).get("machines", []) if m.get("id") == "far1"] if doc.returncode == 0 else []
    check(doc_far1 and doc_far1[0]["isolation"] == far1_row[0]["isolation"]
          and "namespaces" in doc_far1[0].get("isolation_why", "") and "contained" in doc_far1[0]["isolation_why"],
          f"doctor shows far1's level and why: {doc_far1} {doc.stderr}")
    doc = al("doctor")
    check(re.search(r"^  far1 +(sandboxed|isolated) +attested .*namespaces", doc.stdout, re.M) is not None,
          f"doctor's text shows far1's level and why: {doc.stdout[-600:]}")
    doc_far4 = [m for m in json.loads(al("doctor", "--json").stdout)["machines"] if m.get("id") == "far2"]
    check(doc_far4 and doc_far4[0]["isolation"] == "none" and doc_far4[0].get("isolation_why"),
          f"doctor says why a machine has no level: {doc_far4}")
    p = dispatch("true", pol=with_isolation("sandboxed"))
    check(p.returncode == 0, f"a run asking for what the attestation shows: {p.stderr}")
    if far1_row and far1_row[0]["isolation"] == "sandboxed":
        p = dispatch("true", pol=with_isolation("isolated"))
        refused(p, "EXECUTOR_UNAVAILABLE", "a run asking for more than the attestation shows")
        check("attested sandboxed" in p.stderr, f"the refusal names the level found: {p.stderr}")
    # The level is the planned tier's own: a Landlock-tier run asks what the Landlock tier showed.

    # What the plan needs and the row does not assert: refused by name, with the fix.
    container = os.path.join(tmp, "container.json")
    with open(container, "w") as f:
        json.dump({"schema_version": "airlock.task_policy.v1", "executor": "container"}, f)
    p = dispatch("true", pol=container)
    refused(p, "EXECUTOR_UNAVAILABLE", "a tier the far machine cannot provide")
    check("machine far1" in p.stderr and "machine probe far1" in p.stderr, f"the refusal names the fix: {p.stderr}")

    # The container tier there: a machine is eligible for an image only by a check its own probe
    # ran in that exact digest. The image is built on far1 (in its namespaces, its own state).
    if not os.access("/usr/bin/podman", os.X_OK):
        print("SKIP far container tier: container engine: /usr/bin/podman is not installed")
        check(os.environ.get("AIRLOCK_REQUIRE_ALL_TIERS") != "1", "the far container checks need podman")
    else:
        img = os.path.join(tmp, "far-image")
        os.makedirs(os.path.join(img, "opt"))
        with open(os.path.join(tmp, "far-tool.c"), "w") as f:
            f.write('#include <stdio.h>\nint main(void){puts("ran in far1\'s image");return 0;}\n')
        subprocess.run(["gcc", "-static", "-O2", "-o", os.path.join(img, "opt/far-tool"), os.path.join(tmp, "far-tool.c")],
                       check=True)
        b = subprocess.run(["nsenter", "-t", str(far1.proc.pid), "-m", "-n", "-u",
                            os.path.join(far1.install_dir, "airlock"), "--state-dir", os.path.join(far1.install_dir, "state"),
                            "image", "build", "fartools", "--from-dir", img, "--json"],
                           capture_output=True, text=True, timeout=600)
        check(b.returncode == 0, f"image build on far1: {b.returncode} {b.stderr}")
        ref = json.loads(b.stdout)["reference"] if b.returncode == 0 else "localhost/fartools@sha256:" + "1" * 64
        other = ref.split("@sha256:")[0] + "@sha256:" + "0" * 64

        def container_policy(image):
            path = os.path.join(tmp, "container-image.json")
            with open(path, "w") as f:
                json.dump({"schema_version": "airlock.task_policy.v1", "executor": "container", "image": image}, f)
            return path
        # Built after the last probe: the row does not have it yet.
        p = dispatch("/opt/far-tool", pol=container_policy(ref))
        refused(p, "EXECUTOR_UNAVAILABLE", "an image the row's probe never checked")
        check(ref in p.stderr and "checked here: none" in p.stderr, f"the refusal names what the row has: {p.stderr}")
        p = al("machine", "probe", "far1")
        check(p.returncode == 0, f"probe far1 after the image: {p.stderr}")
        p = dispatch("/opt/far-tool", pol=container_policy(ref))
        check(p.returncode == 0 and "ran in far1's image" in p.stdout, f"a run in far1's image: {p.returncode} {p.stdout} {p.stderr}")
        # Another digest of the same name does not qualify; the refusal names the one that does.
        p = dispatch("/opt/far-tool", pol=container_policy(other))
        refused(p, "EXECUTOR_UNAVAILABLE", "another digest of the image")
        check(other in p.stderr and ref in p.stderr.partition("checked here: ")[2],
              f"the refusal names the digest checked: {p.stderr}")

    # A row probed before the airlock now installed is stale; a far binary replaced after the
    # probe is refused by digest before anything runs.
    al("machine", "install", "far1")
    p = dispatch("touch", "stale-ran")
    refused(p, "EXECUTOR_UNAVAILABLE", "a run on a row probed before its install")
    check("stale" in p.stderr and "airlock machine probe far1" in p.stderr, f"stale, with the fix: {p.stderr}")
    al("machine", "probe", "far1")
    far_bin = os.path.join(far1.install_dir, "airlock")
    with open(far_bin, "ab") as f:
        f.write(b"\0")
    p = dispatch("touch", "replaced-ran")
    refused(p, "CUSTODY_UNSAFE", "a run on a far binary replaced after its probe")
    check(not os.path.exists(os.path.join(ws, "stale-ran")) and not os.path.exists(os.path.join(ws, "replaced-ran")),
          "nothing ran where the gate refused")
    al("machine", "install", "far1")
    al("machine", "probe", "far1")
    # A workspace inside airlock's own installation there (its dispatch directories, its state):
    # refused before anything runs, so a command cannot rewrite the pid files stops are sent by.
    inside = os.path.join(far1.install_dir, "dispatch")
    p = al("run", "--machine", "far1", "--policy", policy, "--workspace", inside, "--", "touch", "inside-ran")
    refused(p, "CUSTODY_UNSAFE", "a far workspace inside airlock's installation there")
    check("inside airlock's installation" in p.stderr, f"the refusal says why: {p.stderr[-300:]}")
    check(not os.path.exists(os.path.join(inside, "inside-ran")), "nothing ran in a workspace inside the installation")
    # The same through a link and a `..` after it (resolved as the kernel resolves them).
    os.symlink(os.path.join(far1.install_dir, "state"), os.path.join(ws, "to-state"))
    p = al("run", "--machine", "far1", "--policy", policy, "--workspace", os.path.join(ws, "to-state", "..", "dispatch"),
           "--", "touch", "inside-ran")
    refused(p, "CUSTODY_UNSAFE", "a far workspace inside the installation, named through a link and ..")
    os.unlink(os.path.join(ws, "to-state"))
    check(not os.path.exists(os.path.join(inside, "inside-ran")), "nothing ran through the link either")
    # An installation others could change between the check and the exec: refused, nothing runs.
    os.chmod(far1.install_dir, 0o775)
    p = dispatch("touch", "writable-ran")
    refused(p, "CUSTODY_UNSAFE", "a run from an installation directory others can write")
    check("can be written by others" in p.stderr, f"the refusal says why: {p.stderr}")
    check(not os.path.exists(os.path.join(ws, "writable-ran")), "nothing ran from a writable installation")
    os.chmod(far1.install_dir, 0o755)

    # A machine whose kernel has no Landlock: its probe says so, and a run that needs the
    # Landlock tier is refused by name with the remediation, never run on another tier.
    far4 = FarHost(tmp, "far4", client_key + ".pub", landlock=False)
    hosts_started.append(far4)
    kh4 = os.path.join(tmp, "known_hosts4")
    with open(kh4, "w") as f:
        f.write(far4.known_hosts_line())
    for step in (["machine", "add", "far4", "--ssh", far4.ssh(), "--identity", client_key,
                  "--known-hosts", kh4, "--dir", far4.install_dir], ["machine", "install", "far4"],
                 ["machine", "probe", "far4", "--json"]):
        p = al(*step)
        check(p.returncode == 0, f"{' '.join(step[:2])} far4: {p.stderr}")
    if p.returncode == 0:
        check(json.loads(p.stdout)["landlock_abi"] == 0, f"far4's probe says Landlock is absent: {p.stdout[:300]}")
    ll = os.path.join(tmp, "landlock.json")
    with open(ll, "w") as f:
        json.dump({"schema_version": "airlock.task_policy.v1", "executor": "landlock"}, f)
    ws4 = os.path.join(tmp, "far4-workspace")
    os.mkdir(ws4)
    p = al("run", "--machine", "far4", "--policy", ll, "--workspace", ws4, "--", "touch", "ran")
    refused(p, "EXECUTOR_UNAVAILABLE", "a Landlock-tier run on a machine without Landlock")
    check("machine far4" in p.stderr and "andlock" in p.stderr and "machine probe far4" in p.stderr,
          f"the refusal names the machine, what it lacks and the fix: {p.stderr}")
    check(not os.path.exists(os.path.join(ws4, "ran")), "nothing ran on the machine without Landlock")
    far4.stop()

    # Never probed: refused, naming the probe.
    p = al("machine", "add", "far3", "--ssh", far2.ssh(), "--identity", client_key,
           "--known-hosts", known, "--dir", os.path.join(tmp, "far3"))
    check(p.returncode == 0, f"machine add far3: {p.stderr}")
    p = al("machine", "install", "far3")
    check(p.returncode == 0, f"install far3: {p.stderr}")
    p = dispatch("true", machine="far3")
    refused(p, "EXECUTOR_UNAVAILABLE", "a run on a machine never probed")
    check("never_probed" in p.stderr, f"the refusal names never_probed: {p.stderr}")


if __name__ == "__main__":
    main()
