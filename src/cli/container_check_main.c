/* airlock-container-check: the container tier's program inside every container (exec/container_engine.h).
 * Static and alone, so it runs in any image whatever its userland. Two modes:
 *
 *   airlock-container-check
 *     What the probe runs: it reports what confines it, one "key value" line each, and the probe
 *     judges: its capabilities, no_new_privs and seccomp mode, whether the root is writable,
 *     whether the network has anything but loopback, its cgroups and their limits.
 *
 *   airlock-container-check --init [--pass] [--join N] -- COMMAND [ARG...]
 *     The container's first process for every run: it starts COMMAND, passes it the signals the
 *     engine sends, reaps what is orphaned, and exits with COMMAND's status (128 + the signal for
 *     a signal), which ends everything else in the container. Descriptor 3 is its lifeline, the
 *     read end of a pipe only airlock holds the other end of: when it reads end-of-file (airlock is
 *     gone, killed outright), it kills everything in the container at once, so nothing outlives the
 *     airlock that started it. Descriptor 4 is its report to airlock, records of two 32-bit
 *     integers {kind, value}: 1 = COMMAND could not be started (the errno of its exec), 2 = the
 *     init itself failed (an errno), 3 = COMMAND exited (its code), 4 = a signal ended it (the
 *     signal), so airlock never takes a failure for an exit status nor needs the engine to learn it. Neither
 *     reaches COMMAND. With --pass, descriptor 5 is COMMAND's descriptor 3 (AIRLOCK_CREDENTIALS_FD).
 *     With --join N, the next N descriptors are cgroup join files (cgroup.procs, or v1 tasks) of
 *     airlock's: the init writes "0" to each before it starts COMMAND, so the container and
 *     nothing of the engine is in the cgroup whose limits bind it (rootless, where the engine
 *     makes none); a join that fails fails the run. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

enum { kLifeline = 3, kExecReport = 4, kPassed = 5 };
enum { kExecFailed = 1, kInitFailed = 2, kExited = 3, kKilledBy = 4 };

static void report(int32_t kind, int32_t value) {
  int32_t r[2] = {kind, value};
  (void)!write(kExecReport, r, sizeof r);
}

/* The init's own failure: reported, and everything in the container killed. */
static int init_failed(const char* what) {
  int e = errno ? errno : EINVAL;
  fprintf(stderr, "airlock-container-check --init: %s: %s\n", what, strerror(e));
  report(kInitFailed, e);
  kill(-1, SIGKILL);
  return 125;
}

static int run_init(char** argv, int pass, int joins) {
  if (fcntl(kExecReport, F_GETFD) < 0) {
    fprintf(stderr, "airlock-container-check --init: descriptor 4 (exec report) must be open\n");
    return 125;
  }
  if (fcntl(kLifeline, F_GETFD) < 0 || (pass && fcntl(kPassed, F_GETFD) < 0)) return init_failed("descriptor 3 or 5");
  for (int i = 0, fd = pass ? kPassed + 1 : kPassed; i < joins; ++i, ++fd) {
    if (write(fd, "0", 1) != 1) return init_failed("join airlock's cgroup");
    close(fd);
  }
  /* No process of the container may trace or read this one's memory (nor its report descriptor). */
  if (prctl(PR_SET_DUMPABLE, 0) < 0) return init_failed("prctl");
  sigset_t all, old;
  sigfillset(&all);
  sigprocmask(SIG_BLOCK, &all, &old);
  int sfd = signalfd(-1, &all, SFD_CLOEXEC);
  if (sfd < 0) return init_failed("signalfd");
  pid_t child = fork();
  if (child < 0) return init_failed("fork");
  if (child == 0) {
    sigprocmask(SIG_SETMASK, &old, NULL);
    close(kLifeline);
    if (pass && (dup2(kPassed, kLifeline) < 0 || close(kPassed) < 0)) {
      report(kInitFailed, errno);
      _exit(125);
    }
    if (fcntl(kExecReport, F_SETFD, FD_CLOEXEC) < 0) {
      report(kInitFailed, errno);
      _exit(125);
    }
    execvp(argv[0], argv);
    int e = errno;
    report(kExecFailed, e);
    _exit(e == ENOENT ? 127 : 126);
  }
  if (pass) close(kPassed);
  struct pollfd p[2] = {{.fd = kLifeline, .events = POLLIN}, {.fd = sfd, .events = POLLIN}};
  for (;;) {
    if (poll(p, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return init_failed("poll");
    }
    if (p[0].revents) {
      char b[64];
      ssize_t n = read(kLifeline, b, sizeof b);
      if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) {
        /* airlock is gone: so is everything it started. */
        kill(-1, SIGKILL);
        return 128 + SIGKILL;
      }
    }
    if (p[1].revents) {
      struct signalfd_siginfo si;
      /* Passed on only when kill(2) sent it from outside the container (the engine's): its pid is
       * 0 here, and no process may forge SI_USER with sigqueue. */
      if (read(sfd, &si, sizeof si) == sizeof si && si.ssi_signo != SIGCHLD && si.ssi_code == SI_USER &&
          si.ssi_pid == 0)
        kill(child, (int)si.ssi_signo);
    }
    /* Reaped after every wake-up, whatever woke it: signals queued ahead of SIGCHLD never delay it. */
    int status;
    pid_t w;
    while ((w = waitpid(-1, &status, WNOHANG)) > 0)
      if (w == child) {
        if (WIFSIGNALED(status)) {
          report(kKilledBy, WTERMSIG(status));
          return 128 + WTERMSIG(status);
        }
        report(kExited, WEXITSTATUS(status));
        return WEXITSTATUS(status);
      }
  }
}

static void status_field(const char* name) {
  char line[512];
  FILE* f = fopen("/proc/self/status", "r");
  size_t n = strlen(name);
  if (!f) {
    printf("%s unreadable\n", name);
    return;
  }
  while (fgets(line, sizeof line, f))
    if (strncmp(line, name, n) == 0 && line[n] == ':') {
      char* v = line + n + 1;
      while (*v == ' ' || *v == '\t') ++v;
      printf("%s %s", name, v);
    }
  fclose(f);
}

static void file_value(const char* key, const char* path) {
  char v[128];
  FILE* f = fopen(path, "r");
  if (!f) return;
  if (fgets(v, sizeof v, f)) printf("%s %s", key, v);
  fclose(f);
}

int main(int argc, char** argv) {
  if (argc >= 2 && strcmp(argv[1], "--init") == 0) {
    int pass = 0, joins = 0, i = 2;
    if (i < argc && strcmp(argv[i], "--pass") == 0) pass = 1, ++i;
    if (i + 1 < argc && strcmp(argv[i], "--join") == 0) {
      joins = atoi(argv[i + 1]);
      i += 2;
    }
    if (i + 1 < argc && strcmp(argv[i], "--") == 0 && joins >= 0 && joins <= 8) return run_init(argv + i + 1, pass, joins);
  }
  if (argc != 1) {
    fprintf(stderr, "usage: airlock-container-check | airlock-container-check --init [--pass] [--join N] -- COMMAND [ARG...]\n");
    return 125;
  }
  char line[1024];
  status_field("CapEff");
  status_field("CapBnd");
  status_field("NoNewPrivs");
  status_field("Seccomp");
  int fd = open("/.airlock-check-write", O_CREAT | O_WRONLY | O_EXCL, 0600);
  printf("root_write %d\n", fd >= 0 ? 0 : errno);
  if (fd >= 0) unlink("/.airlock-check-write");
  DIR* d = opendir("/sys/class/net");
  int others = 0;
  if (d) {
    struct dirent* e;
    while ((e = readdir(d)))
      if (e->d_name[0] != '.' && strcmp(e->d_name, "lo") != 0) ++others;
    closedir(d);
  }
  printf("net_devices_besides_lo %d\n", d ? others : -1);
  FILE* f = fopen("/proc/self/cgroup", "r");
  while (f && fgets(line, sizeof line, f)) printf("cgroup %s", line);
  if (f) fclose(f);
  /* The limits of the cgroup the container sees as its own: v1, then cgroup2. */
  file_value("memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.limit_in_bytes");
  file_value("pids.max", "/sys/fs/cgroup/pids/pids.max");
  file_value("memory.max", "/sys/fs/cgroup/memory.max");
  file_value("pids.max", "/sys/fs/cgroup/pids.max");
  printf("end\n");
  return 0;
}
