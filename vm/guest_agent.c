// The microVM guest's init: mounts what the host shares over 9p, runs the one requested command
// with the guest's stdout and stderr on virtio serial ports, records its end and powers off.
//
// The host shares the session's scratch directory (tag airlock_tmp, the guest's /tmp) and names
// a control directory in it on the kernel command line (airlock_ctl=NAME, which the kernel hands
// to init as an environment variable). The request lives there as NUL-terminated
// "key\0value\0" pairs: argv (repeated, in order), env (repeated), cwd, workdir (where the
// workspace share is mounted), cpu_seconds, nofile, fsize (0: no limit), max_processes (the
// command's pids.max, required), fd3 (present: the file "fd3" beside it is the command's fd 3).
// stdin is the file "stdin" beside it. The agent reads them once the host writes a byte to the go
// port (/dev/vport0p4): a guest may boot before its request exists (the executor's pool). Once
// read, the control directory is removed. The agent writes "exit N" or "signal N" to the status
// port (/dev/vport0p3), or "agent_error WHAT: WHY" if it failed before the command ran,
// then every process of the guest dies with it: the kernel's reboot=t and
// QEMU's -no-reboot end the VM.
// Built -static: the guest has no libc of its own until /usr is mounted.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/sched.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/reboot.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_ITEMS 4096

static int ctl = -1;  // the control directory

static void power_off(void) {
  sync();
  reboot(RB_AUTOBOOT);  // reboot=t: a triple fault, which QEMU's -no-reboot turns into its exit
  for (;;) pause();
}

// The status port, held open by the agent from before it says ready until the VM ends: a virtio
// console port opens once at a time, so nothing the command starts can open it and forge a status.
static int status_port = -1;

// A failure of the agent itself: told on the console and as the status, then the VM ends.
static void die(const char* fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  const char* why = strerror(errno);
  dprintf(2, "airlock-guest-agent: %s: %s\n", msg, why);
  int fd = status_port >= 0 ? status_port : open("/dev/vport0p3", O_WRONLY | O_CLOEXEC);
  if (fd >= 0) dprintf(fd, "agent_error %s: %s\n", msg, why);
  power_off();
}

static void mkdirs(const char* path) {
  char buf[4096];
  snprintf(buf, sizeof buf, "%s", path);
  for (char* p = buf + 1; *p; ++p) {
    if (*p != '/') continue;
    *p = 0;
    mkdir(buf, 0755);
    *p = '/';
  }
  mkdir(buf, 0755);
}

static void mount_9p(const char* tag, const char* where, unsigned long flags, const char* cache) {
  char opts[256];
  snprintf(opts, sizeof opts, "trans=virtio,version=9p2000.L,msize=512000,access=client,cache=%s", cache);
  mkdirs(where);
  if (mount(tag, where, "9p", flags, opts) < 0) die("mount 9p %s at %s", tag, where);
}

static char* read_all(const char* path, size_t* len) {
  int fd = openat(ctl, path, O_RDONLY | O_NOFOLLOW);
  if (fd < 0) die("open %s", path);
  size_t cap = 1 << 16, n = 0;
  char* buf = malloc(cap);
  for (;;) {
    if (n == cap) buf = realloc(buf, cap *= 2);
    ssize_t r = read(fd, buf + n, cap - n);
    if (r < 0) die("read %s", path);
    if (r == 0) break;
    n += (size_t)r;
  }
  close(fd);
  *len = n;
  return buf;
}

// The policy's process limit. The command runs as the guest's root, which RLIMIT_NPROC does not
// bind, so it gets a cgroup of its own with pids.max (every task of the command and its
// descendants, threads too). Mounted with nsdelegate and entered with a cgroup namespace rooted
// at that cgroup: from inside, the command cannot write its own pids.max nor move out of it
// (the kernel refuses both at a delegation boundary); only setns into pid 1's cgroup namespace,
// which needs CAP_SYS_ADMIN, would. Returns the cgroup's directory, for CLONE_INTO_CGROUP.
// Any failure ends the VM before the command exists: no limit, no command.
static int prepare_process_limit(unsigned long long max_processes) {
  static const char root[] = "/sys/fs/cgroup";
  char value[32];
  if (max_processes == 0) {
    errno = EINVAL;
    die("process limit: the request names no max_processes");
  }
  mkdirs(root);
  if (mount("cgroup2", root, "cgroup2", MS_NOSUID | MS_NODEV | MS_NOEXEC, "nsdelegate") < 0)
    die("process limit: mount cgroup2 at %s", root);
  int fd = open("/sys/fs/cgroup/cgroup.subtree_control", O_WRONLY);
  if (fd < 0 || write(fd, "+pids", 5) != 5) die("process limit: enable the pids controller");
  close(fd);
  if (mkdir("/sys/fs/cgroup/command", 0755) < 0) die("process limit: mkdir /sys/fs/cgroup/command");
  int len = snprintf(value, sizeof value, "%llu", max_processes);
  fd = open("/sys/fs/cgroup/command/pids.max", O_WRONLY);
  if (fd < 0 || write(fd, value, (size_t)len) != len) die("process limit: write pids.max %s", value);
  close(fd);
  // Read back: what binds is what the kernel holds.
  char back[32] = {0};
  fd = open("/sys/fs/cgroup/command/pids.max", O_RDONLY);
  if (fd < 0 || read(fd, back, sizeof back - 1) <= 0) die("process limit: read pids.max");
  close(fd);
  if (strtoull(back, NULL, 10) != max_processes) {
    errno = EINVAL;
    die("process limit: pids.max reads %s, not %s", back, value);
  }
  int dir = open("/sys/fs/cgroup/command", O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) die("process limit: open /sys/fs/cgroup/command");
  return dir;
}

static void set_limit(int resource, unsigned long long v) {
  if (v == 0) return;
  struct rlimit r = {v, v};
  if (setrlimit(resource, &r) < 0) die("setrlimit %d", resource);
}

int main(void) {
  mkdirs("/proc");
  mkdirs("/dev");
  if (mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0) die("mount /proc");
  if (mount("devtmpfs", "/dev", "devtmpfs", MS_NOSUID | MS_NOEXEC, NULL) < 0) die("mount /dev");
  mount_9p("airlock_tmp", "/tmp", MS_NOSUID | MS_NODEV, "none");
  mount_9p("airlock_usr", "/usr", MS_RDONLY | MS_NODEV, "loose");
  const char* ctl_name = getenv("airlock_ctl");
  if (!ctl_name || !*ctl_name || strchr(ctl_name, '/') || !strcmp(ctl_name, ".") ||
      !strcmp(ctl_name, "..")) {
    errno = EINVAL;
    die("no control directory named on the kernel command line");
  }
  // Ready (one byte on the status port: the host starts the command's clock here, not at boot),
  // then the host says go (one byte on the fourth port, QEMU's stdin) once the request is in
  // place: a pooled guest boots before there is one.
  const char* delay = getenv("airlock_boot_delay_ms");  // a test seam: a slow boot
  if (delay) usleep((useconds_t)strtoul(delay, NULL, 10) * 1000);
  status_port = open("/dev/vport0p3", O_WRONLY | O_CLOEXEC);
  if (status_port < 0) die("open the status port");
  if (write(status_port, "r", 1) != 1) die("tell the host the agent is ready");
  int go = open("/dev/vport0p4", O_RDONLY);
  if (go < 0) die("open the go port");
  char byte;
  ssize_t got;
  while ((got = read(go, &byte, 1)) < 0 && errno == EINTR) {
  }
  if (got != 1) die("the host closed the go port");
  close(go);
  ctl = openat(open("/tmp", O_PATH | O_DIRECTORY), ctl_name, O_PATH | O_DIRECTORY | O_NOFOLLOW);
  if (ctl < 0) die("open the control directory %s", ctl_name);

  size_t len = 0;
  char* req = read_all("request", &len);
  if (len == 0 || req[len - 1] != 0) die("malformed request");
  char* argv[MAX_ITEMS + 1];
  char* envp[MAX_ITEMS + 1];
  int argc = 0, envc = 0;
  const char *cwd = "/", *workdir = NULL;
  unsigned long long cpu = 0, nofile = 0, fsize = 0, max_processes = 0;
  int pass_fd3 = 0;
  for (char* p = req; p < req + len;) {
    char* key = p;
    p += strlen(p) + 1;
    if (p >= req + len) die("request key %s has no value", key);
    char* val = p;
    p += strlen(p) + 1;
    if (!strcmp(key, "argv") && argc < MAX_ITEMS) argv[argc++] = val;
    else if (!strcmp(key, "env") && envc < MAX_ITEMS) envp[envc++] = val;
    else if (!strcmp(key, "cwd")) cwd = val;
    else if (!strcmp(key, "workdir")) workdir = val;
    else if (!strcmp(key, "cpu_seconds")) cpu = strtoull(val, NULL, 10);
    else if (!strcmp(key, "nofile")) nofile = strtoull(val, NULL, 10);
    else if (!strcmp(key, "fsize")) fsize = strtoull(val, NULL, 10);
    else if (!strcmp(key, "max_processes")) max_processes = strtoull(val, NULL, 10);
    else if (!strcmp(key, "fd3")) pass_fd3 = 1;
    else die("unknown request key %s", key);
  }
  argv[argc] = NULL;
  envp[envc] = NULL;
  if (argc == 0 || !workdir) die("request without argv or workdir");
  mount_9p("airlock_work", workdir, MS_NOSUID | MS_NODEV, "none");

  int in = openat(ctl, "stdin", O_RDONLY | O_NOFOLLOW);
  int fd3 = pass_fd3 ? openat(ctl, "fd3", O_RDONLY | O_NOFOLLOW) : -1;
  // Read, the control directory goes: the command's /tmp is the session's scratch directory alone.
  static const char* const entries[] = {"request", "stdin", "fd3", "vmlinux", "initramfs", "console"};
  for (size_t i = 0; i < sizeof entries / sizeof *entries; ++i) unlinkat(ctl, entries[i], 0);
  unlinkat(open("/tmp", O_PATH | O_DIRECTORY), ctl_name, AT_REMOVEDIR);
  int out = open("/dev/vport0p1", O_WRONLY);
  int err = open("/dev/vport0p2", O_WRONLY);
  if (in < 0 || out < 0 || err < 0) die("open stdin, stdout or stderr");

  int cgroup = prepare_process_limit(max_processes);
  // Born in its cgroup (no moment outside it) and in a cgroup namespace rooted there. clone3 with
  // fork's semantics: a new address space, SIGCHLD at its end.
  struct clone_args ca = {.flags = CLONE_INTO_CGROUP | CLONE_NEWCGROUP,
                          .exit_signal = SIGCHLD,
                          .cgroup = (unsigned long long)cgroup};
  pid_t child = (pid_t)syscall(SYS_clone3, &ca, sizeof ca);
  if (child < 0) die("process limit: clone3 into /sys/fs/cgroup/command");
  if (child == 0) {
    dup2(in, 0);
    dup2(out, 1);
    dup2(err, 2);
    if (fd3 >= 0) dup2(fd3, 3);
    for (int fd = fd3 >= 0 ? 4 : 3; fd < 64; ++fd) close(fd);  // the control directory and cgroup too
    set_limit(RLIMIT_CPU, cpu);
    set_limit(RLIMIT_NOFILE, nofile);
    set_limit(RLIMIT_FSIZE, fsize);
    // Guest root keeps its capabilities but these: rebooting (which would end the VM before the
    // agent reports) and tracing the agent (which holds the status port).
    if (prctl(PR_CAPBSET_DROP, CAP_SYS_BOOT, 0, 0, 0) < 0 || prctl(PR_CAPBSET_DROP, CAP_SYS_PTRACE, 0, 0, 0) < 0) {
      dprintf(2, "airlock-guest-agent: drop CAP_SYS_BOOT and CAP_SYS_PTRACE: %s\n", strerror(errno));
      _exit(126);
    }
    if (chdir(cwd) < 0) {
      dprintf(2, "airlock-guest-agent: chdir %s: %s\n", cwd, strerror(errno));
      _exit(126);
    }
    execve(argv[0], argv, envp);
    dprintf(2, "airlock-guest-agent: cannot execute %s: %s\n", argv[0], strerror(errno));
    _exit(errno == ENOENT ? 127 : 126);
  }
  // The command needs none of the hierarchy: it leaves the guest's view (the cgroup stays).
  close(cgroup);
  umount2("/sys/fs/cgroup", MNT_DETACH);
  // As pid 1 the agent reaps every orphan; the command's own end is what is recorded.
  int status = 0;
  for (;;) {
    int st;
    pid_t p = wait(&st);
    if (p == child) {
      status = st;
      break;
    }
    if (p < 0 && errno != EINTR) die("wait");
  }
  kill(-1, SIGKILL);  // the command's descendants end with it, as on every tier
  if (WIFEXITED(status)) dprintf(status_port, "exit %d\n", WEXITSTATUS(status));
  else dprintf(status_port, "signal %d\n", WTERMSIG(status));
  power_off();
}
