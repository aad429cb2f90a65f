// rlimits: memory (address space), CPU seconds, process count, file size, open files; core dumps off.
#include "linux/rlimits.h"

#include <cerrno>

namespace airlock::linux {

RlimitSet prepare_rlimits(const plan::LimitsPlan& l) {
  RlimitSet s;
  auto add = [&](int res, const char* name, uint64_t soft, uint64_t hard) {
    s.entries[s.count++] = {res, {static_cast<rlim_t>(soft), static_cast<rlim_t>(hard)}};
    s.applied.push_back({name, soft, hard});
  };
  if (l.memory_bytes) add(RLIMIT_AS, "RLIMIT_AS", l.memory_bytes, l.memory_bytes);
  // SIGXCPU at the limit, SIGKILL one second later if it is caught.
  if (l.cpu_seconds) add(RLIMIT_CPU, "RLIMIT_CPU", l.cpu_seconds, l.cpu_seconds + 1);
  if (l.process_mechanism == plan::ProcessLimitMechanism::RlimitNproc && l.max_processes)
    add(RLIMIT_NPROC, "RLIMIT_NPROC", l.max_processes, l.max_processes);
  if (l.max_file_bytes) add(RLIMIT_FSIZE, "RLIMIT_FSIZE", l.max_file_bytes, l.max_file_bytes);
  if (l.max_open_files) add(RLIMIT_NOFILE, "RLIMIT_NOFILE", l.max_open_files, l.max_open_files);
  add(RLIMIT_CORE, "RLIMIT_CORE", 0, 0);  // a core dump would write memory outside the view
  return s;
}

int apply_rlimits(const RlimitSet& set) noexcept {
  for (size_t i = 0; i < set.count; ++i)
    if (::setrlimit(set.entries[i].resource, &set.entries[i].value) < 0) return errno;
  return 0;
}

std::vector<std::string> rlimit_names(uint32_t mask) {
  static constexpr const char* kNames[] = {"RLIMIT_CPU",    "RLIMIT_FSIZE",  "RLIMIT_DATA",   "RLIMIT_STACK",
                                           "RLIMIT_CORE",   "RLIMIT_RSS",    "RLIMIT_NPROC",  "RLIMIT_NOFILE",
                                           "RLIMIT_MEMLOCK", "RLIMIT_AS",    "RLIMIT_LOCKS",  "RLIMIT_SIGPENDING",
                                           "RLIMIT_MSGQUEUE", "RLIMIT_NICE", "RLIMIT_RTPRIO", "RLIMIT_RTTIME"};
  std::vector<std::string> out;
  for (uint32_t r = 0; r < 32; ++r)
    if (mask & (1u << r)) out.push_back(r < std::size(kNames) ? kNames[r] : "RLIMIT_" + std::to_string(r));
  return out;
}

}  // namespace airlock::linux
