// userns: id maps.
#include "linux/userns.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace airlock::linux {

IdMaps prepare_id_maps(uid_t uid, gid_t gid) {
  IdMaps m;
  m.uid_map = std::to_string(uid) + " " + std::to_string(uid) + " 1\n";
  m.gid_map = std::to_string(gid) + " " + std::to_string(gid) + " 1\n";
  return m;
}

namespace {
int write_proc(pid_t pid, const char* file, const char* data, size_t len) noexcept {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/%s", static_cast<int>(pid), file);
  int fd = ::open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return errno;
  ssize_t n = ::write(fd, data, len);
  int e = n == static_cast<ssize_t>(len) ? 0 : (n < 0 ? errno : EIO);
  ::close(fd);
  return e;
}
}  // namespace

int apply_id_maps(pid_t pid, const IdMaps& maps) noexcept {
  // setgroups must be denied before an unprivileged writer may set gid_map.
  if (int e = write_proc(pid, "setgroups", "deny", 4)) return e;
  if (int e = write_proc(pid, "gid_map", maps.gid_map.data(), maps.gid_map.size())) return e;
  return write_proc(pid, "uid_map", maps.uid_map.data(), maps.uid_map.size());
}

}  // namespace airlock::linux
