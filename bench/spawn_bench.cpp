// spawn_bench: times whole commands, interleaved round by round, and prints medians and ratios.
// Usage: spawn_bench [--rounds N] [--warmup N] [--json] NAME=COMMAND ... (COMMAND split on spaces;
// the first variant is the baseline the ratios refer to).
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

extern char** environ;

namespace {

struct Variant {
  std::string name;
  std::vector<std::string> argv;
  std::vector<double> ms;
  int failures = 0;
};

double run_once(Variant& v) {
  std::vector<char*> av;
  for (auto& a : v.argv) av.push_back(a.data());
  av.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  auto t0 = std::chrono::steady_clock::now();
  pid_t pid;
  int rc = posix_spawn(&pid, av[0], &fa, nullptr, av.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) {
    ++v.failures;
    return -1;
  }
  int st = 0;
  waitpid(pid, &st, 0);
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) ++v.failures;
  return ms;
}

double pct(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t i = static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 200, warmup = 10;
  bool json = false;
  std::vector<Variant> vs;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--rounds" && i + 1 < argc) { rounds = std::stoi(argv[++i]); continue; }
    if (a == "--warmup" && i + 1 < argc) { warmup = std::stoi(argv[++i]); continue; }
    if (a == "--json") { json = true; continue; }
    auto eq = a.find('=');
    if (eq == std::string::npos) {
      std::fprintf(stderr, "spawn_bench: expected NAME=COMMAND, got %s\n", a.c_str());
      return 2;
    }
    Variant v{a.substr(0, eq), {}, {}, 0};
    std::istringstream in(a.substr(eq + 1));
    for (std::string w; in >> w;) v.argv.push_back(w);
    vs.push_back(std::move(v));
  }
  if (vs.empty()) {
    std::fprintf(stderr, "usage: spawn_bench [--rounds N] [--warmup N] [--json] NAME=COMMAND...\n");
    return 2;
  }
  for (int r = 0; r < warmup; ++r)
    for (auto& v : vs) run_once(v);
  for (auto& v : vs) v.failures = 0;
  // Interleaved: every round runs every variant once, so drift on a noisy machine hits all alike.
  for (int r = 0; r < rounds; ++r)
    for (auto& v : vs) {
      double ms = run_once(v);
      if (ms >= 0) v.ms.push_back(ms);
    }
  double base = pct(vs[0].ms, 0.5);
  if (json) std::printf("[");
  for (size_t i = 0; i < vs.size(); ++i) {
    auto& v = vs[i];
    double med = pct(v.ms, 0.5), p90 = pct(v.ms, 0.9);
    if (json) {
      std::printf("%s{\"name\":\"%s\",\"runs\":%zu,\"failures\":%d,\"median_ms\":%.4f,\"p10_ms\":%.4f,\"p90_ms\":%.4f,"
                  "\"ratio_to_%s\":%.3f,\"over_baseline_ms\":%.4f}",
                  i ? "," : "", v.name.c_str(), v.ms.size(), v.failures, med, pct(v.ms, 0.1), p90,
                  vs[0].name.c_str(), med / base, med - base);
    } else {
      std::printf("%-28s median %8.3f ms  p90 %8.3f ms  x%-6.2f (+%.3f ms)  runs %zu%s\n", v.name.c_str(), med, p90,
                  med / base, med - base, v.ms.size(), v.failures ? "  FAILURES" : "");
    }
  }
  if (json) std::printf("]\n");
  for (auto& v : vs)
    if (v.failures) return 1;
  return 0;
}
