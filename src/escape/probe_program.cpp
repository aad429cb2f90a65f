// airlock-probe: the table of probes (escape/scenarios.inc, the probe halves), the helpers they
// share, and the one JSON line each prints. Output is written with write(2), never stdio, because
// the outlive_session probe forks and a stdio buffer would be printed twice.
#include "escape/probe_program.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "escape/scenario.h"

namespace airlock::escape {

namespace scenarios {
#define AIRLOCK_SCENARIO(enumerator, name, policy) \
  namespace name {                                 \
  ProbeReport probe(const ProbeInput& in);         \
  }
#include "escape/scenarios.inc"
namespace second_sandbox_files {
[[noreturn]] void neighbour(const ProbeInput& in);
}
}  // namespace scenarios

namespace {

struct ProbeRow {
  std::string_view name;
  ProbeReport (*probe)(const ProbeInput&);
};

constexpr ProbeRow kProbes[] = {
#define AIRLOCK_SCENARIO(enumerator, name, policy) {#name, &scenarios::name::probe},
#include "escape/scenarios.inc"
};

// The suite's host process: waits to be killed, with SIGUSR1 blocked so a signal sent to it stays
// pending where the suite can see it.
[[noreturn]] void host_sleeper() {
  sigset_t usr1;
  sigemptyset(&usr1);
  sigaddset(&usr1, SIGUSR1);
  ::sigprocmask(SIG_BLOCK, &usr1, nullptr);
  for (;;) ::pause();
}

void print(const std::string& name, const ProbeReport& r) {
  nlohmann::ordered_json j;
  j["probe"] = name;
  j["breached"] = r.breached;
  j["evidence"] = r.evidence;
  j["errno"] = r.err;
  for (const auto& [k, v] : r.extra.items()) j[k] = v;
  write_all(1, j.dump() + "\n");
}

int usage(const char* why) {
  write_all(
      2, fmt::format("{}: {}\nusage: {} NAME --run MARKER [ARGS...]\n", kProbeProgram, why, kProbeProgram));
  return 2;
}

}  // namespace

const std::string& ProbeInput::arg(size_t i) const {
  static const std::string none;
  return i < args.size() ? args[i] : none;
}

int ProbeInput::port(size_t i) const { return std::atoi(arg(i).c_str()); }

std::string err_name(int e) {
  const char* n = ::strerrorname_np(e);
  return fmt::format("{} ({})", n ? std::string(n) : std::to_string(e), std::strerror(e));
}

std::string printable(std::string_view s, size_t max) {
  std::string out;
  for (char c : s) {
    if (out.size() >= max) return out + "...";
    out += c == '\n' || c == '\0' ? ' ' : (c >= 0x20 && c < 0x7f ? c : '.');
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

ReadResult read_some(const std::string& path, size_t max) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {errno, {}};
  std::string data(max, '\0');
  ssize_t n = ::read(fd, data.data(), max);
  int e = errno;
  ::close(fd);
  if (n < 0) return {e, {}};
  data.resize(static_cast<size_t>(n));
  return {0, std::move(data)};
}

int write_new(const std::string& path, std::string_view content) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) return errno;
  int e = ::write(fd, content.data(), content.size()) < 0 ? errno : 0;
  ::close(fd);
  return e;
}

void write_all(int fd, std::string_view s) {
  while (!s.empty()) {
    ssize_t n = ::write(fd, s.data(), s.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    s.remove_prefix(static_cast<size_t>(n));
  }
}

double monotonic_seconds(clockid_t clock) {
  timespec ts{};
  ::clock_gettime(clock, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

int run_probe_program(int argc, char** argv) {
  // NAME --run MARKER [ARGS...]: a fixed shape, parsed by hand (no option library in a program
  // that every workspace carries).
  if (argc < 4 || std::string_view(argv[2]) != "--run") return usage("expected NAME --run MARKER [ARGS...]");
  ProbeInput in{argv[1], argv[3], std::vector<std::string>(argv + 4, argv + argc)};
  if (in.name == kSleeperProbe) host_sleeper();
  if (in.name == kNeighbourProbe) scenarios::second_sandbox_files::neighbour(in);
  for (const ProbeRow& row : kProbes) {
    if (row.name != in.name) continue;
    // Proof that the probe ran at all: a probe killed by a limit prints no report, and the suite
    // must tell that apart from an executor that never started it.
    write_all(2, probe_started_line(in.name) + "\n");
    print(in.name, row.probe(in));
    return 0;
  }
  return usage(fmt::format("unknown probe \"{}\"", in.name).c_str());
}

}  // namespace airlock::escape
