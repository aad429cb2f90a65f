// `airlock image build NAME --from-dir DIR | --from-debian PACKAGE...` (an OCI image for the
// container tier, made here from a directory or from Debian packages, pinned by digest and checked), `airlock image list` (the images and their checks on
// this host) and `airlock image check` (every image checked again, now).
#include <cstdio>

#include <fmt/format.h>

#include "cli/verbs.h"
#include "exec/container_engine.h"
#include "exec/planner.h"

namespace airlock::cli {
namespace {

struct ImageOptions {
  std::string name, from_dir;
  std::vector<std::string> from_debian;
};

// The container facts measured now (fresh: every check run again) or as kept for this boot.
plan::HostFacts container_facts(const std::string& state, bool fresh) {
  plan::FactNeeds needs;
  needs.cgroups = needs.container = true;
  return exec::HostProbe(state, fresh ? exec::HostProbe::Measure::Fresh : exec::HostProbe::Measure::PerBoot)
      .facts(needs);
}

Json facts_json(const plan::HostFacts& f) {
  Json images = Json::array();
  for (const auto& i : f.container.images)
    images.push_back({{"reference", i.reference}, {"image_id", i.image_id}, {"ok", i.ok}, {"reason", i.reason},
                      {"checked_at", i.checked_at}});
  auto why = f.reasons.find("container");
  return {{"engine", f.container.engine.empty() ? Json(nullptr) : Json(f.container.engine)},
          {"version", f.container.version},
          {"runtime", f.container.runtime},
          {"rootless", f.container.rootless},
          {"reason", why != f.reasons.end() ? Json(why->second) : Json(nullptr)},
          {"images", images}};
}

void print_facts(const plan::HostFacts& f, bool json) {
  if (json) {
    std::printf("%s\n", facts_json(f).dump(2).c_str());
    return;
  }
  if (f.container.engine.empty()) {
    auto why = f.reasons.find("container");
    std::printf("engine   none: %s\n", why != f.reasons.end() ? why->second.c_str() : "absent");
  } else {
    std::printf("engine   %s %s, runtime %s%s\n", f.container.engine.c_str(), f.container.version.c_str(),
                f.container.runtime.c_str(), f.container.rootless ? ", rootless" : "");
  }
  if (f.container.images.empty()) std::printf("images   none (airlock image build NAME --from-dir DIR)\n");
  for (const auto& i : f.container.images)
    std::printf("%s\n  %s: %s\n", i.reference.c_str(), i.ok ? "checked" : "NOT USABLE", i.reason.c_str());
}

int image_build(Globals& g, const ImageOptions& o) {
  auto state = resolve_state_dir(g.state_dir);
  if (!state) return refuse(state.error(), g.json);
  if (o.from_dir.empty() == o.from_debian.empty())
    return refuse(Error{Code::OptionInvalid, "airlock image build: give --from-dir DIR or --from-debian PACKAGE..."},
                  g.json);
  auto rec = o.from_dir.empty() ? exec::build_image_from_debian(*state, o.name, o.from_debian)
                                : exec::build_image_from_dir(*state, o.name, o.from_dir);
  if (!rec) return refuse(rec.error(), g.json);
  // Checked at once, so a policy naming it can run: the one writer of the facts measures it.
  auto f = container_facts(*state, false);
  const plan::ContainerImageFact* fact = nullptr;
  for (const auto& i : f.container.images)
    if (i.reference == rec->reference) fact = &i;
  if (g.json) {
    Json j = rec->to_json();
    j["ok"] = fact && fact->ok;
    j["reason"] = fact ? fact->reason : f.reasons["container"];
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("%s\n", rec->reference.c_str());
    std::fprintf(stderr, "airlock image build: %s\n",
                 fact ? (fact->ok ? "checked: " + fact->reason : "NOT USABLE: " + fact->reason).c_str()
                      : ("NOT USABLE: " + f.reasons["container"]).c_str());
  }
  if (!fact || !fact->ok)
    return refuse(Error{Code::ExecutorUnavailable,
                        fmt::format("the image {} was built but does not pass the container check here: {}",
                                    rec->reference, fact ? fact->reason : f.reasons["container"]),
                        {{"image", rec->reference}}},
                  g.json);
  return 0;
}

int image_list(Globals& g, bool fresh) {
  auto state = resolve_state_dir(g.state_dir);
  if (!state) return refuse(state.error(), g.json);
  print_facts(container_facts(*state, fresh), g.json);
  return 0;
}

}  // namespace

void add_image(CLI::App& app, Globals& g, Action& run) {
  static ImageOptions o;
  auto* image = app.add_subcommand("image", "the container tier's images: build one from a directory, list, check");
  image->require_subcommand(1);
  auto* build = image->add_subcommand("build", "make an OCI image from a directory, pin it by digest and check it here");
  build->add_option("name", o.name, "the image's name, without a tag (tools, localhost/tools)")->required();
  auto* from_dir =
      build->add_option("--from-dir", o.from_dir, "the directory that becomes the image's file system (absolute)");
  build->add_option("--from-debian", o.from_debian,
                    "Debian packages (and what they depend on), downloaded by apt and unpacked as the image")
      ->expected(1, -1)
      ->excludes(from_dir);
  build->add_flag("--json", g.json, "print the image's record as JSON");
  build->callback([&g, &run] { run = [&g] { return image_build(g, o); }; });
  auto* list = image->add_subcommand("list", "the images airlock built, and whether each passed the check here");
  list->add_flag("--json", g.json, "print as JSON");
  list->callback([&g, &run] { run = [&g] { return image_list(g, false); }; });
  auto* check = image->add_subcommand("check", "run the container check in every image again, now");
  check->add_flag("--json", g.json, "print as JSON");
  check->callback([&g, &run] { run = [&g] { return image_list(g, true); }; });
}

}  // namespace airlock::cli
