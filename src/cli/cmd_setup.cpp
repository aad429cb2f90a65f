// `airlock setup delegate USER` and `setup undelegate USER` (root): the cgroups an unprivileged user
// needs for the namespaces tier, made in the one place the probe looks for them.
#include <fmt/ranges.h>
#include <pwd.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "cli/verbs.h"
#include "linux/cgroup.h"

namespace airlock::cli {
namespace {

struct User {
  std::string name;
  uid_t uid;
  gid_t gid;
};

// A name from the password database, or a number that is a uid there.
Result<User> find_user(const std::string& arg) {
  std::vector<char> buf(16384);
  struct passwd pw {
  }, *found = nullptr;
  if (::getpwnam_r(arg.c_str(), &pw, buf.data(), buf.size(), &found) != 0 || !found) {
    char* end = nullptr;
    unsigned long n = arg.empty() ? 0 : std::strtoul(arg.c_str(), &end, 10);
    if (arg.empty() || *end != '\0' ||
        ::getpwuid_r(static_cast<uid_t>(n), &pw, buf.data(), buf.size(), &found) != 0 || !found)
      return fail(Code::OptionInvalid, fmt::format("no user named {} on this host", arg), {{"user", arg}});
  }
  return User{found->pw_name, found->pw_uid, found->pw_gid};
}

// Root only, before anything is looked at: both verbs change what other users may do.
Result<User> checked_user(const std::string& verb, const std::string& arg) {
  if (::geteuid() != 0)
    return fail(Code::Unauthorized,
                fmt::format("airlock setup {} changes the host's cgroups and needs root (running as uid {}); "
                            "run: sudo airlock setup {} {}",
                            verb, ::geteuid(), verb, arg),
                {{"uid", ::geteuid()}});
  return find_user(arg);
}

int delegate(Globals& g, const std::string& arg) {
  auto user = checked_user("delegate", arg);
  if (!user) return refuse(user.error(), g.json);
  if (!linux::cgroup_v1_hierarchies_present()) {
    // cgroup2: delegation belongs to systemd, which owns the tree; we say what to type instead.
    std::string command = linux::cgroup_v2_fix_command(user->uid);
    if (!g.json)
      std::printf("cgroup v2 host: delegate to %s through systemd:\n  %s\n", user->name.c_str(),
                  command.c_str());
    return refuse(
        Error{Code::ConfigError,
              "this host has no cgroup v1 hierarchies of memory, pids and cpu; airlock does not edit "
              "systemd's cgroup2 tree: run " +
                  command,
              {{"command", command}}},
        g.json);
  }
  auto dirs = linux::delegate_cgroups(user->uid, user->gid);
  if (!dirs) return refuse(dirs.error(), g.json);
  if (g.json) {
    std::printf("%s\n", Json{{"user", user->name}, {"uid", user->uid}, {"delegated", *dirs}}.dump(2).c_str());
  } else {
    std::printf("delegated to %s (uid %u): %s\n", user->name.c_str(), user->uid,
                fmt::format("{}", fmt::join(*dirs, " ")).c_str());
    std::printf("%s's airlock now makes its sandbox cgroups there (airlock doctor shows the base)\n",
                user->name.c_str());
  }
  return 0;
}

int undelegate(Globals& g, const std::string& arg) {
  auto user = checked_user("undelegate", arg);
  if (!user) return refuse(user.error(), g.json);
  auto dirs = linux::undelegate_cgroups(user->uid);
  if (!dirs) return refuse(dirs.error(), g.json);
  if (g.json) {
    std::printf("%s\n", Json{{"user", user->name}, {"uid", user->uid}, {"removed", *dirs}}.dump(2).c_str());
  } else if (dirs->empty()) {
    std::printf("nothing delegated to %s (uid %u)\n", user->name.c_str(), user->uid);
  } else {
    std::printf("removed: %s\n", fmt::format("{}", fmt::join(*dirs, " ")).c_str());
  }
  return 0;
}

}  // namespace

void add_setup(CLI::App& app, Globals& g, Action& run) {
  auto* setup = app.add_subcommand("setup", "host setup for unprivileged users (root)");
  setup->require_subcommand(1);
  setup->add_flag("--json", g.json, "print JSON");
  static std::string user;
  auto* del = setup->add_subcommand(
      "delegate", "give USER cgroups of its own (v1: /sys/fs/cgroup/<controller>/airlock.delegate/<uid>)");
  del->add_option("USER", user, "user name or uid")->required();
  del->callback([&g, &run] { run = [&g] { return delegate(g, user); }; });
  auto* undel =
      setup->add_subcommand("undelegate", "remove what setup delegate made for USER (only if empty)");
  undel->add_option("USER", user, "user name or uid")->required();
  undel->callback([&g, &run] { run = [&g] { return undelegate(g, user); }; });
}

}  // namespace airlock::cli
