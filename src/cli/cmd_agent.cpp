// `airlock agent run --profile NAME -- ARGS`: a whole agent CLI (Claude Code, Codex, Gemini) as
// one confined command. Before anything starts: the profile's bypass arguments, a model the
// policy does not name and an unasked resume are refused; the credential the agent needs is
// read here and handed over descriptor 3; every profile's credential files are hidden inside.
#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <cstdlib>

#include "base/fs.h"
#include "base/hash.h"
#include "base/relpath.h"
#include "base/unique_fd.h"
#include "cli/verbs.h"
#include "exec/tool_program.h"
#include "policy/agent_profile.h"

namespace airlock::cli {
namespace {

struct AgentOptions {
  RunOptions run;
  std::string profile;
  std::optional<std::string> executable;  // overrides the profile's, e.g. an npm install folder
  std::vector<std::string> pass_env;      // host variables copied by name (never a credential)
  bool no_credential = false;
  std::string model_ca;                   // the model host's trust store (default: the system's)
  std::optional<std::string> model_upstream;  // overrides the profile's model host
  std::vector<std::string> args;
};

std::string real_path(const std::string& p) {
  char buf[PATH_MAX];
  return ::realpath(p.c_str(), buf) ? std::string(buf) : p;
}

std::string operator_home() {
  if (const char* h = std::getenv("HOME"); h && *h) return absolute_path(h);
  if (const passwd* pw = ::getpwuid(::getuid()); pw && pw->pw_dir) return pw->pw_dir;
  return "/";
}

// The credential files of every profile that exist here; a symlink's target is listed too,
// since covering a symlink does not cover what it points at.
std::vector<std::string> present_credential_files(const std::string& home) {
  std::vector<std::string> out;
  for (const auto& p : policy::credential_paths(home)) {
    struct stat st{};
    if (::lstat(p.c_str(), &st) != 0) continue;
    out.push_back(p);
    if (S_ISLNK(st.st_mode))
      if (std::string target = real_path(p); target != p && ::lstat(target.c_str(), &st) == 0) out.push_back(target);
  }
  return out;
}

// The credential this run hands over: the profile's first variable set in airlock's own
// environment, else (for a profile without a model gateway, whose key must be a variable) its
// first credential file that exists (opened without following a link).
struct Credential {
  std::string source;  // "variable NAME" or "file PATH"
  std::string secret;
};
Result<std::optional<Credential>> find_credential(const policy::AgentProfile& p, const std::string& home) {
  for (const auto& v : p.credential_variables)
    if (const char* val = std::getenv(v.c_str()); val && *val) return Credential{"variable " + v, val};
  if (p.model_gateway) return std::optional<Credential>();
  for (const auto& f : p.credential_files) {
    std::string path = f.starts_with("~/") ? home + f.substr(1) : f;
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
    if (!fd) {
      if (errno == ENOENT) continue;
      return fail_errno(Code::IoError, "open the credential file " + path, errno);
    }
    std::string secret;
    char buf[4096];
    for (ssize_t n; (n = ::read(fd.get(), buf, sizeof buf)) != 0;) {
      if (n < 0) return fail_errno(Code::IoError, "read the credential file " + path, errno);
      secret.append(buf, static_cast<size_t>(n));
    }
    return Credential{"file " + path, std::move(secret)};
  }
  return std::optional<Credential>();
}

int agent_run(Globals& g, AgentOptions& o) {
  auto profile = policy::find_agent_profile(o.profile);
  if (!profile) return refuse(profile.error(), g.json);
  UniqueFd credential_fd;
  auto before = [&](SessionStart& start) -> Result<void> {
    const policy::TaskPolicy& pol = start.policy;
    TRY(policy::check_agent_args(*profile, o.args, pol.agent));
    bool engine = pol.confinement == policy::Confinement::Engine;
    if (!engine) TRY(policy::check_vendor_args(*profile, o.args));

    std::string exe = real_path(TRY(policy::resolve_trusted(o.executable.value_or(profile->executable))));
    std::string self = real_path("/proc/self/exe");
    auto exe_sha = TRY(sha256_file(exe));
    auto self_sha = TRY(sha256_file(self));
    // Pinned digests are enforced, not only recorded: a replaced binary never starts.
    for (const auto& [what, path, pin, have] :
         {std::tuple{"the agent executable", exe, pol.agent.executable_sha256, exe_sha},
          std::tuple{"airlock itself", self, pol.agent.airlock_sha256, self_sha}})
      if (pin && *pin != have)
        return fail(Code::CustodyUnsafe,
                    fmt::format("{} {} has sha256 {}, not the {} the policy pins", what, path, have, *pin),
                    {{"path", path}, {"sha256", have}, {"pinned", *pin}});
    if (engine) {
      std::vector<std::string> visible = {"/usr", "/bin", "/sbin", "/lib", "/lib64"};
      visible.insert(visible.end(), pol.read_only_paths.begin(), pol.read_only_paths.end());
      if (!under_any(exe, visible))
        return fail(Code::PolicyInvalid,
                    fmt::format("the agent executable {} is not beneath anything the sandbox may read; add its "
                                "install directory to the policy's read_only_paths",
                                exe),
                    {{"executable", exe}, {"read_only_paths", pol.read_only_paths}});
    }

    // Every profile's credential files, not just this one's: hidden beneath whatever is readable.
    std::string home = operator_home();
    start.facts.credential_files = present_credential_files(home);
    std::optional<std::string> ws = o.run.workspace ? o.run.workspace : pol.workspace;
    if (ws)
      for (const auto& c : start.facts.credential_files)
        if (is_under(c, real_path(absolute_path(*ws))) || is_under(c, absolute_path(*ws)))
          return fail(Code::PathDenied,
                      fmt::format("the workspace {} holds the credential file {}, which its view would copy", *ws, c),
                      {{"workspace", *ws}, {"credential_file", c}});

    // The composed command: the executable, the policy's model, the operator's arguments.
    std::vector<std::string> argv = {exe};
    if (pol.agent.model) {
      argv.push_back(profile->model_flags.front());
      argv.push_back(*pol.agent.model);
    }
    // Engine confinement: airlock's sandbox holds every command, the tool's own is off (it cannot
    // nest). Vendor confinement: the tool's own sandbox, composed as strict as the tool allows.
    if (engine) argv.insert(argv.end(), profile->engine_arguments.begin(), profile->engine_arguments.end());
    Json vendor_settings = nullptr;
    if (!engine) {
      bool network = pol.code_network.mode == policy::NetworkMode::Allowlist;
      const auto& settings = network ? profile->vendor_settings.network_allowed : profile->vendor_settings.network_off;
      argv.insert(argv.end(), settings.begin(), settings.end());
      vendor_settings = {{"arguments", settings}, {"network", network ? "as the policy allows" : "off"}};
    }
    argv.insert(argv.end(), o.args.begin(), o.args.end());

    o.run.scrub_env = policy::credential_variables();
    o.run.private_dirs = true;
    std::vector<std::string> scrubbed;
    for (const auto& name : o.pass_env) {
      if (std::find(o.run.scrub_env.begin(), o.run.scrub_env.end(), name) != o.run.scrub_env.end()) {
        scrubbed.push_back(name);
        continue;
      }
      if (const char* v = std::getenv(name.c_str())) o.run.env.push_back(name + "=" + v);
    }

    Json credential = nullptr;
    std::vector<std::string> gateway_args;  // the profile's, before the operator's
    if (o.model_upstream && !policy::is_model_upstream(*o.model_upstream))
      return fail(Code::OptionInvalid,
                  fmt::format("--model-upstream {} is not https://host[:port] with no path", *o.model_upstream),
                  {{"model_upstream", *o.model_upstream}});
    if (!o.no_credential) {
      auto cred = TRY(find_credential(*profile, home));
      const auto& gw = profile->model_gateway;
      if (cred && gw) {
        // Secretless: the key stays in this process, behind the door's model gateway; the agent
        // holds a placeholder and the gateway's URL. No door (code_network off): no route to the
        // model at all, so the key goes nowhere.
        bool door = engine && pol.code_network.mode == policy::NetworkMode::Allowlist;
        credential = {{"source", cred->source}};
        if (door) {
          std::string placeholder = "airlock-placeholder-" + random_id();
          o.run.model_gateway = egress::ModelGateway{o.model_upstream.value_or(gw->upstream), gw->credential_header, gw->credential_prefix,
                                                     placeholder,   std::move(cred->secret),  o.model_ca,
                                                     gw->paths};
          std::erase_if(o.run.scrub_env, [&](const std::string& v) {
            return std::find(gw->placeholder_variables.begin(), gw->placeholder_variables.end(), v) !=
                   gw->placeholder_variables.end();
          });
          for (const auto& v : gw->placeholder_variables) o.run.env.push_back(v + "=" + placeholder);
          std::string url = plan::DoorPlan{}.url() + gw->base_url_path;
          if (!gw->base_url_variable.empty()) o.run.env.push_back(gw->base_url_variable + "=" + url);
          for (const auto& a : gw->arguments) {
            std::string arg = a;
            if (size_t at = arg.find("{url}"); at != std::string::npos) arg.replace(at, 5, url);
            gateway_args.push_back(std::move(arg));
          }
          // Straight to the gateway, not through the door's proxy route.
          for (const char* v : {"NO_PROXY", "no_proxy"}) o.run.env.push_back(std::string(v) + "=127.0.0.1,localhost");
          credential["delivery"] = "model_gateway";
          credential["gateway"] = {{"url", url},
                                   {"upstream", o.run.model_gateway->upstream},
                                   {"header", gw->credential_header},
                                   {"placeholder_variables", gw->placeholder_variables},
                                   {"base_url_variable", gw->base_url_variable}};
        } else {
          ::explicit_bzero(cred->secret.data(), cred->secret.size());
          credential["delivery"] = engine ? "none: the policy's code_network is off, so the model gateway has no door"
                                          : "none: under vendor confinement there is no door for the model gateway";
          std::fprintf(stderr, "airlock: %s is not handed to the agent: %s\n", cred->source.c_str(),
                       credential["delivery"].get<std::string>().c_str());
        }
      } else if (cred) {
        credential_fd = TRY(exec::secret_pipe(cred->secret));
        ::explicit_bzero(cred->secret.data(), cred->secret.size());
        o.run.pass_fd = credential_fd.get();
        o.run.env.push_back("AIRLOCK_CREDENTIALS_FD=3");
        credential = {{"source", cred->source}, {"delivery", "a pipe inherited as descriptor 3 (AIRLOCK_CREDENTIALS_FD)"}};
      }
    }
    argv.insert(argv.end() - static_cast<std::ptrdiff_t>(o.args.size()), gateway_args.begin(), gateway_args.end());
    o.run.command = argv;
    o.run.agent = {
        {"profile", profile->name},
        {"profile_digest", sha256_hex(canonical_json(policy::to_json(*profile)))},
        {"executable", exe},
        {"executable_sha256", exe_sha},
        {"airlock", self},
        {"airlock_sha256", self_sha},
        {"argv", argv},
        {"confinement", policy::to_string(pol.confinement)},
        {"vendor_settings", vendor_settings},
        {"engine_arguments", engine ? Json(profile->engine_arguments) : Json::array()},
        {"claim", engine ? "airlock confines the agent: the receipt's plan and enforced say how"
                         : std::string(kVendorClaim)},
        {"credential", credential},
        {"credential_files_hidden", engine ? Json(start.facts.credential_files) : Json::array()},
        {"env_scrubbed", o.run.scrub_env},
        {"tmpdir", "a fresh directory in the scratch directory, made by the agent's process once confined"},
        {"home", "a fresh directory in the scratch directory, made by the agent's process once confined"},
        {"pass_env_refused", scrubbed},
    };
    for (const auto& name : scrubbed)
      std::fprintf(stderr, "airlock: %s is a credential variable; it is not passed to the agent\n", name.c_str());
    return {};
  };
  return run_confined(g, o.run, before);
}

}  // namespace

void add_agent(CLI::App& app, Globals& g, Action& run) {
  static AgentOptions o;
  auto* agent = app.add_subcommand("agent", "run a whole agent CLI (Claude Code, Codex, Gemini) confined");
  agent->require_subcommand(1);
  auto* cmd = agent->add_subcommand("run", "run the agent CLI of a profile under the policy's executor");
  cmd->add_option("--profile", o.profile, "agent profile: claude-code, codex or gemini")->required();
  cmd->add_option("--policy", o.run.policy_file,
                  "task policy (JSON); when absent, the repository's .airlock/policy.json, if any");
  cmd->add_option("--defaults", o.run.defaults,
                  "worker default policy (the one place `confinement` is set); when absent, "
                  "~/.config/airlock/policy.json, if any");
  cmd->add_option("--workspace", o.run.workspace,
                  "workspace directory (overrides the policy's); the current directory when neither names one");
  cmd->add_option("--executable", o.executable, "the agent's executable (default: the profile's, on the trusted PATH)");
  cmd->add_option("--pass-env", o.pass_env, "copy this host variable in (credential variables never are)");
  cmd->add_flag("--no-credential", o.no_credential, "hand the agent no credential");
  cmd->add_option("--model-ca", o.model_ca, "CA file the model gateway trusts for the model host (default: the system's)")
      ->check(CLI::ExistingFile);
  cmd->add_option("--model-upstream", o.model_upstream,
                  "https://host[:port] the model gateway forwards to (default: the profile's model host)");
  cmd->add_flag("--json", g.json, "print a JSON summary as the last line of stdout");
  cmd->add_option("--slot", o.run.slot, "the slot whose seat the run takes (default: default)");
  cmd->add_flag("-q,--quiet", o.run.quiet, "print nothing of airlock's own unless refused");
  cmd->add_option("args", o.args, "the agent's arguments, after --");
  cmd->callback([&g, &run] {
    if (!o.args.empty()) o.args = as_typed(g.args, o.args);
    run = [&g] { return agent_run(g, o); };
  });
}

}  // namespace airlock::cli
