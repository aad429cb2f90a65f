// `airlock serve`: hands the whole command line to airlock-serve, the executable beside this one.
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "cli/verbs.h"

namespace airlock::cli {

void add_serve_stub(CLI::App& app, Globals& g, Action& run) {
  auto* cmd = app.add_subcommand("serve", "serve the broker's HTTP API on a unix socket (and loopback TCP)");
  // Every option, --help and the global ones included, is airlock-serve's to parse (it takes the
  // whole command line): none falls through to ours.
  cmd->prefix_command();
  cmd->fallthrough(false);
  cmd->set_help_flag();
  cmd->callback([&g, &run] {
    run = [&g] {
      std::error_code ec;
      auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
      if (ec) return refuse(Error{Code::ConfigError, "cannot find this executable: " + ec.message()}, g.json);
      std::string serve = (self.parent_path() / "airlock-serve").string();
      std::vector<char*> argv{const_cast<char*>("airlock-serve")};
      for (std::string& a : g.args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(serve.c_str(), argv.data());
      return refuse(Error{Code::ConfigError,
                          fmt::format("cannot run {}: {}; `airlock serve` is that executable, installed beside airlock",
                                      serve, std::strerror(errno)),
                          Json{{"path", serve}}},
                    g.json);
    };
  });
}

}  // namespace airlock::cli
