// The command line both executables share (airlock, airlock-serve).
#include "cli/app.h"

#include <unistd.h>

#include <cstdio>
#include <exception>
#include <filesystem>
#include <string_view>

#include <fmt/ranges.h>

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

// The verb the command line reached, as typed: "airlock run", "airlock policy check".
std::string verb_reached(const CLI::App& app, const std::string& name) {
  std::string path = name;
  for (const CLI::App* at = &app;;) {
    auto subs = at->get_subcommands();
    if (subs.empty()) return path;
    at = subs.front();
    path += " " + at->get_name();
  }
}

// A command line CLI11 could not parse, as a refusal with a stable code: an unknown option named
// as one, anything else in CLI11's words; the usage-error status.
int refuse_usage(const CLI::App& app, const CLI::ParseError& e, const std::string& name, bool json) {
  std::string verb = verb_reached(app, name);
  Error err{Code::OptionInvalid, e.what(), Json{{"verb", verb}}};
  if (dynamic_cast<const CLI::ExtrasError*>(&e)) {
    std::vector<std::string> options, arguments;
    for (const std::string& a : app.remaining(true))
      if (a == "--")
        continue;  // the end of options, kept by CLI11 among the leftovers
      else if (a.size() > 1 && a[0] == '-')
        options.push_back(a.substr(0, a.find('=')));
      else
        arguments.push_back(a);
    std::vector<std::string> parts;
    if (!options.empty())
      parts.push_back(fmt::format("{} {} not an option of `{}`", fmt::join(options, ", "),
                                  options.size() == 1 ? "is" : "are", verb));
    if (!arguments.empty())
      parts.push_back(fmt::format("`{}` takes no argument {}", verb, fmt::join(arguments, " ")));
    if (!parts.empty()) err.message = fmt::format("{}", fmt::join(parts, "; "));
    if (!options.empty()) err.facts["unknown_options"] = options;
    if (!arguments.empty()) err.facts["unexpected_arguments"] = arguments;
  }
  err.message += fmt::format(" (`{} --help` lists what it takes)", verb);
  refuse(err, json);
  return kUsageExit;
}

// One command of `app` and everything below it, as data: names, descriptions, options, and
// whether each option takes a value. `airlock --cli-reference` prints it; scripts/gen-cli-docs
// makes the man pages and the shell completion from it at build time, so they say what --help
// says. Hidden options (no group) are left out, as --help leaves them out.
Json cli_reference(const CLI::App& app) {
  Json options = Json::array(), positionals = Json::array(), subcommands = Json::array();
  for (const CLI::Option* o : app.get_options()) {
    if (o->get_group().empty()) continue;
    Json j = {{"description", o->get_description()}, {"required", o->get_required()}};
    if (o->get_positional()) {
      j["name"] = o->get_name(true);
      j["repeats"] = o->get_items_expected_max() > 1;
      positionals.push_back(std::move(j));
      continue;
    }
    Json names = Json::array();
    for (const std::string& s : o->get_snames()) names.push_back("-" + s);
    for (const std::string& l : o->get_lnames()) names.push_back("--" + l);
    j["names"] = std::move(names);
    j["value"] = o->get_type_size_max() == 0 ? "" : o->get_type_name();
    options.push_back(std::move(j));
  }
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; }))
    if (!sub->get_group().empty()) subcommands.push_back(cli_reference(*sub));
  return {{"name", app.get_name()},
          {"description", app.get_description()},
          {"passes_arguments_through", app.get_prefix_command()},
          {"options", std::move(options)},
          {"positionals", std::move(positionals)},
          {"subcommands", std::move(subcommands)}};
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
  // The global options below are taken after the verb too (`airlock run --state-dir X CMD`):
  // fallthrough is inherited by every verb added after it.
  app.fallthrough();
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
  if (argc == 2 && std::string_view(argv[1]) == "--cli-reference") {
    Json ref = cli_reference(app);
    ref["name"] = name;
    std::printf("%s\n", ref.dump(2).c_str());
    return 0;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    return refuse_usage(app, e, name, g.json);
  }
  try {
    return run ? run() : 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "airlock: internal error: %s\n", e.what());
    return 70;
  }
}

}  // namespace airlock::cli
