/* airlock-container-check: what the container tier's probe runs inside a container (exec/container_engine.h).
 * Static and alone, so it runs in any image whatever its userland. It reports what confines it,
 * one "key value" line each, and the probe judges: its capabilities, no_new_privs and seccomp mode,
 * whether the root is writable, whether the network has anything but loopback, its cgroups and
 * their limits. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

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

int main(void) {
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
