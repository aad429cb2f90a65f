// `airlock machine probe|add|install|facts|list`, `airlock fleet`, `airlock slot set|list`, `airlock runs list|show`: the run store.
#include <fmt/ranges.h>
#include <unistd.h>

#include <climits>
#include <charconv>
#include <cstdio>
#include <filesystem>

#include <fcntl.h>
#include <sys/file.h>
#include <spawn.h>
#include <sys/stat.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/wait.h>

#include <atomic>
#include <thread>

#include "base/clock.h"
#include "base/custody.h"
#include "base/encoding.h"
#include "base/fs.h"
#include "base/hash.h"
#include "base/signing.h"
#include "base/unique_fd.h"
#include "cli/build_info.h"
#include "cli/line_reader.h"
#include "cli/ssh_transport.h"
#include "cli/store_support.h"
#include "cli/verbs.h"
#include "exec/planner.h"
#include "ledger/receipts.h"
#include "plan/plan.h"
#include "policy/task_policy.h"

extern char** environ;

namespace airlock::cli {
namespace {

struct StoreOptionsCli {
  bool live = false;
  std::string run_id, slot;
  std::optional<int> max_sessions;
  std::string machine, ssh, identity, known_hosts, dir;
};

// Reading JSON another machine wrote (or a store anyone can write): a key of another type is
// absent, never a throw.
std::string jstr(const Json& o, const char* key) {
  auto it = o.is_object() ? o.find(key) : o.end();
  return it != o.end() && it->is_string() ? it->get<std::string>() : std::string();
}
bool jbool(const Json& o, const char* key) {
  auto it = o.is_object() ? o.find(key) : o.end();
  return it != o.end() && it->is_boolean() && it->get<bool>();
}
const Json& jget(const Json& o, const char* key) {
  static const Json null;
  auto it = o.is_object() ? o.find(key) : o.end();
  return it != o.end() ? *it : null;
}

// ---- the fleet's signing key ----
//
// Every machine row is signed with the fleet's Ed25519 key, and a row whose signature does not
// verify is not believed, by name: the store is data anyone with the database could write. The
// key is STATE/fleet/signing.key, 32 bytes for its owner only (base/custody.h read_key_file).

std::string fleet_dir(const std::string& state) { return state + "/fleet"; }
std::string fleet_key_path(const std::string& state) { return fleet_dir(state) + "/signing.key"; }
// The public key alone (base64, one line): what a machine that checks rows but signs none holds.
std::string fleet_pub_path(const std::string& state) { return fleet_dir(state) + "/signing.pub"; }

// STATE/fleet: a directory (not a link) of ours, for us alone; made so when absent.
Result<void> fleet_dir_ready(const std::string& state) {
  std::string dir = fleet_dir(state);
  TRY(make_dirs(dir, 0700));
  struct stat st{};
  if (::lstat(dir.c_str(), &st) != 0) return fail_errno(Code::IoError, "lstat " + dir, errno);
  if (!S_ISDIR(st.st_mode) || st.st_uid != ::geteuid())
    return fail(Code::CustodyUnsafe, fmt::format("{} is not a directory of yours (a link, or another's)", dir),
                {{"path", dir}, {"fix", fmt::format("rm -rf {0} && mkdir -m 0700 {0}", dir)}});
  if ((st.st_mode & 077) && ::chmod(dir.c_str(), 0700) != 0) return fail_errno(Code::IoError, "chmod 0700 " + dir, errno);
  return {};
}

// Writes `bytes` as `path` whole or not at all, never replacing a file there (temporary file,
// fsync, link, fsync of the directory): EEXIST when one exists.
Result<void> write_new_file(const std::string& dir, const std::string& path, std::string_view bytes) {
  std::string tmp = fmt::format("{}/.new-{}", dir, random_id().substr(0, 12));
  UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!fd) return fail_errno(Code::IoError, "create " + tmp, errno);
  auto w = write_all(fd.get(), bytes, Code::IoError, "write " + tmp);
  if (w && ::fsync(fd.get()) != 0) w = fail_errno(Code::IoError, "fsync " + tmp, errno);
  if (w && ::link(tmp.c_str(), path.c_str()) != 0) w = fail_errno(Code::IoError, "link " + path, errno);
  ::unlink(tmp.c_str());
  TRY(w);
  UniqueFd d(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!d || ::fsync(d.get()) != 0) return fail_errno(Code::IoError, "fsync " + dir, errno);
  return {};
}

// The fleet key's seed, or nullopt when this machine holds none.
Result<std::optional<std::string>> fleet_seed(const std::string& state) {
  std::string path = fleet_key_path(state);
  struct stat st{};
  if (::lstat(path.c_str(), &st) != 0 && errno == ENOENT) return std::optional<std::string>{};
  return std::optional<std::string>(TRY(read_key_file(path, ::geteuid(), kEd25519SeedBytes)));
}

Result<void> sign_row(store::MachineRecord& m, const std::string& state) {
  auto seed = TRY(fleet_seed(state));
  if (!seed)
    return fail(Code::ConfigError,
                fmt::format("this machine holds no fleet key to sign the row with ({}): run `airlock fleet init`",
                            fleet_key_path(state)),
                {{"fleet_key", fleet_key_path(state)}});
  m.signed_at_ms = now_ms();
  m.signature = base64_encode(TRY(ed25519_sign(*seed, m.signed_text())));
  return {};
}

Result<void> advance_seen(const std::string& state, const std::map<std::string, int64_t>& marks);

// Signs the row, writes it, and moves this machine's mark on to the new signature. A row read
// before (`was_signed_at`) is replaced only if nobody replaced it meanwhile: an install and a probe
// at once would otherwise put back what the other recorded.
Result<void> put_signed(store::Store& st, store::MachineRecord& m, const std::string& state,
                        std::optional<int64_t> was_signed_at = std::nullopt) {
  TRY(sign_row(m, state));
  if (!was_signed_at) {
    TRY(st.put_machine(m));
  } else if (!TRY(st.replace_machine(m, *was_signed_at))) {
    return fail(Code::ConfigError,
                fmt::format("machine {}'s row was replaced by another airlock while this one worked: nothing recorded; "
                            "run it again",
                            m.id),
                {{"machine", m.id}});
  }
  return advance_seen(state, {{m.id, m.signed_at_ms}});
}

// The latest signature time this machine has seen on each machine's row (STATE/fleet/seen.json):
// a row signed earlier than that is an old row put back (replayed), not believed.
std::string seen_path(const std::string& state) { return fleet_dir(state) + "/seen.json"; }

Result<Json> read_seen(const std::string& state) {
  std::string path = seen_path(state);
  struct stat st{};
  if (::lstat(path.c_str(), &st) != 0 && errno == ENOENT) return Json::object();
  auto text = TRY(read_file(path, Code::ConfigError));
  auto j = TRY(parse_json(text, Code::ConfigError, path));
  if (!j.is_object()) return fail(Code::ConfigError, fmt::format("{} is not an object", path), {{"path", path}});
  return j;
}

int fleet_init(Globals& g) {
  auto state = resolve_state_dir(g.state_dir);
  if (!state) return refuse(state.error(), g.json);
  std::string path = fleet_key_path(*state);
  if (auto d = fleet_dir_ready(*state); !d) return refuse(d.error(), g.json);
  auto seed = ed25519_new_seed();
  if (!seed) return refuse(seed.error(), g.json);
  auto pub_raw = ed25519_public_key(*seed);
  if (!pub_raw) return refuse(pub_raw.error(), g.json);
  std::string pub = base64_encode(*pub_raw);
  if (auto w = write_new_file(fleet_dir(*state), path, *seed); !w) {
    if (w.error().facts.value("errno", 0) == EEXIST || ::access(path.c_str(), F_OK) == 0)
      return refuse(Error{Code::ConfigError,
                          fmt::format("a fleet key exists already at {}: rows it signed would no longer verify if "
                                      "it were replaced",
                                      path),
                          {{"fleet_key", path}}},
                    g.json);
    return refuse(w.error(), g.json);
  }
  ::unlink(fleet_pub_path(*state).c_str());  // the key's own public half replaces one trusted before
  if (auto w = write_new_file(fleet_dir(*state), fleet_pub_path(*state), pub + "\n"); !w) return refuse(w.error(), g.json);
  if (g.json)
    std::printf("%s\n", Json({{"fleet_key", path}, {"public_key", pub}}).dump(2).c_str());
  else
    std::printf("fleet key %s\npublic key %s\n", path.c_str(), pub.c_str());
  return 0;
}

std::string utc(int64_t ms) { return ms <= 0 ? "-" : utc_text(ms * 1000); }

// Columns padded to their widest cell; the last column is not padded. Every cell is escaped for
// the terminal: a row's text comes from a database anyone with its credentials can write, and a
// NUL or a control sequence in it must not hide or forge another column.
void print_table(std::vector<std::vector<std::string>> rows) {
  for (auto& r : rows)
    for (auto& cell : r) cell = escape_for_terminal(cell);
  std::vector<size_t> width;
  for (const auto& r : rows)
    for (size_t i = 0; i < r.size(); ++i) {
      if (width.size() <= i) width.push_back(0);
      width[i] = std::max(width[i], r[i].size());
    }
  for (const auto& r : rows) {
    std::string line;
    for (size_t i = 0; i < r.size(); ++i)
      line += i + 1 == r.size() ? r[i] : fmt::format("{:<{}}  ", r[i], width[i]);
    std::printf("%s\n", line.c_str());
  }
}

// A machine row is believed only if the fleet key's signature over it verifies, it was probed,
// and its facts parse as this build's host facts and claim no Landlock ABI above what this build
// knows: a row is data anyone with the database could write.
struct Judgement {
  bool believed = true;
  std::string reason_name, reason;
  std::optional<plan::HostFacts> facts;
};

// The fleet's public key, to check rows with (nullopt: this machine holds no fleet key).
using FleetKey = std::optional<std::string>;

Judgement judge(const store::MachineRecord& m, const FleetKey& fleet, int64_t seen_ms = 0) {
  if (!m.malformed.empty()) return {false, "row_malformed", m.malformed, std::nullopt};
  if (!fleet) return {false, "no_fleet_key", "this machine holds no fleet key to check the row with", std::nullopt};
  if (m.signature.empty()) return {false, "unsigned", "the row carries no signature", std::nullopt};
  auto sig = base64_decode(m.signature);
  if (!sig || !ed25519_verify(*fleet, m.signed_text(), *sig))
    return {false, "signature_invalid", "the fleet key's signature does not verify: the row was changed or forged",
            std::nullopt};
  if (m.signed_at_ms < seen_ms)
    return {false, "replayed",
            fmt::format("signed at {}, before a signature of this machine's row seen here (signed at {}): an old row put back",
                        utc(m.signed_at_ms), utc(seen_ms)),
            std::nullopt};
  if (m.facts.is_null())
    return {false, "never_probed", "added, not measured yet: nothing has probed it over its transport", std::nullopt};
  Judgement j;
  int abi = m.landlock_abi;
  auto hf = plan::host_facts_from_json(m.facts);
  if (hf) {
    j.facts = *hf;
    abi = std::max(abi, hf->landlock_abi);
  }
  if (abi > plan::kLandlockAbiKnown) {
    j = {false, "landlock_abi_above_known",
         fmt::format("claims Landlock ABI {}; this build knows up to {}", abi, plan::kLandlockAbiKnown),
         std::nullopt};
  } else if (!hf) {
    j = {false, "facts_invalid", hf.error().message, std::nullopt};
  } else if (hf->landlock_abi != m.landlock_abi) {
    j = {false, "facts_inconsistent",
         fmt::format("the row says Landlock ABI {} but its facts say {}", m.landlock_abi, hf->landlock_abi),
         std::nullopt};
  }
  return j;
}

std::string cgroup_text(const plan::HostFacts& f) {
  if (!f.cgroup_v2_controllers.empty()) return fmt::format("v2 {}", fmt::join(f.cgroup_v2_controllers, "+"));
  if (!f.cgroup_v1_writable.empty()) return fmt::format("v1 {}", fmt::join(f.cgroup_v1_writable, "+"));
  return "none";
}

constexpr int64_t kAttestationFreshMs = 7LL * 24 * 3600 * 1000;

// The level an attestation shows, judged here from its per-executor results: isolated when the
// microVM tier contained every row, sandboxed when Landlock or namespaces did, brokered otherwise.
policy::MachineIsolation attested_level(const Json& executors) {
  auto contained = [&](std::string_view name) {
    for (const auto& e : executors)
      if (jstr(e, "executor") == name && jbool(e, "contained")) return true;
    return false;
  };
  if (contained("microvm")) return policy::MachineIsolation::Isolated;
  if (contained("landlock") || contained("namespaces")) return policy::MachineIsolation::Sandboxed;
  return policy::MachineIsolation::Brokered;
}

// The level a row's attestation is worth now: none when absent, older than 7 days, or made with
// another airlock than the one installed (its `why` says which).
// With `executor`: the level that executor itself earned (a run is only as isolated as the tier
// that confines it): sandboxed for Landlock or namespaces, isolated for the microVM, when it
// contained every row; brokered otherwise.
policy::MachineIsolation current_level(const store::MachineRecord& m, std::string* why = nullptr,
                                       std::optional<policy::ExecutorKind> executor = std::nullopt) {
  auto say = [&](std::string w) {
    if (why) *why = std::move(w);
    return policy::MachineIsolation::None;
  };
  const Json& a = m.attestation;
  if (!a.is_object()) return say("never attested");
  std::string installed = jstr(jget(m.transport, "installed"), "sha256");
  if (jstr(a, "airlock_sha256") != installed) return say("attested with another airlock than the one installed");
  Json at = a.value("attested_at_ms", Json(0));
  if (!at.is_number_integer() || now_ms() - at.get<int64_t>() > kAttestationFreshMs)
    return say(fmt::format("attested at {}, more than 7 days ago", utc(at.is_number_integer() ? at.get<int64_t>() : 0)));
  const Json& executors = jget(a, "executors");
  if (!executor) return attested_level(executors);
  std::string name(policy::to_string(*executor));
  bool contained = false;
  if (executors.is_array())
    for (const auto& e : executors)
      if (jstr(e, "executor") == name && jbool(e, "contained")) contained = true;
  if (!contained) {
    if (why) *why = fmt::format("its {} tier did not contain every escape row there", name);
    return policy::MachineIsolation::Brokered;
  }
  return *executor == policy::ExecutorKind::Microvm ? policy::MachineIsolation::Isolated
                                                    : policy::MachineIsolation::Sandboxed;
}

Json machine_json(const store::MachineRecord& m, const Judgement& j) {
  Json out = {{"id", m.id},       {"hostname", m.hostname},         {"landlock_abi", m.landlock_abi},
              {"facts", m.facts}, {"probed_at_ms", m.probed_at_ms}, {"transport", m.transport},
              {"signature", m.signature.empty()                 ? "absent"
                            : j.reason_name == "signature_invalid" ? "invalid"
                            : j.reason_name == "no_fleet_key" || j.reason_name == "row_malformed" ? "unchecked"
                                                                   : "verified"},
              {"believed", j.believed}};
  if (!j.believed) out["not_believed"] = {{"reason", j.reason_name}, {"message", j.reason}};
  std::string why;
  out["isolation"] = policy::to_string(j.believed ? current_level(m, &why) : policy::MachineIsolation::None);
  if (why.empty() && j.believed && m.attestation.is_object()) {
    // What earned the level: the tiers that contained every escape row there, and when.
    std::vector<std::string> held;
    if (const Json& ex = jget(m.attestation, "executors"); ex.is_array())
      for (const auto& e : ex)
        if (jbool(e, "contained")) held.push_back(jstr(e, "executor"));
    const Json& at = jget(m.attestation, "attested_at_ms");
    why = fmt::format("attested {}: {} contained every escape row there", utc(at.is_number_integer() ? at.get<int64_t>() : 0),
                      held.empty() ? std::string("no tier") : fmt::format("{}", fmt::join(held, ", ")));
  } else if (why.empty() && !j.believed) {
    why = "the row is not believed (" + j.reason_name + ")";
  }
  if (!why.empty()) out["isolation_why"] = why;
  out["attestation"] = m.attestation;
  return out;
}

std::vector<std::string> machine_row(const store::MachineRecord& m, const Judgement& j) {
  if (!j.believed)
    return {m.id,
            m.hostname,
            "-",
            "-",
            "-",
            "-",
            utc(m.probed_at_ms),
            "-",
            fmt::format("NOT BELIEVED ({}: {})", j.reason_name, j.reason)};
  const auto& f = *j.facts;
  return {m.id,
          m.hostname,
          fmt::format("{}", f.landlock_abi),
          yes_no(f.user_namespaces),
          cgroup_text(f),
          yes_no(f.kvm_usable),
          utc(m.probed_at_ms),
          std::string(policy::to_string(current_level(m))),
          "ok"};
}

// `{"KEY": [...]}` with --json, else the table.
int emit(const Globals& g, const char* key, const Json& arr,
         const std::vector<std::vector<std::string>>& rows) {
  if (g.json)
    // Rows written by an older build may hold names that are not UTF-8: shown lossy, never thrown.
    std::printf("%s\n", Json({{key, arr}}).dump(2, ' ', false, Json::error_handler_t::replace).c_str());
  else
    print_table(rows);
  return 0;
}

const std::vector<std::string> kMachineHeader = {"MACHINE", "HOSTNAME", "LANDLOCK",  "USERNS", "CGROUP",
                                                 "KVM",     "PROBED",   "ISOLATION", "STATUS"};

// The fleet's public key: this machine's fleet key's, or else the one `airlock fleet trust` kept;
// a key that cannot be read is refused.
Result<FleetKey> fleet_public(const std::string& state) {
  auto seed = TRY(fleet_seed(state));
  if (seed) return FleetKey(TRY(ed25519_public_key(*seed)));
  std::string pub_path = fleet_pub_path(state);
  struct stat st{};
  if (::lstat(pub_path.c_str(), &st) != 0 && errno == ENOENT) return FleetKey{};
  if (!S_ISREG(st.st_mode) || st.st_uid != ::geteuid() || (st.st_mode & 022))
    return fail(Code::CustodyUnsafe, fmt::format("{} is not a file of yours that only you can change", pub_path),
                {{"path", pub_path}});
  auto text = TRY(read_file(pub_path, Code::ConfigError));
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  auto pub = base64_decode(text);
  if (!pub || pub->size() != kEd25519PublicBytes)
    return fail(Code::ConfigError, fmt::format("{} holds no Ed25519 public key", pub_path), {{"path", pub_path}});
  return FleetKey(*pub);
}

// `airlock fleet trust KEY`: check rows with the fleet's public key (what `fleet init` printed
// on the machine that holds the key), signing none here.
int fleet_trust(Globals& g, const std::string& key) {
  auto state = resolve_state_dir(g.state_dir);
  if (!state) return refuse(state.error(), g.json);
  auto pub = base64_decode(key);
  if (!pub || pub->size() != kEd25519PublicBytes)
    return refuse(Error{Code::OptionInvalid, "the key must be an Ed25519 public key in base64 (as `fleet init` prints it)",
                        {{"key", escape_for_terminal(key)}}},
                  g.json);
  if (auto seed = fleet_seed(*state); !seed || *seed)
    return refuse(seed ? Error{Code::ConfigError, "this machine holds the fleet key itself: it trusts that key's public half",
                               {{"fleet_key", fleet_key_path(*state)}}}
                       : seed.error(),
                  g.json);
  if (auto d = fleet_dir_ready(*state); !d) return refuse(d.error(), g.json);
  ::unlink(fleet_pub_path(*state).c_str());
  if (auto w = write_new_file(fleet_dir(*state), fleet_pub_path(*state), base64_encode(*pub) + "\n"); !w)
    return refuse(w.error(), g.json);
  std::printf("rows are checked here with fleet key %s\n", base64_encode(*pub).c_str());
  return 0;
}

int machine_probe_remote(Globals& g, const std::string& name);

int machine_probe(Globals& g, const std::string& name) {
  if (!name.empty() && name != machine_identity(g)) return machine_probe_remote(g, name);
  auto st = open_store(g);
  if (!st) return refuse(st.error(), g.json);
  // Every fact measured here; none can be typed in.
  auto state = resolve_state_dir(g.state_dir);
  if (!state) return refuse(state.error(), g.json);
  auto fleet = fleet_public(*state);
  if (!fleet) return refuse(fleet.error(), g.json);
  plan::HostFacts facts = exec::HostProbe(*state, exec::HostProbe::Measure::Fresh).facts(plan::FactNeeds::all());
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  store::MachineRecord m;
  m.id = machine_identity(g);
  m.hostname = host;
  m.landlock_abi = facts.landlock_abi;
  m.facts = plan::to_json(facts);
  m.probed_at_ms = now_ms();
  if (auto w = put_signed(**st, m, *state); !w) return refuse(w.error(), g.json);
  Judgement j = judge(m, *fleet);
  if (g.json) {
    std::printf("%s\n", machine_json(m, j).dump(2).c_str());
  } else {
    print_table({kMachineHeader, machine_row(m, j)});
    std::fprintf(stderr, "airlock: machine %s recorded in %s\n", m.id.c_str(), (*st)->url().c_str());
  }
  return 0;
}

// Whether a judgement says the row's signature verified (whatever else it says of the row).
bool signature_verified(const Judgement& j) {
  for (const char* bad : {"row_malformed", "no_fleet_key", "unsigned", "signature_invalid", "replayed"})
    if (j.reason_name == bad) return false;
  return true;
}

// Moves the marks of rows whose signature verified here on to their signature times (never back),
// under STATE/fleet/seen.lock: every use of a row (listed, probed, installed, attested, run on)
// and every signature made here moves them, so an older signed row put back is seen as replayed.
Result<void> advance_seen(const std::string& state, const std::map<std::string, int64_t>& marks) {
  if (marks.empty()) return {};
  TRY(fleet_dir_ready(state));
  std::string lock = fleet_dir(state) + "/seen.lock";
  UniqueFd held(::open(lock.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!held || ::flock(held.get(), LOCK_EX) != 0) return fail_errno(Code::IoError, "lock " + lock, errno);
  Json seen = TRY(read_seen(state));
  Json was = seen;
  for (const auto& [id, at] : marks) {
    Json mark = seen.value(id, Json(0));
    if (!mark.is_number_integer() || at > mark.get<int64_t>()) seen[id] = at;
  }
  if (seen != was) TRY(write_file_atomic(seen_path(state), lossless_canonical_json(seen), 0600));
  return {};
}

// Every machine row of the store as judged here, for `machine list` and `doctor`; the marks of
// rows whose signature verified move on.
struct MachinesSeen {
  Json arr = Json::array();
  std::vector<std::vector<std::string>> rows = {kMachineHeader};
};
Result<MachinesSeen> machines_seen(store::Store& st, const std::string& state) {
  FleetKey fleet = TRY(fleet_public(state));
  auto ms = TRY(st.machines());
  Json seen = TRY(read_seen(state));
  MachinesSeen out;
  std::map<std::string, int64_t> marks;
  for (const auto& m : ms) {
    Json mark = seen.value(m.id, Json(0));
    Judgement j = judge(m, fleet, mark.is_number_integer() ? mark.get<int64_t>() : 0);
    if (signature_verified(j)) marks[m.id] = m.signed_at_ms;
    out.arr.push_back(machine_json(m, j));
    out.rows.push_back(machine_row(m, j));
  }
  TRY(advance_seen(state, marks));
  return out;
}

int machine_list(Globals& g) {
  auto st = open_store(g);
  if (!st) return refuse(st.error(), g.json);
  auto state = resolve_state_dir(g.state_dir);
  if (!state) return refuse(state.error(), g.json);
  auto seen = machines_seen(**st, *state);
  if (!seen) return refuse(seen.error(), g.json);
  return emit(g, "machines", seen->arr, seen->rows);
}

// `airlock machine remove NAME`: the row is deleted (its slots and runs stay). What recovers a row
// taken as replayed or forged: `machine add` signs a new one, later than any mark seen here.
int machine_remove(Globals& g, const std::string& name) {
  auto st = open_store(g);
  if (!st) return refuse(st.error(), g.json);
  auto gone = (*st)->remove_machine(name);
  if (!gone) return refuse(gone.error(), g.json);
  if (!*gone)
    return refuse(Error{Code::NotFound, fmt::format("no machine {} in {}", name, (*st)->url()), {{"machine", name}}}, g.json);
  if (g.json)
    std::printf("%s\n", Json({{"machine", name}, {"removed", true}}).dump(2, ' ', false, Json::error_handler_t::replace).c_str());
  else
    std::printf("machine %s removed from %s\n", escape_for_terminal(name).c_str(), (*st)->url().c_str());
  return 0;
}

// `user@host[:port]`, each part of characters ssh takes as a name and none starting with '-' (so
// the target can never be read as an option); the port 1..65535, 22 when absent.
Result<std::string> parse_ssh_target(const std::string& spec) {
  auto bad = [&](std::string_view why) {
    return fail(Code::OptionInvalid, fmt::format("--ssh {}: {} (expected user@host[:port])", spec, why), {{"ssh", spec}});
  };
  auto name_ok = [](std::string_view s) {
    return !s.empty() && s.size() <= 253 && s.front() != '-' && s.front() != '.' &&
           std::all_of(s.begin(), s.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_'; });
  };
  size_t at = spec.find('@');
  if (at == std::string::npos) return bad("no user");
  std::string user = spec.substr(0, at), rest = spec.substr(at + 1), host, port = "22";
  if (!name_ok(user)) return bad("the user is not a plain name");
  if (rest.starts_with("[")) {  // [IPv6]:port
    size_t close = rest.find(']');
    if (close == std::string::npos) return bad("an unclosed [");
    host = rest.substr(1, close - 1);
    if (host.empty() || host.find_first_not_of("0123456789abcdefABCDEF:.") != std::string::npos) return bad("not an IPv6 address");
    host = "[" + host + "]";
    rest = rest.substr(close + 1);
    if (!rest.empty() && rest.front() != ':') return bad("text after the address");
    if (!rest.empty()) port = rest.substr(1);
  } else {
    size_t colon = rest.find(':');
    host = rest.substr(0, colon);
    if (colon != std::string::npos) port = rest.substr(colon + 1);
    if (!name_ok(host)) return bad("the host is not a name or an address");
  }
  int p = 0;
  auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), p);
  if (port.empty() || ec != std::errc() || end != port.data() + port.size() || p < 1 || p > 65535)
    return bad("the port must be 1..65535");
  return fmt::format("{}@{}:{}", user, host, p);
}

// `airlock machine add NAME --ssh user@host[:port] [--identity FILE]`: the machine and how it is
// reached, signed; never probed until `airlock machine probe` measures it over that transport.
int machine_add(Globals& g, const StoreOptionsCli& o) {
  auto state = resolve_state_dir(g.state_dir);
  if (!state) return refuse(state.error(), g.json);
  if (o.machine.empty() || o.machine.size() > 128 ||
      !std::all_of(o.machine.begin(), o.machine.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
      }))
    return refuse(Error{Code::OptionInvalid,
                        fmt::format("machine name \"{}\": letters, digits, '-', '_' and '.' only, at most 128", o.machine),
                        {{"machine", o.machine}}},
                  g.json);
  auto target = parse_ssh_target(o.ssh);
  if (!target) return refuse(target.error(), g.json);
  Json transport = {{"ssh", *target}};
  if (!o.identity.empty()) {
    // A private key ssh would read: ours, for us alone (ssh itself refuses one open to others),
    // kept as its absolute path, and no link that could point elsewhere later.
    if (!is_valid_utf8(o.identity) ||
        std::any_of(o.identity.begin(), o.identity.end(), [](unsigned char c) { return c < 0x20 || c == 0x7f; }))
      return refuse(Error{Code::OptionInvalid, "--identity: a path of printable UTF-8 only",
                          {{"identity", escape_for_terminal(o.identity)}}},
                    g.json);
    struct stat st{};
    if (::lstat(o.identity.c_str(), &st) != 0)
      return refuse(fail_errno(Code::OptionInvalid, "--identity " + o.identity, errno).error(), g.json);
    if (S_ISLNK(st.st_mode))
      return refuse(Error{Code::CustodyUnsafe, fmt::format("--identity {} is a symbolic link: name the key itself", o.identity),
                          {{"identity", o.identity}}},
                    g.json);
    if (!S_ISREG(st.st_mode) || st.st_uid != ::geteuid() || (st.st_mode & 077))
      return refuse(Error{Code::CustodyUnsafe,
                          fmt::format("--identity {}: a private key must be a regular file of yours with mode 0600 "
                                      "(it is mode {:04o}, owner uid {})",
                                      o.identity, st.st_mode & 07777, st.st_uid),
                          {{"identity", o.identity}, {"fix", fmt::format("chmod 0600 {}", o.identity)}}},
                    g.json);
    char resolved[PATH_MAX];
    if (!::realpath(o.identity.c_str(), resolved))
      return refuse(fail_errno(Code::OptionInvalid, "--identity " + o.identity, errno).error(), g.json);
    transport["identity"] = std::string(resolved);
  }
  if (!o.known_hosts.empty()) {
    // The far host keys believed: a file of ours, no link, kept absolute (ssh checks strictly).
    struct stat st{};
    char resolved[PATH_MAX];
    if (!is_valid_utf8(o.known_hosts) ||
        std::any_of(o.known_hosts.begin(), o.known_hosts.end(), [](unsigned char c) { return c <= 0x20 || c == 0x7f; }))
      return refuse(Error{Code::OptionInvalid, "--known-hosts: a path of printable UTF-8 without spaces only",
                          {{"known_hosts", escape_for_terminal(o.known_hosts)}}},
                    g.json);
    if (::lstat(o.known_hosts.c_str(), &st) != 0)
      return refuse(fail_errno(Code::OptionInvalid, "--known-hosts " + o.known_hosts, errno).error(), g.json);
    if (!S_ISREG(st.st_mode) || st.st_uid != ::geteuid() || (st.st_mode & 022) || !::realpath(o.known_hosts.c_str(), resolved))
      return refuse(Error{Code::CustodyUnsafe,
                          fmt::format("--known-hosts {}: the host keys believed must be a regular file of yours that "
                                      "only you can write (not a link)",
                                      o.known_hosts),
                          {{"known_hosts", o.known_hosts}}},
                    g.json);
    transport["known_hosts"] = std::string(resolved);
  }
  if (!o.dir.empty()) {
    // Where airlock is installed on the far machine; relative to its home when not absolute. Quoted
    // for the far shell, but kept plain: printable, no option look, no way up.
    bool printable = is_valid_utf8(o.dir) && std::none_of(o.dir.begin(), o.dir.end(), [](unsigned char c) {
      return c < 0x20 || c == 0x7f;
    });
    if (!printable || o.dir.size() > 512 || o.dir.front() == '-' || o.dir == "." || o.dir.find("..") != std::string::npos)
      return refuse(Error{Code::OptionInvalid,
                          "--dir: a directory of printable UTF-8, at most 512 bytes, not starting with '-', without ..",
                          {{"dir", escape_for_terminal(o.dir)}}},
                    g.json);
    transport["dir"] = o.dir;
  }
  auto st = open_store(g);
  if (!st) return refuse(st.error(), g.json);
  // A row that holds measured facts is not overwritten by an unmeasured one (this machine's own,
  // or one probed already): its facts would be lost to a typo.
  auto existing = (*st)->machines();
  if (!existing) return refuse(existing.error(), g.json);
  for (const auto& r : *existing)
    if (r.id == o.machine && !r.facts.is_null())
      return refuse(Error{Code::ConfigError,
                          fmt::format("machine {} is recorded already with measured facts: adding it again would drop "
                                      "them",
                                      o.machine),
                          {{"machine", o.machine}}},
                    g.json);
  store::MachineRecord m;
  m.id = o.machine;
  m.facts = nullptr;
  m.transport = transport;
  if (auto w = put_signed(**st, m, *state); !w) return refuse(w.error(), g.json);
  if (g.json)
    std::printf("%s\n", Json({{"machine", m.id}, {"transport", m.transport}, {"signed", true}}).dump(2).c_str());
  else
    std::printf("machine %s reached over ssh %s, recorded and signed; not probed yet\n", m.id.c_str(), target->c_str());
  return 0;
}

// `airlock machine facts`: this machine measured now, printed as one line of JSON, recorded
// nowhere. What `airlock machine probe NAME` runs on the far machine over ssh.
int machine_facts(Globals& g) {
  auto state = resolve_state_dir(g.state_dir);
  if (!state) return refuse(state.error(), g.json);
  plan::HostFacts facts = exec::HostProbe(*state, exec::HostProbe::Measure::Fresh).facts(plan::FactNeeds::all());
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  auto sha = sha256_file("/proc/self/exe");
  if (!sha) return refuse(sha.error(), g.json);
  std::printf("%s\n", Json({{"hostname", host},
                            {"facts", plan::to_json(facts)},
                            {"airlock", {{"version", std::string(kVersion)}, {"revision", std::string(kRevision)}, {"sha256", *sha}}}})
                          .dump(-1, ' ', false, Json::error_handler_t::replace)
                          .c_str());
  return 0;
}

// Another machine's row, believed as far as its signature goes (it may be never probed), and how
// to reach it: a transport is used only from a row the fleet key signed, since the store is data
// anyone with the database could write, and a forged transport would send our key and binary
// elsewhere.
struct FarMachine {
  std::string state;
  store::MachineRecord row;
  SshTarget target;
};

Result<FarMachine> far_machine(Globals& g, store::Store& st, const std::string& name) {
  FarMachine f;
  f.state = TRY(resolve_state_dir(g.state_dir));
  FleetKey fleet = TRY(fleet_public(f.state));
  auto rows = TRY(st.machines());
  auto it = std::find_if(rows.begin(), rows.end(), [&](const store::MachineRecord& r) { return r.id == name; });
  if (it == rows.end())
    return fail(Code::NotFound,
                fmt::format("no machine {} in {}: `airlock machine add {} --ssh user@host[:port]` records one", name,
                            st.url(), name),
                {{"machine", name}});
  Json seen = TRY(read_seen(f.state));
  Json mark = seen.value(name, Json(0));
  Judgement j = judge(*it, fleet, mark.is_number_integer() ? mark.get<int64_t>() : 0);
  if (!signature_verified(j))
    return fail(Code::CustodyUnsafe,
                fmt::format("machine {}'s row is not believed ({}: {}): its transport is not used", name, j.reason_name,
                            j.reason),
                {{"machine", name}, {"reason", j.reason_name}});
  TRY(advance_seen(f.state, {{name, it->signed_at_ms}}));
  f.row = *it;
  f.target = TRY(ssh_target(f.row.transport, name));
  return f;
}

// What `machine install` recorded of the airlock there (transport.installed), and its digest:
// absent is AIRLOCK_CONFIG_ERROR naming the fix.
Result<std::pair<Json, std::string>> installed_airlock(const store::MachineRecord& row) {
  const Json& inst = jget(row.transport, "installed");
  if (jstr(inst, "sha256").empty())
    return fail(Code::ConfigError,
                fmt::format("machine {} has no airlock installed by this fleet: run `airlock machine install {}`", row.id,
                            row.id),
                {{"machine", row.id}, {"fix", "airlock machine install " + row.id}});
  return std::pair{inst, jstr(inst, "sha256")};
}

// The first word of a line `sha256sum` printed: 64 lowercase hex digits, or "".
std::string digest_word(std::string_view line) {
  std::string_view w = line.substr(0, std::min(line.find_first_of(" \n"), line.size()));
  if (w.size() != 64 || w.find_first_not_of("0123456789abcdef") != std::string_view::npos) return {};
  return std::string(w);
}

// The start of every far script that runs the installed airlock: the installation directory,
// each of its ancestors and each installed file must be writable by no one but the login user
// (a sticky directory counts as safe), and each installed file must hash to its recorded digest
// (the platform's sha256sum), else exit 97 saying why. A failing check fails closed, a missing
// `stat` included. Only the login user could swap a file between this and its use.
constexpr int kCheckFailed = 97;
std::string custody_prelude(const std::string& dir, const Json& installed) {
  std::string s = fmt::format(
      "set -eu; d={}\n"
      "bad() {{ echo \"airlock: $1\" >&2; exit {}; }}\n"
      "writable() {{ m=$(stat -c %A \"$1\") && test -n \"$m\" || bad \"cannot stat $1\"\n"
      "  case \"$m\" in ?????w????|????????w?) case \"$m\" in d????????t|d????????T) ;; *) return 0;; esac;; esac; return 1; }}\n"
      "for f in \"$d\" \"$d\"/airlock; do test -O \"$f\" || bad \"$f is not this login's\"; "
      "! writable \"$f\" || bad \"$f can be written by others\"; done\n"
      "p=$(cd \"$d\" && pwd -P) || bad \"no $d\"\n"
      "while test \"$p\" != /; do p=$(dirname \"$p\"); ! writable \"$p\" || bad \"$p can be written by others\"; done\n",
      shell_quote(dir), kCheckFailed);
  const Json& files = jget(installed, "files");
  std::vector<std::pair<std::string, std::string>> want;
  if (files.is_object())
    for (const auto& [f, sha] : files.items())
      if (sha.is_string()) want.emplace_back(f, sha.get<std::string>());
  if (want.empty()) want.emplace_back("airlock", jstr(installed, "sha256"));
  for (const auto& [f, sha] : want) {
    if (f.find_first_not_of("abcdefghijklmnopqrstuvwxyz-") != std::string::npos) continue;  // only our own names
    if (sha.find_first_not_of("0123456789abcdef") != std::string::npos) continue;
    s += fmt::format("test -O \"$d\"/{0} && ! writable \"$d\"/{0} || bad \"$d/{0} is not this login's alone\"; "
                     "test \"$(sha256sum < \"$d\"/{0})\" = \"{1}  -\" || bad \"$d/{0} is not the one installed\"\n",
                     f, sha);
  }
  return s;
}

// A far script's failure other than ssh's own: what it said last, as a refusal.
Error far_failed(const FarMachine& f, std::string_view what, const RemoteRun& r) {
  if (r.status == 255) return unreachable_error(f.target, f.row.id, r);
  if (r.status == kCheckFailed) {
    std::string said = r.err;
    while (!said.empty() && (said.back() == '\n' || said.back() == '\r')) said.pop_back();
    return Error{Code::CustodyUnsafe,
                 fmt::format("machine {}: the installation there was replaced or can be changed by others ({}): "
                             "nothing it says is believed (`airlock machine install {}` puts ours back)",
                             f.row.id, escape_for_terminal(said), f.row.id),
                 {{"machine", f.row.id}, {"fix", "airlock machine install " + f.row.id}}};
  }
  return Error{Code::IoError,
               fmt::format("machine {}: {} failed on the far side (status {}): {}", f.row.id, what, r.status,
                           escape_for_terminal(r.err.empty() ? "no reason given" : r.err)),
               {{"machine", f.row.id}, {"status", r.status}}};
}

// `airlock machine install NAME`: copies this airlock (and airlock-probe, airlock-serve and
// airlock-container-check, when they are beside it) to the machine's installation directory over its transport. Each copy is
// hashed there by the platform's own sha256sum, reading the file through redirection, in a shell
// that stops at any failing step; only then are the copies moved into place, after which the
// installed airlock's digest and version are read again on the far side. Any mismatch is
// refused and the row is left as it was; otherwise the row records what is installed.
int machine_install(Globals& g, const std::string& name) {
  auto st = open_store(g);
  if (!st) return refuse(st.error(), g.json);
  auto far = far_machine(g, **st, name);
  if (!far) return refuse(far.error(), g.json);
  std::error_code ec;
  std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return refuse(Error{Code::IoError, "cannot resolve /proc/self/exe: " + ec.message()}, g.json);
  std::vector<std::pair<std::string, std::string>> files;  // name, local sha256
  for (const char* f : {"airlock", "airlock-probe", "airlock-serve", "airlock-container-check"}) {
    std::string path = f == std::string_view("airlock") ? self.string() : (self.parent_path() / f).string();
    if (f != std::string_view("airlock") && ::access(path.c_str(), X_OK) != 0) continue;
    auto sha = sha256_file(path);
    if (!sha) return refuse(sha.error(), g.json);
    files.emplace_back(f, *sha);
  }
  const std::string dir = shell_quote(far->target.dir), tag = random_id().substr(0, 12);
  Json installed_files = Json::object();
  for (const auto& [f, sha] : files) {
    std::string local = f == "airlock" ? self.string() : (self.parent_path() / f).string();
    UniqueFd in(::open(local.c_str(), O_RDONLY | O_CLOEXEC));
    if (!in) return refuse(fail_errno(Code::IoError, "open " + local, errno).error(), g.json);
    std::string tmp = fmt::format("\"$d\"/.{}.new-{}", f, tag);
    // A copy cut short (the connection lost, this airlock stopped) or not the bytes sent is removed
    // there: it never hashes as what was sent, and the script removes it on any way out but success.
    std::string script = fmt::format(
        "set -eu; umask 022; d={}; mkdir -p -- \"$d\"\n"
        "trap 'rm -f {tmp}' EXIT; trap 'rm -f {tmp}; exit 1' HUP INT TERM PIPE\n"
        "cat > {tmp}; chmod 0755 {tmp}; h=$(sha256sum < {tmp}); echo \"$h\"; test \"$h\" = \"{sha}  -\"\n"
        "trap - EXIT HUP INT TERM PIPE",
        dir, fmt::arg("tmp", tmp), fmt::arg("sha", sha));
    std::fprintf(stderr, "airlock: copying %s to %s\n", f.c_str(), name.c_str());
    auto r = ssh_run(far->target, script, in.get(), std::chrono::seconds(900), 4096);
    if (!r) return refuse(r.error(), g.json);
    std::string there = digest_word(r->out);
    if (r->status != 0 && (r->status == 255 || there.empty()))
      return refuse(far_failed(*far, "copying " + f, *r), g.json);
    if (there != sha)
      return refuse(Error{Code::CustodyUnsafe,
                          fmt::format("machine {}: the copy of {} hashes to {} there, not {}: nothing installed",
                                      name, f, there.empty() ? escape_for_terminal(r->out) : there, sha),
                          {{"machine", name}, {"file", f}, {"local_sha256", sha}, {"far_sha256", there}}},
                    g.json);
    installed_files[f] = sha;
  }
  std::string moves;
  for (const auto& [f, sha] : files) moves += fmt::format("mv -f -- \"$d\"/.{0}.new-{1} \"$d\"/{0}; ", f, tag);
  std::string script =
      fmt::format("set -eu; d={}; {}sha256sum < \"$d\"/airlock; \"$d\"/airlock --version", dir, moves);
  auto r = ssh_run(far->target, script, -1, std::chrono::seconds(300), 4096);
  if (!r) return refuse(r.error(), g.json);
  if (r->status != 0) return refuse(far_failed(*far, "installing", *r), g.json);
  std::string there = digest_word(r->out);
  std::string version_line = r->out.substr(std::min(r->out.find('\n') + 1, r->out.size()));
  while (!version_line.empty() && version_line.back() == '\n') version_line.pop_back();
  std::string expect = fmt::format("airlock {} revision {} sha256 {}", kVersion, kRevision, files[0].second);
  if (there != files[0].second || version_line != expect)
    return refuse(Error{Code::CustodyUnsafe,
                        fmt::format("machine {}: the installed airlock is not the one sent (sha256 {} there, {} here; "
                                    "it says \"{}\")",
                                    name, there.empty() ? "unreadable" : there, files[0].second,
                                    escape_for_terminal(version_line)),
                        {{"machine", name}, {"local_sha256", files[0].second}, {"far_sha256", there}}},
                  g.json);
  store::MachineRecord m = far->row;
  m.transport["installed"] = {{"sha256", files[0].second},
                              {"version", std::string(kVersion)},
                              {"revision", std::string(kRevision)},
                              {"files", installed_files},
                              {"at_ms", now_ms()}};
  if (auto w = put_signed(**st, m, far->state, far->row.signed_at_ms); !w) return refuse(w.error(), g.json);
  if (g.json)
    std::printf("%s\n", Json({{"machine", name}, {"dir", far->target.dir}, {"installed", m.transport["installed"]}}).dump(2).c_str());
  else
    std::printf("machine %s: airlock %s installed in %s (sha256 %s, checked there)\n", name.c_str(), kVersion,
                far->target.dir.c_str(), files[0].second.c_str());
  return 0;
}

// `airlock machine probe NAME` for another machine: its installed airlock measures it
// (`airlock machine facts`) over its transport, after the platform's sha256sum has hashed that
// airlock there; the facts are recorded as its row only when that digest is the one `machine
// install` recorded. Nothing can be typed in.
int machine_probe_remote(Globals& g, const std::string& name) {
  auto st = open_store(g);
  if (!st) return refuse(st.error(), g.json);
  auto far = far_machine(g, **st, name);
  if (!far) return refuse(far.error(), g.json);
  auto installed = installed_airlock(far->row);
  if (!installed) return refuse(installed.error(), g.json);
  const auto& [inst, want] = *installed;
  std::string script = fmt::format("d={}; test -x \"$d\"/airlock || {{ echo \"no airlock in $d\" >&2; exit 3; }}\n",
                                   shell_quote(far->target.dir)) +
                       custody_prelude(far->target.dir, inst) +
                       "sha256sum < \"$d\"/airlock; exec \"$d\"/airlock --state-dir \"$d\"/state machine facts";
  auto r = ssh_run(far->target, script, -1, std::chrono::seconds(300), 1 << 20);
  if (!r) return refuse(r.error(), g.json);
  if (r->status == 3)
    return refuse(Error{Code::ConfigError,
                        fmt::format("machine {}: no airlock in {} there: run `airlock machine install {}`", name,
                                    far->target.dir, name),
                        {{"machine", name}, {"fix", "airlock machine install " + name}}},
                  g.json);
  std::string there = digest_word(r->out);
  if (r->status == 0 && there != want)
    return refuse(Error{Code::CustodyUnsafe,
                        fmt::format("machine {}: the airlock in {} there hashes to {}, not the {} installed: it was "
                                    "replaced; nothing measured is believed (`airlock machine install {}` puts ours back)",
                                    name, far->target.dir, there.empty() ? "nothing readable" : there, want, name),
                        {{"machine", name}, {"installed_sha256", want}, {"far_sha256", there}}},
                  g.json);
  if (r->status != 0) return refuse(far_failed(*far, "measuring", *r), g.json);
  std::string_view body = std::string_view(r->out).substr(std::min(r->out.find('\n') + 1, r->out.size()));
  auto j = parse_json(body, Code::ProtocolError, fmt::format("machine {}'s facts", name));
  if (!j) return refuse(j.error(), g.json);
  auto bad = [&](std::string_view why) {
    return refuse(Error{Code::ProtocolError, fmt::format("machine {}: its facts are not what airlock writes: {}", name, why),
                        {{"machine", name}}},
                  g.json);
  };
  if (!j->is_object() || !j->contains("facts") || !(*j)["facts"].is_object()) return bad("no facts object");
  const Json& self = j->value("airlock", Json());
  if (jstr(self, "sha256") != want)
    return refuse(Error{Code::CustodyUnsafe,
                        fmt::format("machine {}: the airlock that measured does not say it is the one installed", name),
                        {{"machine", name}, {"installed_sha256", want}}},
                  g.json);
  Json host = j->value("hostname", Json());
  if (!host.is_string() || host.get<std::string>().size() > 255) return bad("no hostname");
  const Json& facts = (*j)["facts"];
  store::MachineRecord m = far->row;
  m.hostname = host.get<std::string>();
  m.facts = facts;
  m.landlock_abi = facts.value("landlock_abi", Json(0)).is_number_integer() ? facts["landlock_abi"].get<int>() : 0;
  m.probed_at_ms = now_ms();
  if (auto w = put_signed(**st, m, far->state, far->row.signed_at_ms); !w) return refuse(w.error(), g.json);
  auto fleet = fleet_public(far->state);
  Judgement jd = judge(m, fleet ? *fleet : FleetKey());
  if (g.json) {
    std::printf("%s\n", machine_json(m, jd).dump(2, ' ', false, Json::error_handler_t::replace).c_str());
  } else {
    print_table({kMachineHeader, machine_row(m, jd)});
    std::fprintf(stderr, "airlock: machine %s measured over ssh and recorded in %s\n", name.c_str(),
                 (*st)->url().c_str());
  }
  return 0;
}

// ---- attestation: `airlock machine attest NAME` ----

// `airlock machine attest NAME`: the escape suite, run on that machine by its installed airlock
// (hashed there first), every tier it applies; the result is recorded in its row, signed: per
// executor whether it contained every row, and the level that makes. The far suite's own output
// is what the level rests on: a machine's root could forge it, as it could forge anything it runs.
int machine_attest(Globals& g, const std::string& name) {
  auto st = open_store(g);
  if (!st) return refuse(st.error(), g.json);
  auto far = far_machine(g, **st, name);
  if (!far) return refuse(far.error(), g.json);
  auto installed = installed_airlock(far->row);
  if (!installed) return refuse(installed.error(), g.json);
  const auto& [inst, want] = *installed;
  // The suite's pid is kept there, so a stop here (Ctrl-C, SIGTERM, SIGHUP) stops it there: the
  // suite takes SIGTERM as a cancel, stops its running probe and removes its canaries.
  const std::string tag = random_id().substr(0, 12);
  std::string script = custody_prelude(far->target.dir, inst) +
                       fmt::format("umask 077; mkdir -p \"$d\"/attest; sha256sum < \"$d\"/airlock; "
                                   "\"$d\"/airlock --state-dir \"$d\"/state escape-suite --json & "
                                   "echo $! > \"$d\"/attest/{0}.pid; s=0; wait $! || s=$?; rm -f \"$d\"/attest/{0}.pid; exit $s",
                                   tag);
  std::fprintf(stderr, "airlock: running the escape suite on %s (every tier it applies; a minute or more)\n", name.c_str());
  sigset_t mask = block_stop_signals();
  std::atomic<bool> stopped = false;
  StopSignalWaiter waiter(mask, [&] {
    if (stopped.exchange(true)) return;
    (void)ssh_run(far->target,
                  fmt::format("d={}; f=\"$d\"/attest/{}.pid; for i in $(seq 100); do test -s \"$f\" && break; sleep 0.1; "
                              "done; test -s \"$f\" && kill -TERM \"$(cat \"$f\")\"",
                              shell_quote(far->target.dir), tag),
                  -1, std::chrono::seconds(30), 4096);
  });
  auto r = ssh_run(far->target, script, -1, std::chrono::seconds(3600), 64u << 20);
  waiter.done();
  if (stopped)
    return refuse(Error{Code::SessionKilled,
                        fmt::format("machine {}: the attestation was stopped; the escape suite there was cancelled and "
                                    "nothing was recorded",
                                    name),
                        {{"machine", name}}},
                  g.json);
  if (!r) return refuse(r.error(), g.json);
  std::string there = digest_word(r->out);
  if (there.empty() && r->status != 0) return refuse(far_failed(*far, "the escape suite", *r), g.json);
  if (there != want)
    return refuse(r->status == 255 ? unreachable_error(far->target, name, *r)
                                   : Error{Code::CustodyUnsafe,
                                           fmt::format("machine {}: the airlock there hashes to {}, not the {} installed: "
                                                       "nothing it reports is believed",
                                                       name, there.empty() ? "nothing readable" : there, want),
                                           {{"machine", name}, {"fix", "airlock machine install " + name}}},
                  g.json);
  std::string_view body = std::string_view(r->out).substr(std::min(r->out.find('\n') + 1, r->out.size()));
  auto suite = parse_json(body, Code::ProtocolError, fmt::format("machine {}'s escape suite", name));
  if (!suite || !suite->is_object() || jstr(*suite, "schema") != "airlock.escape_suite.v1" ||
      !jget(*suite, "executors").is_array())
    return refuse(r->status != 0 ? far_failed(*far, "the escape suite", *r)
                                 : Error{Code::ProtocolError,
                                         fmt::format("machine {}: the escape suite's output is not what airlock writes", name),
                                         {{"machine", name}}},
                  g.json);
  Json executors = Json::array();
  for (const auto& e : (*suite)["executors"]) {
    if (jstr(e, "executor").empty()) continue;
    const Json& results = e.value("results", Json::array());
    size_t rows = results.is_array() ? results.size() : 0, held = 0;
    if (results.is_array())
      for (const auto& row : results)
        // Held: what the suite expects of a real tier happened (contained, or refused by name).
        if (jbool(row, "matched") && jstr(row, "expected") != "breached" && !jstr(row, "expected").empty() &&
            jstr(row, "verdict") == jstr(row, "expected"))
          ++held;
    bool ran = jget(e, "refusal").is_null();
    bool contained = ran && jstr(e, "expected") == "contained" && jbool(e, "matched") && rows > 0 && held == rows;
    Json x = {{"executor", e["executor"]}, {"contained", contained}, {"rows", rows}, {"rows_contained", held}};
    if (!ran) x["why"] = jstr(jget(e, "refusal"), "message").empty() ? "refused" : jstr(jget(e, "refusal"), "message");
    executors.push_back(std::move(x));
  }
  store::MachineRecord m = far->row;
  m.attestation = {{"schema", "airlock.attestation.v1"},
                   {"suite", jstr(*suite, "schema")},
                   {"airlock_sha256", want},
                   {"kernel", suite->value("kernel", Json(""))},
                   {"uid", suite->value("uid", Json(-1))},
                   {"profile", suite->value("profile", Json(""))},
                   {"attested_at_ms", now_ms()},
                   {"executors", executors}};
  m.attestation["level"] = policy::to_string(attested_level(executors));
  if (auto w = put_signed(**st, m, far->state, far->row.signed_at_ms); !w) return refuse(w.error(), g.json);
  if (g.json) {
    std::printf("%s\n", Json({{"machine", name}, {"attestation", m.attestation}}).dump(2, ' ', false, Json::error_handler_t::replace).c_str());
  } else {
    std::vector<std::vector<std::string>> rows = {{"EXECUTOR", "CONTAINED", "ROWS"}};
    for (const auto& e : executors)
      rows.push_back({e["executor"].get<std::string>(), e["contained"].get<bool>() ? "yes" : "no" + (e.contains("why") ? " (" + e["why"].get<std::string>() + ")" : std::string()),
                      fmt::format("{}/{}", e["rows_contained"].get<size_t>(), e["rows"].get<size_t>())});
    print_table(rows);
    std::printf("machine %s attested %s\n", name.c_str(), m.attestation["level"].get<std::string>().c_str());
  }
  return 0;
}

// ---- dispatch: `airlock run --machine NAME` ----

// How old a probe may be for a run to be composed on it, and which ids far output may name.
constexpr int64_t kRowFreshMs = 24LL * 3600 * 1000;
constexpr size_t kFarReceiptsMax = 64u << 20;
// Which runs of a machine a dispatch looks for as orphans there: started in the last 7 days, 64 at most.
constexpr int64_t kOrphanWindowMs = 7LL * 24 * 3600 * 1000;
constexpr size_t kOrphansAtMost = 64;

bool plain_id(std::string_view s) {
  return !s.empty() && s.size() <= 128 && std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_';
  });
}

// `session`: the far verb is `airlock session` (the action protocol over the same stdio) instead of
// `airlock run -- CMD`; its receipts bind to the session, any number of commands included.
int run_on_machine(Globals& g, RunOptions& o, const std::string& name, bool session) {
  // A session's peer reads protocol lines: each refusal is one too ({"id": null, "ok": false}).
  auto no = [&](const Error& e) {
    if (session) emit_line({{"id", nullptr}, {"ok", false}, {"error", e.to_json()}});
    return refuse(e, g.json);
  };
  auto refuse_fix = [&](Code code, std::string message, std::string fix) {
    return no(Error{code, std::move(message), {{"machine", name}, {"fix", std::move(fix)}}});
  };
  if (!o.workspace || o.workspace->empty() || o.workspace->front() != '/' || !is_valid_utf8(*o.workspace))
    return no(Error{Code::OptionInvalid,
                        "--machine needs --workspace: the absolute path of the run's workspace on that machine",
                        {{"machine", name}}});
  if (o.slot.find(':') != std::string::npos)
    return no(Error{Code::OptionInvalid, "with --machine, --slot names a slot of that machine: NAME only",
                        {{"slot", o.slot}}});
  auto profile = parse_profile(g.profile);
  if (!profile) return no(profile.error());
  auto st = open_store(g);
  if (!st) return no(st.error());
  auto far = far_machine(g, **st, name);
  if (!far) return no(far.error());
  const store::MachineRecord& row = far->row;
  // The gate: the row must be believed whole, installed, probed since, and recently.
  auto fleet = fleet_public(far->state);
  if (!fleet) return no(fleet.error());
  Json seen = read_seen(far->state).value_or(Json::object());
  Json mark = seen.value(name, Json(0));
  Judgement j = judge(row, *fleet, mark.is_number_integer() ? mark.get<int64_t>() : 0);
  auto installed = installed_airlock(row);
  if (!installed) return no(installed.error());
  const Json& inst = installed->first;
  if (!j.believed)
    return refuse_fix(Code::ExecutorUnavailable,
                      fmt::format("machine {}'s row is not believed ({}: {}): nothing runs there", name, j.reason_name,
                                  j.reason),
                      j.reason_name == "never_probed" ? "airlock machine probe " + name
                                                      : "airlock machine probe " + name + " (after fixing what it names)");
  int64_t installed_at = inst.value("at_ms", Json(0)).is_number_integer() ? inst["at_ms"].get<int64_t>() : 0;
  if (row.probed_at_ms < installed_at)
    return refuse_fix(Code::ExecutorUnavailable,
                      fmt::format("machine {} was probed at {}, before the airlock now installed there ({}): its row "
                                  "is stale",
                                  name, utc(row.probed_at_ms), utc(installed_at)),
                      "airlock machine probe " + name);
  if (now_ms() - row.probed_at_ms > kRowFreshMs)
    return refuse_fix(Code::ExecutorUnavailable,
                      fmt::format("machine {} was probed at {}, more than 24 hours ago: its row is stale", name,
                                  utc(row.probed_at_ms)),
                      "airlock machine probe " + name);
  auto pol = load_policy(find_policy_layers(o.defaults, o.policy_file, std::nullopt), far->state, false);
  if (!pol) return no(pol.error());
  pol->workspace = *o.workspace;
  // Composed only where the row asserts what the plan needs: the plan is made from its facts.
  auto plan = plan::plan_execution(*pol, *j.facts, *profile, exec::built_tiers());
  if (!plan) {
    Error e = plan.error();
    e.message = fmt::format("machine {}: {}", name, e.message);
    e.facts["machine"] = name;
    e.facts["fix"] = fmt::format("what the machine's row lacks is named above; once its kernel or configuration "
                                 "provides it, `airlock machine probe {}` measures it again",
                                 name);
    return no(e);
  }
  if (pol->machine_isolation != policy::MachineIsolation::None) {
    std::string why;
    auto level = current_level(row, &why, plan->executor());
    if (level < pol->machine_isolation)
      return refuse_fix(Code::ExecutorUnavailable,
                        fmt::format("machine {}: the policy asks for a machine attested {} ($.machine_isolation); its "
                                    "{} tier is attested {}{}",
                                    name, policy::to_string(pol->machine_isolation),
                                    policy::to_string(plan->executor()), policy::to_string(level),
                                    why.empty() ? "" : " (" + why + ")"),
                        "airlock machine attest " + name);
  }
  std::string policy_digest = policy::digest(*pol);
  sigset_t mask = block_stop_signals();
  auto held = reserve_seat(g, far->state, name + ":" + o.slot, policy_digest);
  if (!held) return no(held.error());
  store::Seat& seat = *held->seat;
  const std::string run_id = seat.run().id;
  (void)make_dirs(far->state + "/receipts");  // its failure is the create's
  auto log = ledger::ReceiptLog::create(far->state + "/receipts/" + run_id + ".jsonl", run_id);
  if (!log) {
    seat.release(std::string(to_name(log.error().code)));
    return no(log.error());
  }
  auto end = [&](const Error* e, Json close) {
    if (e) close["refused"] = e->to_json();
    (void)log->append("dispatch.close", std::move(close));
    seat.release(e ? std::string(to_name(e->code)) : close.value("outcome", std::string("ended")));
    if (e) return no(*e);
    return 0;
  };
  (void)seat.record_enforcement(std::string(policy::to_string(plan->executor())), plan->tier(),
                                "planned from machine " + name + "'s signed row: " + plan->why, row.facts);
  if (auto a = log->append("dispatch.open", {{"machine", name},
                                              {"ssh", jstr(row.transport, "ssh")},
                                              {"installed_sha256", inst["sha256"]},
                                              {"row_signed_at_ms", row.signed_at_ms},
                                              {"row_probed_at_ms", row.probed_at_ms},
                                              {"executor", policy::to_string(plan->executor())},
                                              {"tier", plan->tier()},
                                              {"policy_digest", policy_digest},
                                              {"workspace", *o.workspace},
                                              {"verb", session ? "session" : "run"},
                                              {"argv", o.command}});
      !a) {
    Error e = a.error();
    return end(&e, Json::object());
  }
  if (!o.quiet && !g.json)
    std::fprintf(stderr, "airlock: machine %s: %s tier planned from its signed row (probed %s), run %s\n",
                 name.c_str(), std::string(policy::to_string(plan->executor())).c_str(), utc(row.probed_at_ms).c_str(),
                 run_id.c_str());
  // A session's peer learns the dispatch (its run, where its receipts are kept here) first; the
  // far session's own lines follow, then dispatch.close.
  if (session) ::signal(SIGPIPE, SIG_IGN);  // a peer that went away is a failed write, handled
  if (session)
    emit_line({{"id", nullptr},
               {"ok", true},
               {"event", "dispatch.open"},
               {"result",
                {{"run", run_id},
                 {"machine", name},
                 {"receipts", log->path()},
                 {"executor", policy::to_string(plan->executor())},
                 {"tier", plan->tier()}}}});

  // One script: the installation is the far user's alone and its airlock the one installed (the
  // platform's sha256sum), checked right before the exec (only that user could swap it between);
  // the policy travels inside the script; the run's directory keeps its pid and summary.
  const std::string dir = shell_quote(far->target.dir), want = inst["sha256"].get<std::string>();
  const std::string t = fmt::format("\"$d\"/dispatch/{}", run_id);
  // Far runs whose dispatcher is gone (a SIGKILLed airlock here leaves its far run going while
  // the store judges its seat free): stopped there before this one starts, so what runs there is
  // what the store seats. Each is known by its dispatch directory and its process by the
  // command line that names it (a pid alone may have been reused); a directory whose run has
  // ended is removed.
  std::string orphans;
  if (auto all = held->store->runs(false)) {
    size_t n = 0;
    const std::string self = machine_identity(g);
    for (auto it = all->rbegin(); it != all->rend(); ++it) {  // newest first: the latest orphans matter most
      const store::RunRecord& r = *it;
      if (r.machine_id != name || r.id == run_id || !plain_id(r.id) || now_ms() - r.started_at_ms > kOrphanWindowMs)
        continue;
      bool gone = r.live() ? !store::holder_alive(r, self, now_ms(), held->store->options().heartbeat_expiry_ms)
                           : r.outcome == "holder_dead";
      if (gone && n++ < kOrphansAtMost) orphans += " " + r.id;
    }
  }
  std::string script = custody_prelude(far->target.dir, inst) + fmt::format(
      "t={t}\n"
      "{orphans}"
      // The workspace is the run's, never airlock's own installation (its pid files, its state).
      // Resolved physically (cd -P: a link and a `..` after it are followed as the kernel does).
      "p=$(cd -P \"$d\" && pwd -P) || bad \"cannot resolve $d\"; w=$(cd -P {ws} && pwd -P) || bad \"cannot resolve the "
      "workspace\"; case \"$w/\" in \"$p/\"*) bad \"the workspace $w is inside airlock's installation $p\";; esac; "
      "case \"$p/\" in \"$w/\"*) bad \"the workspace $w holds airlock's installation $p\";; esac\n"
      "umask 077; mkdir -p \"$d\"/dispatch; mkdir \"$t\"\n"
      "printf %s {policy} | base64 -d > \"$t\"/policy.json\n"
      "echo $$ > \"$t\"/pid\n"
      "exec \"$d\"/airlock --state-dir \"$d\"/state {verb} --summary-file \"$t\"/summary.json --policy \"$t\"/policy.json "
      "--workspace {ws}{slot}{end}",
      fmt::arg("t", t), fmt::arg("verb", session ? "session" : o.quiet ? "run -q" : "run"),
      fmt::arg("end", session ? "" : " --"),
      fmt::arg("orphans", orphans.empty() ? std::string()
                          : "for r in" + orphans + "; do o=\"$d\"/dispatch/$r; test -d \"$o\" || continue; "
                            "p=$(cat \"$o\"/pid 2>/dev/null || true); "
                            "if test -n \"$p\" && grep -qa \"dispatch/$r/summary.json\" /proc/\"$p\"/cmdline 2>/dev/null; "
                            "then kill -TERM \"$p\" 2>/dev/null || true; else rm -rf \"$o\"; fi; done\n"),
      fmt::arg("policy", shell_quote(base64_encode(policy::to_json(*pol).dump()))),
      fmt::arg("ws", shell_quote(*o.workspace)),
      fmt::arg("slot", o.slot != "default" ? " --slot " + shell_quote(o.slot) : std::string()));
  for (const auto& a : o.command) script += " " + shell_quote(a);
  auto args = ssh_command(far->target, script);
  if (!args) return end(&args.error(), Json::object());
  std::vector<char*> argv;
  for (auto& a : *args) argv.push_back(a.data());
  argv.push_back(nullptr);
  // ssh stays in the terminal's foreground group (it may read the terminal) with the stop signals
  // blocked, as they are here: a Ctrl-C is ours to turn into a stop of the far run (ssh ending
  // would leave it running). stdin, stdout and stderr are the terminal's, byte for byte.
  // A session's lines are relayed here instead: the peer must be able to tell this side's lines
  // (dispatch.open, dispatch.close, refusals) from the far side's, and the far session must say
  // it is confined as planned.
  UniqueFd relay_rd, relay_wr;
  if (session) {
    int rp[2];
    if (::pipe2(rp, O_CLOEXEC) < 0) {
      Error e = fail_errno(Code::IoError, "pipe2 for ssh", errno).error();
      return end(&e, Json::object());
    }
    relay_rd.reset(rp[0]);
    relay_wr.reset(rp[1]);
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  if (session) posix_spawn_file_actions_adddup2(&fa, relay_wr.get(), 1);
  pid_t pid = -1;
  int rc = ::posix_spawnp(&pid, "ssh", &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  relay_wr.reset();
  if (rc != 0) {
    Error e = fail_errno(Code::ConfigError, "cannot start ssh (Debian's openssh-client)", rc).error();
    return end(&e, Json::object());
  }
  // A stop signal of ours stops the far run (its airlock takes SIGTERM as a stop: the command and
  // what it started are killed, nothing is written back, and its receipts say so).
  // `ours`: the pid kept there is still this run's airlock (its command line names the run's
  // directory), not a pid reused, nor one written there by anything else.
  const std::string ours = fmt::format(
      "ours() {{ p=$(cat \"$t\"/pid 2>/dev/null) && test -n \"$p\" && grep -qa \"dispatch/{}/summary.json\" "
      "/proc/\"$p\"/cmdline 2>/dev/null; }}; ",
      run_id);
  const std::string stop_far = fmt::format("d={}; t={}; {}ours && kill -TERM \"$p\"", dir, t, ours);
  std::atomic<bool> stopped = false;
  auto stop = [&] {
    if (stopped.exchange(true)) return;
    auto k = ssh_run(far->target, stop_far, -1, std::chrono::seconds(30), 4096);
    if (!k || k->status != 0) ::kill(pid, SIGKILL);  // the far run is left to its own limits
  };
  StopSignalWaiter waiter(mask, stop);
  std::string relay_problem;  // written by the relay alone, read once it has been joined
  std::thread relay;
  if (session)
    relay = std::thread([&] {
      std::string buf;
      char chunk[65536];
      bool spoiled = false;  // after a bad line, nothing more is relayed
      auto spoil = [&](std::string why) {
        if (relay_problem.empty()) relay_problem = std::move(why);
        spoiled = true;
        stop();  // here: ssh's output waits in the pipe meanwhile
      };
      auto pass = [&](std::string_view line) {
        if (spoiled) return;
        auto j = parse_json(line, Code::ProtocolError, "a far session's line");
        if (j && j->is_object() && jget(*j, "id").is_null()) {
          std::string event = jstr(*j, "event");
          const Json& r = jget(*j, "result");
          std::string bad;
          if (event.starts_with("dispatch."))
            bad = "the far side sent a " + event + " line, which only this side writes";
          else if (event == "session.open" &&
                   (jstr(r, "executor") != policy::to_string(plan->executor()) || jget(r, "tier") != Json(plan->tier())))
            bad = fmt::format("the far session says it is confined by {} (tier {}), not the {} planned",
                              escape_for_terminal(jstr(r, "executor")), jget(r, "tier").dump(),
                              policy::to_string(plan->executor()));
          if (!bad.empty()) return spoil(bad);  // not relayed: the peer hears this side's refusal at the end
        }
        std::string out(line);
        out += '\n';
        if (std::fwrite(out.data(), 1, out.size(), stdout) != out.size() || std::fflush(stdout) != 0)
          spoil("the session's peer here stopped reading");  // the far session is stopped, its receipts fetched
      };
      for (;;) {
        ssize_t got = ::read(relay_rd.get(), chunk, sizeof chunk);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) break;
        buf.append(chunk, static_cast<size_t>(got));
        for (size_t nl; (nl = buf.find('\n')) != std::string::npos;) {
          pass(std::string_view(buf).substr(0, nl));
          buf.erase(0, nl + 1);
        }
        if (buf.size() > kFarReceiptsMax) {  // a line past any answer's bound
          buf.clear();
          if (!spoiled) spoil("the far session wrote a line longer than any answer");
        }
      }
      if (!buf.empty()) pass(buf);
    });
  // The relay ends when ssh does (ssh alone holds the pipe's other end); joined before ssh is
  // reaped, so a stop it makes never signals a pid reaped meanwhile.
  if (relay.joinable()) relay.join();
  int wst = 0;
  while (::waitpid(pid, &wst, 0) < 0 && errno == EINTR) {
  }
  waiter.done();
  const int ssh_status = WIFEXITED(wst) ? WEXITSTATUS(wst) : 128 + WTERMSIG(wst);

  // In one connection: how the far run stands (`done`, `killed`: it ended without its outcome,
  // `running`), then its summary (written from its start, whole at its end), then the receipts
  // of the session that names (checked against the summary here); the run's directory is removed
  // once it has ended. ssh may have ended first (a closed pipe of ours): the far run is then
  // stopped, and the seat is held until it has ended.
  auto fetch = [&] {
    return ssh_run(far->target,
                   fmt::format("d={}; t={}; {}for i in $(seq 600); do grep -q '\"outcome\"' \"$t\"/summary.json 2>/dev/null && break; "
                               "ours || break; sleep 0.1; done; "
                               "if grep -q '\"outcome\"' \"$t\"/summary.json 2>/dev/null; then echo done; "
                               "elif ours; then echo running; exit 0; "
                               "else echo killed; fi; "
                               "test -e \"$t\"/summary.json || exit 0; cat \"$t\"/summary.json; "
                               "s=$(grep -o '\"session\":\"[0-9a-f]*\"' \"$t\"/summary.json | head -n 1 | cut -d '\"' -f 4); "
                               "rm -rf \"$t\"; test -n \"$s\" && cat \"$d\"/state/receipts/\"$s\".jsonl",
                               dir, t, ours),
                   -1, std::chrono::seconds(300), kFarReceiptsMax + (1u << 20));
  };
  auto got = fetch();
  if (got && got->status == 0 && got->out.starts_with("running")) {
    (void)ssh_run(far->target, stop_far, -1, std::chrono::seconds(30), 4096);
    got = fetch();
  }
  std::string far_state;
  if (got) {
    size_t first = got->out.find('\n');
    far_state = got->out.substr(0, first);
    got->out.erase(0, first == std::string::npos ? got->out.size() : first + 1);
  }
  const bool far_killed = far_state == "killed";
  size_t nl = got ? got->out.find('\n') : std::string::npos;
  Json summary = nl != std::string::npos
                     ? parse_json(std::string_view(got->out).substr(0, nl), Code::ProtocolError, "the far run's summary")
                           .value_or(Json())
                     : Json();
  const std::string far_session = jstr(summary, "session");
  if (!summary.is_object() || !plain_id(far_session)) {
    if (far_state != "running")
      (void)ssh_run(far->target, fmt::format("d={}; t={}; rm -rf \"$t\"", dir, t), -1, std::chrono::seconds(60), 4096);
    Error e = !got && ssh_status == 255
                  ? Error{Code::ServerUnreachable, fmt::format("machine {}: ssh failed: {}", name, got.error().message),
                          {{"machine", name}}}
              : far_state == "running"
                  ? Error{Code::ServerUnreachable,
                          fmt::format("machine {}: the run there would not stop; it is left to its own limits", name),
                          {{"machine", name}}}
              : ssh_status == kCheckFailed
                  ? Error{Code::CustodyUnsafe,
                          fmt::format("machine {}: the installation there failed its check (said above): nothing ran", name),
                          {{"machine", name}, {"fix", "airlock machine install " + name}}}
              : ssh_status == 255
                  ? Error{Code::ServerUnreachable, fmt::format("machine {}: ssh failed before the run started", name),
                          {{"machine", name}}}
                  : Error{Code::ToolFailed,
                          fmt::format("machine {}: the run there ended (status {}) without its summary: refused or not "
                                      "started there (said above)",
                                      name, ssh_status),
                          {{"machine", name}, {"status", ssh_status}}};
    return end(&e, {{"ssh_status", ssh_status}, {"far_state", far_state}});
  }

  // Its receipts, verified here, bound to what was dispatched, and appended to this run's chain.
  Json far_chain = {{"session", far_session}};
  auto c = got;
  if (c) c->out.erase(0, nl + 1);
  std::string problem;
  std::vector<Json> receipts;
  if (!c)
    problem = c.error().message;
  else if (c->status != 0)
    problem = far_failed(*far, "reading the far receipts", *c).message;
  if (problem.empty()) {
    std::string copy = far->state + "/receipts/" + run_id + ".far.jsonl";
    far_chain["copy"] = copy;
    far_chain["sha256"] = sha256_hex(c->out);
    if (auto w = write_file_atomic(copy, c->out, 0600); !w) {
      problem = w.error().message;
    } else if (auto v = ledger::verify_chain(copy); !v && !(far_killed && v.error().facts.contains("torn_tail"))) {
      problem = v.error().message;
    } else {
      // A run killed midway may have left a torn last line: what came before it verifies.
      uint64_t count = v ? v->receipts : v.error().facts.value("receipts", uint64_t{0});
      std::string_view text = c->out;
      if (!v) {
        far_chain["torn_tail"] = v.error().facts["torn_tail"];
        size_t last_nl = text.rfind('\n');
        text = text.substr(0, last_nl == std::string_view::npos ? 0 : last_nl + 1);
      }
      far_chain["receipts"] = count;
      if (v) far_chain["last_hash"] = v->last_hash;
      for (size_t at = 0; at < text.size() && problem.empty();) {
        size_t nl = text.find('\n', at);
        auto rec = parse_json(text.substr(at, nl - at), Code::LedgerCorrupt, "a far receipt", ledger::kReceiptLineLimits);
        if (!rec || !rec->is_object())
          problem = "a far receipt does not parse";
        else
          receipts.push_back(std::move(*rec));
        at = nl + 1;
      }
      // Bound to this dispatch: one session, opened and closed, on the planned tier, in the
      // workspace and with the argv sent. (The far airlock signs nothing: a far machine's root
      // could write such a chain itself.)
      auto mismatch = [&](std::string what) {
        if (problem.empty()) problem = std::move(what);
      };
      if (receipts.size() != count || receipts.empty()) mismatch("the receipts read are not the receipts verified");
      for (const auto& r : receipts)
        if (jstr(r, "session") != far_session) mismatch("a receipt of another session");
      if (!receipts.empty()) {
        const Json& open = receipts.front();
        if (jstr(open, "kind") != "session.open") mismatch("the chain does not start with session.open");
        if (jstr(open, "executor") != policy::to_string(plan->executor()) || open.value("tier", Json()) != Json(plan->tier()))
          mismatch(fmt::format("the run there was confined by {} (tier {}), not the {} planned",
                               jstr(open, "executor"), open.value("tier", Json()).dump(), policy::to_string(plan->executor())));
        if (jstr(open, "workspace") != *o.workspace) mismatch("the run there had another workspace");
        if (jstr(receipts.back(), "kind") != "session.close" && !far_killed)
          mismatch("the chain does not end with session.close");
        // A receipt holds an argument that is not UTF-8 in its lossy form, its exact bytes under
        // not_utf8 (repair_utf8): the argv sent is compared in the same two parts.
        Json sent = {{"argv", o.command}};
        Json sent_exact = repair_utf8(sent);
        size_t runs = 0;
        for (const auto& r : receipts)
          if (jstr(r, "kind") == "tool.run") {
            ++runs;
            Json exact = Json::array();
            if (const Json& n = jget(r, "not_utf8"); n.is_array())
              for (const auto& e : n)
                if (jstr(e, "pointer").starts_with("/argv/")) exact.push_back(e);
            if (!session && (jget(r, "argv") != sent["argv"] || exact != sent_exact))
              mismatch("the command run there is not the one sent");
          }
        if (runs > 1 && !session) mismatch("more than one command ran there");
      }
    }
  }
  if (problem.empty() && !relay_problem.empty()) problem = relay_problem;
  far_chain["verified"] = problem.empty();
  if (!problem.empty()) far_chain["error"] = problem;
  for (const auto& r : receipts) {
    if (!problem.empty()) break;
    if (auto a = log->append("far.receipt", {{"machine", name}, {"receipt", r}}); !a) {
      Error e = a.error();
      return end(&e, {{"far_chain", far_chain}});
    }
  }
  if (far_killed && problem.empty()) {
    Error e{Code::SessionKilled,
            fmt::format("machine {}: the run there was killed before its end (status {}); its {} receipt(s) verify here "
                        "and are in {}",
                        name, ssh_status, far_chain.value("receipts", Json(0)).dump(), log->path()),
            {{"machine", name}, {"far_session", far_session}}};
    return end(&e, {{"ssh_status", ssh_status}, {"far_state", far_state}, {"far_chain", far_chain}});
  }
  // The status is the far run's own, from its summary (ssh's is the same unless ssh failed).
  const Json& outcome_j = summary.value("outcome", Json::object());
  const Json& refusals = summary.value("refusals", Json::array());
  int status = ssh_status;
  if (const Json& fs = jget(outcome_j, "status"); fs.is_number_integer() && fs.get<int64_t>() >= 0 && fs.get<int64_t>() < 256)
    status = fs.get<int>();
  if (refusals.is_array() && !refusals.empty()) status = kRefusedExit;
  std::string outcome = refusals.is_array() && !refusals.empty() && refusals[0].is_object()
                            ? jstr(refusals[0], "code")
                            : fmt::format("exit {}", status);
  Json close = {{"status", status}, {"ssh_status", ssh_status}, {"outcome", outcome}, {"far_summary", summary},
                {"far_chain", far_chain}};
  if (!problem.empty()) {
    Error e{Code::LedgerCorrupt, fmt::format("machine {}: the far run's receipts are not believed here: {}", name, problem),
            {{"machine", name}, {"far_session", far_session}}};
    return end(&e, close);
  }
  (void)log->append("dispatch.close", close);
  seat.release(outcome);
  if (session)
    emit_line({{"id", nullptr},
               {"ok", true},
               {"event", "dispatch.close"},
               {"result", {{"run", run_id}, {"outcome", outcome}, {"far_receipts", far_chain}}}});
  for (const auto& r : refusals)
    if (r.is_object())
      std::fprintf(stderr, "airlock: refused: %s: machine %s: %s\n", escape_for_terminal(jstr(r, "code")).c_str(),
                   name.c_str(), escape_for_terminal(jstr(r, "message")).c_str());
  if (g.json) {
    Json out = summary;
    out["machine"] = name;
    out["run"] = run_id;
    out["receipts"] = log->path();
    out["far_receipts"] = far_chain;
    std::printf("%s\n", out.dump(-1, ' ', false, Json::error_handler_t::replace).c_str());
  } else if (!o.quiet) {
    std::fprintf(stderr, "airlock: machine %s: %s; its %s receipts verified here and added to %s\n", name.c_str(),
                 outcome.c_str(), far_chain.value("receipts", Json(0)).dump().c_str(), log->path().c_str());
  }
  return status;
}

int slot_set(Globals& g, const StoreOptionsCli& o) {
  auto ref = parse_slot_ref(g, o.slot);
  if (!ref) return refuse(ref.error(), g.json);
  auto st = open_store(g);
  if (!st) return refuse(st.error(), g.json);
  store::SlotRecord s{ref->machine_id, ref->name, o.max_sessions};
  if (auto r = (*st)->set_slot(s); !r) return refuse(r.error(), g.json);
  if (g.json)
    std::printf(
        "%s\n",
        Json({{"machine", s.machine_id}, {"slot", s.name}, {"max_sessions", s.seats()}}).dump().c_str());
  else
    std::printf("slot %s on machine %s: %d seat(s)%s\n", s.name.c_str(), s.machine_id.c_str(), s.seats(),
                s.max_sessions ? "" : " (no max_sessions declared)");
  return 0;
}

// Whether a run's holder still runs, as a reservation would judge it.
bool holder_live(store::Store& st, const store::RunRecord& r, const std::string& self_machine) {
  return store::holder_alive(r, self_machine, now_ms(), st.options().heartbeat_expiry_ms);
}

int slot_list(Globals& g) {
  auto st = open_store(g);
  if (!st) return refuse(st.error(), g.json);
  auto slots = (*st)->slots();
  if (!slots) return refuse(slots.error(), g.json);
  auto live = (*st)->runs(true);
  if (!live) return refuse(live.error(), g.json);
  // A run whose holder is dead carries nothing, though only a reservation finalises it.
  std::erase_if(*live, [&](const store::RunRecord& r) { return !holder_live(**st, r, machine_identity(g)); });
  Json arr = Json::array();
  std::vector<std::vector<std::string>> rows = {{"MACHINE", "SLOT", "LIVE", "MAX_SESSIONS"}};
  for (const auto& s : *slots) {
    size_t n = std::count_if(live->begin(), live->end(),
                             [&](const auto& r) { return r.machine_id == s.machine_id && r.slot == s.name; });
    arr.push_back({{"machine", s.machine_id}, {"slot", s.name}, {"live", n}, {"max_sessions", s.seats()}});
    rows.push_back({s.machine_id, s.name, std::to_string(n), std::to_string(s.seats())});
  }
  return emit(g, "slots", arr, rows);
}

int runs_list(Globals& g, const StoreOptionsCli& o) {
  auto st = open_store(g);
  if (!st) return refuse(st.error(), g.json);
  auto runs = (*st)->runs(o.live);
  if (!runs) return refuse(runs.error(), g.json);
  // Read-only: a run whose holder is dead is shown as such (and not as live), never finalised
  // here; the next reservation of its seat does that.
  std::string self = machine_identity(g);
  if (o.live) std::erase_if(*runs, [&](const store::RunRecord& r) { return !holder_live(**st, r, self); });
  Json arr = Json::array();
  std::vector<std::vector<std::string>> rows = {
      {"RUN", "MACHINE", "SLOT", "SEAT", "EXECUTOR", "TIER", "HOLDER", "STARTED", "FINISHED", "OUTCOME"}};
  for (const auto& r : *runs) {
    bool dead = r.live() && !holder_live(**st, r, self);
    Json j = r.to_json();
    if (r.live()) j["holder_alive"] = !dead;
    arr.push_back(std::move(j));
    rows.push_back({r.id, r.machine_id, r.slot, std::to_string(r.ordinal),
                    r.executor.empty() ? "-" : r.executor, r.tier ? std::to_string(*r.tier) : "-",
                    fmt::format("{}@{}", r.holder.pid, r.holder.machine_id), utc(r.started_at_ms),
                    r.finished_at_ms ? utc(*r.finished_at_ms) : dead ? "holder dead" : "live", r.outcome.empty() ? "-" : r.outcome});
  }
  return emit(g, "runs", arr, rows);
}

int runs_show(Globals& g, const StoreOptionsCli& o) {
  auto st = open_store(g);
  if (!st) return refuse(st.error(), g.json);
  auto run = (*st)->run(o.run_id);
  if (!run) return refuse(run.error(), g.json);
  if (!*run)
    return refuse(
        {Code::NotFound, fmt::format("no run {} in {}", o.run_id, (*st)->url()), {{"run", o.run_id}}},
        g.json);
  const auto& r = **run;
  if (g.json) {
    std::printf("%s\n", r.to_json().dump(2).c_str());
    return 0;
  }
  print_table({{"run", r.id},
               {"machine", r.machine_id},
               {"slot", fmt::format("{} (seat {})", r.slot, r.ordinal)},
               {"policy", fmt::format("sha256 {}", r.policy_digest)},
               {"executor", r.executor.empty() ? "-" : r.executor},
               {"tier", r.tier ? std::to_string(*r.tier) : "-"},
               {"chosen because", r.executor_reason.empty() ? "-" : r.executor_reason},
               {"holder", fmt::format("pid {} (start time {}) on {}", r.holder.pid, r.holder.start_time,
                                      r.holder.machine_id)},
               {"started", utc(r.started_at_ms)},
               {"heartbeat", utc(r.heartbeat_at_ms)},
               {"finished", r.finished_at_ms ? utc(*r.finished_at_ms) : "live"},
               {"outcome", r.outcome.empty() ? "-" : r.outcome},
               {"facts", r.kernel_facts.is_null() ? "-" : r.kernel_facts.dump()}});
  return 0;
}

}  // namespace

int run_on_machine_cli(Globals& g, RunOptions& o, const std::string& name) { return run_on_machine(g, o, name, false); }
int session_on_machine_cli(Globals& g, RunOptions& o, const std::string& name) { return run_on_machine(g, o, name, true); }

Result<Json> fleet_machines(const Globals& g, const std::string& state) {
  // A store that was never made is not made by looking: no machines.
  if (g.store_url.empty() && ::access((state + "/airlock.db").c_str(), F_OK) != 0) return Json::array();
  auto st = TRY(open_store(g, state));
  auto seen = TRY(machines_seen(*st, state));
  return seen.arr;
}

void add_store_verbs(CLI::App& app, Globals& g, Action& run) {
  static StoreOptionsCli o;
  auto* machine = app.add_subcommand("machine", "this machine's measured capabilities in the run store");
  machine->require_subcommand(1);
  static std::string probe_name, install_name;
  auto* probe = machine->add_subcommand("probe", "measure this machine, or another over its ssh transport, and record it as its row");
  probe->add_option("name", probe_name, "another machine (`machine add`), measured by its installed airlock");
  probe->add_flag("--json", g.json, "print JSON");
  probe->callback([&g, &run] { run = [&g] { return machine_probe(g, probe_name); }; });
  auto* mfacts = machine->add_subcommand("facts", "measure this machine and print its facts as JSON, recording nothing");
  mfacts->callback([&g, &run] { run = [&g] { return machine_facts(g); }; });
  auto* minstall = machine->add_subcommand("install", "copy this airlock to another machine over ssh, checked there by digest");
  minstall->add_option("name", install_name, "the machine (`machine add`)")->required();
  minstall->add_flag("--json", g.json, "print JSON");
  minstall->callback([&g, &run] { run = [&g] { return machine_install(g, install_name); }; });
  static std::string attest_name;
  auto* mattest = machine->add_subcommand("attest", "run the escape suite on another machine and record its isolation level, signed");
  mattest->add_option("name", attest_name, "the machine (`machine add`, `machine install`)")->required();
  mattest->add_flag("--json", g.json, "print JSON");
  mattest->callback([&g, &run] { run = [&g] { return machine_attest(g, attest_name); }; });
  auto* madd = machine->add_subcommand("add", "record another machine and how it is reached (ssh), signed");
  madd->add_option("name", o.machine, "the machine's name in the store")->required();
  madd->add_option("--ssh", o.ssh, "user@host[:port] to reach it over")->required();
  madd->add_option("--identity", o.identity, "the private key ssh uses (mode 0600)");
  madd->add_option("--known-hosts", o.known_hosts, "the far host keys believed (default: ssh's own known_hosts)");
  madd->add_option("--dir", o.dir, "airlock's installation directory there (default .airlock, below its home)");
  madd->add_flag("--json", g.json, "print JSON");
  madd->callback([&g, &run] { run = [&g] { return machine_add(g, o); }; });
  static std::string remove_name;
  auto* mremove = machine->add_subcommand("remove", "delete a machine's row (a row not believed is recovered by adding it again)");
  mremove->add_option("name", remove_name, "the machine")->required();
  mremove->add_flag("--json", g.json, "print JSON");
  mremove->callback([&g, &run] { run = [&g] { return machine_remove(g, remove_name); }; });
  auto* mlist = machine->add_subcommand("list", "the machines recorded, each judged against this build");
  mlist->add_flag("--json", g.json, "print JSON");
  mlist->callback([&g, &run] { run = [&g] { return machine_list(g); }; });

  auto* fleet = app.add_subcommand("fleet", "the fleet's signing key, which every machine row is signed with");
  fleet->require_subcommand(1);
  auto* finit = fleet->add_subcommand("init", "create the fleet key (STATE/fleet/signing.key) and print its public key");
  finit->add_flag("--json", g.json, "print JSON");
  finit->callback([&g, &run] { run = [&g] { return fleet_init(g); }; });
  static std::string trusted;
  auto* ftrust = fleet->add_subcommand("trust", "check machine rows here with the fleet's public key, signing none");
  ftrust->add_option("key", trusted, "the public key `fleet init` printed (base64)")->required();
  ftrust->callback([&g, &run] { run = [&g] { return fleet_trust(g, trusted); }; });

  auto* slot = app.add_subcommand("slot", "slots and their capacity");
  slot->require_subcommand(1);
  auto* sset = slot->add_subcommand("set", "declare a slot (NAME or MACHINE:NAME) and its max_sessions");
  sset->add_option("name", o.slot, "slot name")->required();
  sset->add_option("--max-sessions", o.max_sessions, "how many runs the slot may carry (absent: one)")
      ->check(CLI::Range(1, 1'000'000));
  sset->add_flag("--json", g.json, "print JSON");
  sset->callback([&g, &run] { run = [&g] { return slot_set(g, o); }; });
  auto* slist = slot->add_subcommand("list", "the declared slots and how many live runs each carries");
  slist->add_flag("--json", g.json, "print JSON");
  slist->callback([&g, &run] { run = [&g] { return slot_list(g); }; });

  auto* runs = app.add_subcommand("runs", "runs recorded in the store");
  runs->require_subcommand(1);
  auto* rlist = runs->add_subcommand("list", "every run, oldest first");
  rlist->add_flag("--live", o.live, "only runs not finished");
  rlist->add_flag("--json", g.json, "print JSON");
  rlist->callback([&g, &run] { run = [&g] { return runs_list(g, o); }; });
  auto* rshow = runs->add_subcommand("show", "one run");
  rshow->add_option("id", o.run_id, "run id")->required();
  rshow->add_flag("--json", g.json, "print JSON");
  rshow->callback([&g, &run] { run = [&g] { return runs_show(g, o); }; });
}

}  // namespace airlock::cli
