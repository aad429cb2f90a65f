#!/usr/bin/python3
"""The container tier end to end through the CLI (issue 20): an image built here from a directory
carrying a program this host does not have, pinned by digest and checked, then commands run in it
with no network, a read-only root, the view at /work written back under the usual rules, a wall
time kept from the host, a SIGKILLed airlock's container gone with it, and nothing left behind;
an image from Debian packages (--from-debian). Refusals: a tag, an unknown digest, no image.
Usage: container_test.py AIRLOCK"""
import json, os, shutil, subprocess, sys, tempfile

airlock = sys.argv[1]
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, flush=True)


def run(state, *args, stdin=None, timeout=180):
    return subprocess.run([airlock, "--state-dir", state, *args], input=stdin, capture_output=True, text=True,
                          timeout=timeout)


if os.geteuid() != 0:
    # Rootless containers run in airlock's own cgroup (the code is there); this test drives root's.
    print("SKIP: the container tier's end-to-end test runs as root")
    sys.exit(77)
if not os.access("/usr/bin/podman", os.X_OK):
    print("SKIP: container engine: /usr/bin/podman is not installed")
    sys.exit(77 if os.environ.get("AIRLOCK_REQUIRE_ALL_TIERS") != "1" else 1)

import hashlib

tmp = tempfile.mkdtemp(prefix="airlock-container-")
state = os.path.join(tmp, "state")
# The engine's run directory for this state directory (container_engine.cpp, open_engine): this
# test's own, whatever else runs containers beside it (the bench, the conformance battery).
run_root = "/run/airlock-containers-" + hashlib.sha256(state.encode()).hexdigest()[:12]
try:
    # The image: a static program that exists nowhere on this host, and a marker file.
    img = os.path.join(tmp, "img")
    os.makedirs(os.path.join(img, "opt/imgtool"))
    src = os.path.join(tmp, "tool.c")
    with open(src, "w") as f:
        f.write('#include <stdio.h>\n#include <fcntl.h>\n#include <errno.h>\n#include <sys/socket.h>\n'
                '#include <netinet/in.h>\n#include <unistd.h>\n#include <sys/stat.h>\n'
                'int main(int c,char**v){ if(c>1&&v[1][0]==\'w\'){FILE*f=fopen("/work/out.txt","w");'
                'fputs("from the image\\n",f);fclose(f);return 0;}\n'
                ' if(c>1&&v[1][0]==\'r\'){int fd=open("/etc/planted",O_CREAT|O_WRONLY,0644);printf("root %d %d\\n",fd,errno);return 0;}\n'
                ' if(c>1&&v[1][0]==\'h\'){int fd=open("/work/.git/hooks/pre-commit",O_CREAT|O_WRONLY|O_TRUNC,0755);'
                'printf("hook %d %d\\n",fd,errno);if(fd>=0){write(fd,"#!/bin/sh\\n",10);close(fd);}return 0;}\n'
                ' if(c>1&&v[1][0]==\'n\'){int s=socket(AF_INET,SOCK_STREAM,0);struct sockaddr_in a={0};a.sin_family=AF_INET;'
                'a.sin_port=htons(53);a.sin_addr.s_addr=htonl(0x01010101);int r=connect(s,(void*)&a,sizeof a);'
                'printf("net %d %d\\n",r,errno);return 0;}\n'
                ' if(c>2&&v[1][0]==\'c\'){FILE*f=fopen(v[2],"r");char b[256]={0};'
                'if(!f){printf("cat failed %d\\n",errno);return 1;}fgets(b,sizeof b,f);printf("cat %s",b);return 0;}\n'
                ' if(c>2&&v[1][0]==\'x\'){int a=rename("/work/sub","/work/sub2");int b=mkdir("/work/sub",0755);'
                'int d=symlink(v[2],"/work/sub/.envrc");printf("swap %d %d %d\\n",a,b,d);return 0;}\n'
                ' if(c>1&&v[1][0]==\'s\'){for(;;)pause();}\n'
                ' puts("imgtool ran in the image");return 3;}\n')
    subprocess.run(["gcc", "-static", "-O2", "-o", os.path.join(img, "opt/imgtool/imgtool"), src], check=True)
    check(not os.path.exists("/opt/imgtool/imgtool"), "the host must not have the image's program")

    b = run(state, "image", "build", "tools", "--from-dir", img, "--json")
    check(b.returncode == 0, f"image build: {b.returncode} {b.stdout} {b.stderr}")
    rec = json.loads(b.stdout)
    ref = rec["reference"]
    check(ref.startswith("localhost/tools@sha256:") and len(ref.split("@sha256:")[1]) == 64, f"reference {ref}")
    check(rec["ok"] is True, f"the check passed: {rec}")
    lst = json.loads(run(state, "image", "list", "--json").stdout)
    check(lst["engine"] == "/usr/bin/podman" and lst["runtime"] in ("crun", "runc"), f"engine facts {lst}")
    check([i["reference"] for i in lst["images"]] == [ref] and lst["images"][0]["ok"], f"image list {lst}")

    ws = os.path.join(tmp, "ws")
    os.makedirs(os.path.join(ws, ".git/hooks"))
    with open(os.path.join(ws, "in.txt"), "w") as f:
        f.write("workspace\n")

    def policy(image, **extra):
        p = {"schema_version": "airlock.task_policy.v1", "executor": "container", "workspace": ws,
             "limits": {"command_timeout_seconds": 3}}
        if image is not None:
            p["image"] = image
        p.update(extra)
        path = os.path.join(tmp, "policy.json")
        with open(path, "w") as f:
            json.dump(p, f)
        return path

    # The image's own program ran: the host has none.
    r = run(state, "run", "--policy", policy(ref), "--", "/opt/imgtool/imgtool")
    check(r.returncode == 3 and "imgtool ran in the image" in r.stdout, f"imgtool: {r.returncode} {r.stdout} {r.stderr}")
    check("container tier" in r.stderr, f"first line names the tier: {r.stderr}")
    # The run is over only once the engine's monitor (conmon) has ended, its cleanup with it.
    left = subprocess.run(["pgrep", "-f", "conmon.*" + os.path.basename(tmp)], capture_output=True, text=True)
    check(left.stdout.strip() == "", f"the engine's monitor outlived the run: {left.stdout}")
    # Written in /work, written back.
    r = run(state, "run", "--policy", policy(ref), "--", "/opt/imgtool/imgtool", "w")
    check(r.returncode == 0, f"write: {r.stderr}")
    check(open(os.path.join(ws, "out.txt")).read() == "from the image\n", "write-back of /work/out.txt")
    # The root is read-only (EROFS 30).
    r = run(state, "run", "--policy", policy(ref), "--", "/opt/imgtool/imgtool", "r")
    check("root -1 30" in r.stdout, f"read-only root: {r.stdout} {r.stderr}")
    # A git hook cannot be planted: read-only inside, and never written back.
    r = run(state, "run", "--policy", policy(ref), "--", "/opt/imgtool/imgtool", "h")
    check(not os.path.exists(os.path.join(ws, ".git/hooks/pre-commit")), f"hook planted on the host: {r.stdout}")
    # A protected path a command swaps for a link to a host directory, in one session, is not
    # bound by the next command (the engine's bind would follow it): the host's file stays out of reach.
    secret_dir = os.path.join(tmp, "host-secret")
    os.makedirs(secret_dir)
    with open(os.path.join(secret_dir, "token"), "w") as f:
        f.write("host-secret-token\n")
    os.makedirs(os.path.join(ws, "sub"))
    with open(os.path.join(ws, "sub/.envrc"), "w") as f:
        f.write("export A=1\n")
    tool_policy = policy(ref, tools=[{"name": "imgtool", "argv": ["/opt/imgtool/imgtool"], "allow_args": True}])
    p = subprocess.Popen([airlock, "--state-dir", state, "session", "--policy", tool_policy], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    p.stdout.readline()  # session.open

    def act(**req):
        p.stdin.write(json.dumps(req) + "\n")
        p.stdin.flush()
        return json.loads(p.stdout.readline())

    swap = act(id=1, action="run_tool", tool="imgtool", args=["x", secret_dir])
    check(swap.get("ok") and "swap 0 0 0" in swap["result"]["stdout"], f"the swap inside: {swap}")
    cat = act(id=2, action="run_tool", tool="imgtool", args=["c", "/work/sub/.envrc/token"])
    check(cat.get("ok"), f"second run: {cat}")
    out = cat.get("result", {}).get("stdout", "")
    check("host-secret-token" not in out, f"a linked protected path was bound: {out}")
    check("cat failed" in out, f"the link leads nowhere inside: {cat}")
    # While a session holds the engine: its run directory is this state directory's, and the engine's
    # own state of what runs (its exit files) is in it, never in the host's podman's /run/libpod.
    check(os.path.isdir(os.path.join(run_root, "libpod", "exits")), f"the engine's exit files are not in {run_root}/libpod")
    act(id=3, action="close")
    p.stdin.close()
    p.wait(timeout=60)
    shutil.rmtree(os.path.join(ws, "sub"), ignore_errors=True)
    shutil.rmtree(os.path.join(ws, "sub2"), ignore_errors=True)
    # No network: connect fails (ENETUNREACH 101).
    r = run(state, "run", "--policy", policy(ref), "--", "/opt/imgtool/imgtool", "n")
    # socket(2) of any family but AF_UNIX fails under the seccomp profile (the connect then EBADF);
    # beneath it the network namespace has only loopback.
    check("net -1 " in r.stdout, f"network: {r.stdout} {r.stderr}")
    # A program the image lacks: 127, named.
    r = run(state, "run", "--policy", policy(ref), "--", "/bin/sh", "-c", "true")
    check(r.returncode == 127 and "AIRLOCK_TOOL_FAILED" in r.stderr, f"missing program: {r.returncode} {r.stderr}")
    # The wall time is kept from the host: the container is killed and removed.
    r = run(state, "run", "--policy", policy(ref), "--", "/opt/imgtool/imgtool", "s")
    check("AIRLOCK_TOOL_TIMEOUT" in r.stderr or r.returncode in (124, 137, 143), f"timeout: {r.returncode} {r.stderr}")
    ps = subprocess.run(["pgrep", "-f", "airlock-container-.*imgtool|conmon.*" + os.path.basename(tmp)],
                        capture_output=True, text=True)
    check(ps.stdout.strip() == "", f"processes left: {ps.stdout}")
    # An airlock killed outright (no chance to clean up) takes its container with it at once: the
    # container's init reads end-of-file on its lifeline, long before the engine's own --timeout.
    import time
    p = subprocess.Popen([airlock, "--state-dir", state, "run", "--policy",
                          policy(ref, limits={"command_timeout_seconds": 600}), "--", "/opt/imgtool/imgtool", "s"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    def pause_pids():
        # The command's process: imgtool s, a child of the container's init.
        out = subprocess.run(["pgrep", "-f", "^/opt/imgtool/imgtool s$"], capture_output=True, text=True).stdout
        return out.split()
    deadline = time.monotonic() + 60
    while not pause_pids() and time.monotonic() < deadline:
        time.sleep(0.1)
    check(pause_pids() != [], "the long command never started")
    p.kill()
    p.wait(timeout=30)
    deadline = time.monotonic() + 15
    while pause_pids() and time.monotonic() < deadline:
        time.sleep(0.1)
    check(pause_pids() == [], f"the container outlived a SIGKILLed airlock: {pause_pids()}")
    # The next session sweeps what the killed one left and runs as before.
    r = run(state, "run", "--policy", policy(ref), "--", "/opt/imgtool/imgtool", "w")
    check(r.returncode == 0, f"after the kill: {r.returncode} {r.stderr}")
    # Every run marks its container before the engine starts it and unmarks it once it is gone;
    # the killed run's mark was swept, with its container, by the run after it.
    marks = os.path.join(state, "containers/running")
    check(os.path.isdir(marks) and os.listdir(marks) == [], f"marks left: {os.listdir(marks) if os.path.isdir(marks) else None}")
    left = subprocess.run(["pgrep", "-f", "conmon.*" + os.path.basename(tmp)], capture_output=True, text=True)
    check(left.stdout.strip() == "", f"conmon left: {left.stdout}")

    # An image from Debian packages (apt-get download from this machine's sources, unpacked):
    # hello and its libc, a program this host does not have, run in it.
    b = run(state, "image", "build", "debhello", "--from-debian", "hello", "--json", timeout=600)
    check(b.returncode == 0, f"image build --from-debian: {b.returncode} {b.stdout} {b.stderr}")
    if b.returncode == 0:
        rec = json.loads(b.stdout)
        check(rec["ok"] is True and rec["source"].startswith("debian:") and " libc6_" in rec["source"]
              and "hello_" in rec["source"], f"the record names the packages: {rec}")
        r = run(state, "run", "--policy", policy(rec["reference"]), "--", "/usr/bin/hello")
        check(r.returncode == 0 and r.stdout.strip() == "Hello, world!", f"hello from Debian: {r.returncode} {r.stdout} {r.stderr}")
        if not os.path.exists("/usr/bin/hello"):
            r = run(state, "run", "--policy", policy(ref), "--", "/usr/bin/hello")
            check(r.returncode == 127, f"not in the other image: {r.returncode} {r.stderr}")
    for bad, code in (("Not_A_Name", "AIRLOCK_OPTION_INVALID"), ("airlock-no-such-package-x", "AIRLOCK_OPTION_INVALID")):
        b = run(state, "image", "build", "bad", "--from-debian", bad)
        check(b.returncode != 0 and code in b.stderr and bad in b.stderr, f"--from-debian {bad}: {b.returncode} {b.stderr}")
    b = run(state, "image", "build", "bad", "--from-dir", img, "--from-debian", "hello")
    check(b.returncode != 0, f"--from-dir and --from-debian together: {b.returncode} {b.stderr}")

    # Refusals, each by name.
    r = run(state, "run", "--policy", policy("localhost/tools:latest"), "--", "/opt/imgtool/imgtool")
    check(r.returncode != 0 and "AIRLOCK_POLICY_INVALID" in r.stderr and "named by digest" in r.stderr,
          f"tag refused: {r.stderr}")
    unknown = "localhost/tools@sha256:" + "0" * 64
    r = run(state, "run", "--policy", policy(unknown), "--", "/opt/imgtool/imgtool")
    check("AIRLOCK_EXECUTOR_UNAVAILABLE" in r.stderr and unknown in r.stderr and ref in r.stderr,
          f"unknown digest refused, naming what is checked: {r.stderr}")
    r = run(state, "run", "--policy", policy(None), "--", "/opt/imgtool/imgtool")
    check("AIRLOCK_EXECUTOR_UNAVAILABLE" in r.stderr and "names no image" in r.stderr, f"no image: {r.stderr}")
    r = run(state, "run", "--policy", policy(ref, code_network={"mode": "allowlist", "rules": [{"host": "example.com", "ports": [443], "schemes": ["https"]}]}),
            "--", "/opt/imgtool/imgtool")
    check("AIRLOCK_EXECUTOR_UNAVAILABLE" in r.stderr, f"no door: {r.stderr}")
    monitors = os.path.join(state, "containers/monitors")
    check(os.listdir(monitors) == [], f"monitors' pid files left: {os.listdir(monitors)}")
    # The engine's run directory (outside the state directory) is gone with the last session.
    check(not os.path.exists(run_root), f"the run directory left: {run_root}")
finally:
    # Nothing of the engine's left: its containers, its store, its run directory.
    storage = os.path.join(state, "containers/storage")
    if os.path.isdir(storage):
        engine = ["/usr/bin/podman", "--root", storage, "--runroot", run_root, "--tmpdir", run_root + "/libpod",
                  "--storage-driver", "overlay"]
        left = subprocess.run(engine + ["ps", "-aq"], capture_output=True, text=True)
        if left.returncode == 0:
            check(left.stdout.strip() == "", f"containers left: {left.stdout}")
            subprocess.run(engine + ["system", "reset", "--force"], capture_output=True)
        shutil.rmtree(run_root, ignore_errors=True)
    subprocess.run(["umount", "-R", os.path.join(state, "containers/storage/overlay")], capture_output=True)
    shutil.rmtree(tmp, ignore_errors=True)

if failures:
    print(f"{len(failures)} failure(s)")
    sys.exit(1)
print("container tier: all checks passed")
