// userns: the uid/gid maps of a sandbox's user namespace, written by its parent.
#pragma once

#include <sys/types.h>

#include <string>

namespace airlock::linux {

// "inside outside 1": the caller's own ids, mapped to themselves (as bubblewrap does), so files
// the sandbox writes in the view belong to the caller. An unprivileged caller may map nothing else.
struct IdMaps {
  std::string uid_map;
  std::string gid_map;
};
IdMaps prepare_id_maps(uid_t uid, gid_t gid);

// Parent side, allocation-free: writes setgroups "deny", gid_map and uid_map of `pid`.
// Returns 0 or an errno.
int apply_id_maps(pid_t pid, const IdMaps& maps) noexcept;

}  // namespace airlock::linux
