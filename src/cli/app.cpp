// The command line both executables share (airlock, airlock-serve).
#include "cli/app.h"

#include <unistd.h>

#include <cstdio>
#include <exception>
#include <filesystem>
#include <string_view>

#include "base/custody.h"
#include "base/hash.h"
#include "cli/build_info.h"

namespace airlock::cli {
namespace {

// `NAME VERSION revision REV sha256 HEX`: what this executable is, down to its bytes (the
// file this process runs, whatever path started it).
std::string version_line(const std::string& name) {
  auto sha = sha256_file("/proc/self/exe");
  return fmt::format("{} {} revision {} sha256 {}", name, kVersion, kRevision, sha ? *sha : "unknown");
}

}  // namespace

int run_app(int argc, char** argv, std::initializer_list<AddVerb> verbs) {
  // Custody first, before a flag is parsed: an executable someone else could replace is not
  // airlock's to run. (The escape suite's probes are airlock-probe, a program of their own, run
  // inside sandboxes where the file's owner shows as the overflow id.)
  if (auto custody = check_executable_custody("/proc/self/exe", ::geteuid()); !custody)
    return refuse(custody.error(), false);
  CLI::App app{"airlock: a governed execution engine for AI agents"};
  app.require_subcommand(1);
  std::string name = argc > 0 ? std::filesystem::path(argv[0]).filename().string() : "";
  if (name.empty()) name = "airlock";
  app.set_version_flag("--version", [&name] { return version_line(name); },
                       "print the version, the git revision and this executable's sha256");
  Globals g;
  g.args.assign(argv + 1, argv + argc);
  app.add_option("--state-dir", g.state_dir, "state directory (receipts, session views)");
  app.add_option("--profile", g.profile, "production (default) or development")
      ->check(CLI::IsMember({"production", "development"}));
  app.add_option("--store", g.store_url, "run store: postgresql://... or sqlite:PATH (default: airlock.db in the state dir)");
  app.add_option("--machine-id", g.machine_id, "act as this machine in the run store (default: /etc/machine-id)");
  Action run;
  for (AddVerb add : verbs) add(app, g, run);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  try {
    return run ? run() : 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "airlock: internal error: %s\n", e.what());
    return 70;
  }
}

}  // namespace airlock::cli
