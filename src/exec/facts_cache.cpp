// facts_cache: the host probe's answers kept per boot, keyed by everything they depend on.
#include "exec/facts_cache.h"

#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <ctime>
#include <cstring>
#include <vector>

#include "base/fs.h"
#include "base/unique_fd.h"
#include "linux/cgroup.h"
#include "linux/probe.h"

namespace airlock::exec {
namespace {

constexpr std::string_view kSchema = "airlock.host_facts_cache.v1";

// The GNU build id of the running program (the linker's digest of its contents), from its
// PT_NOTE segments in memory: no file is read.
std::string own_build_id() {
  std::string id;
  ::dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* out) -> int {
        if (info->dlpi_name && info->dlpi_name[0] != '\0') return 0;  // the main program only
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const auto& ph = info->dlpi_phdr[i];
          if (ph.p_type != PT_NOTE) continue;
          auto* p = reinterpret_cast<const unsigned char*>(info->dlpi_addr + ph.p_vaddr);
          const unsigned char* end = p + ph.p_memsz;
          while (p + sizeof(ElfW(Nhdr)) <= end) {
            auto* n = reinterpret_cast<const ElfW(Nhdr)*>(p);
            const unsigned char* name = p + sizeof(ElfW(Nhdr));
            const unsigned char* desc = name + ((n->n_namesz + 3) & ~3u);
            const unsigned char* next = desc + ((n->n_descsz + 3) & ~3u);
            if (next > end) break;
            if (n->n_type == NT_GNU_BUILD_ID && n->n_namesz == 4 && std::memcmp(name, "GNU", 4) == 0) {
              static constexpr char kHex[] = "0123456789abcdef";
              auto* s = static_cast<std::string*>(out);
              for (unsigned j = 0; j < n->n_descsz; ++j) {
                s->push_back(kHex[desc[j] >> 4]);
                s->push_back(kHex[desc[j] & 15]);
              }
              return 1;
            }
            p = next;
          }
        }
        return 1;
      },
      &id);
  return id;
}

Json file_or_null(const char* path) {
  auto text = read_file(path);
  return text ? Json(*text) : Json(nullptr);
}

// Who owns a path and how, or null when it does not exist: enough to see a delegation made or
// undone, or /dev/kvm's group or mode changed.
Json stat_or_null(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) < 0) return nullptr;
  return Json::array({static_cast<uint64_t>(st.st_ino), st.st_uid, st.st_gid, st.st_mode});
}

// The lines of /proc/self/status that bound what this process may do whatever the kernel could:
// a seccomp filter or no_new_privs inherited from the parent, and the capabilities held.
Json status_limits() {
  auto text = read_file("/proc/self/status");
  if (!text) return nullptr;
  Json out = Json::object();
  std::string_view rest = *text;
  while (!rest.empty()) {
    auto nl = rest.find('\n');
    std::string_view line = rest.substr(0, nl);
    rest = nl == std::string_view::npos ? std::string_view{} : rest.substr(nl + 1);
    for (std::string_view name : {"Seccomp:", "NoNewPrivs:", "CapEff:", "CapBnd:"})
      if (line.starts_with(name)) out[std::string(name.substr(0, name.size() - 1))] = std::string(line.substr(name.size()));
  }
  return out;
}

// The cgroup filesystems mounted in our mount namespace (the probe reads these lines).
Json cgroup_mounts() {
  auto text = read_file("/proc/self/mountinfo");
  if (!text) return nullptr;
  Json out = Json::array();
  for (const auto& m : linux::parse_mountinfo(*text))
    if (m.fstype == "cgroup" || m.fstype == "cgroup2")
      out.push_back(Json::array({m.root, m.mount_point, m.fstype, m.super_options}));
  return out;
}

Json link_or_null(const char* path) {
  char buf[256];
  ssize_t n = ::readlink(path, buf, sizeof buf);
  return n > 0 ? Json(std::string(buf, static_cast<size_t>(n))) : Json(nullptr);
}

Json needs_json(const plan::FactNeeds& n) {
  return {{"user_namespaces", n.user_namespaces}, {"overlayfs", n.overlayfs}, {"cgroups", n.cgroups}, {"kvm", n.kvm}};
}

std::optional<plan::FactNeeds> needs_from_json(const Json& j) {
  plan::FactNeeds n;
  const std::pair<const char*, bool*> fields[] = {
      {"user_namespaces", &n.user_namespaces}, {"overlayfs", &n.overlayfs}, {"cgroups", &n.cgroups}, {"kvm", &n.kvm}};
  if (!j.is_object() || j.size() != std::size(fields)) return std::nullopt;
  for (auto [name, field] : fields) {
    auto it = j.find(name);
    if (it == j.end() || !it->is_boolean()) return std::nullopt;
    *field = it->get<bool>();
  }
  return n;
}

}  // namespace

std::optional<Json> facts_cache_key() {
  std::string build_id = own_build_id();
  auto boot_id = read_file("/proc/sys/kernel/random/boot_id");
  if (build_id.empty() || !boot_id || boot_id->empty()) return std::nullopt;
  struct utsname u {};
  if (::uname(&u) < 0) return std::nullopt;
  std::vector<gid_t> groups(static_cast<size_t>(std::max(::getgroups(0, nullptr), 0)));
  if (int n = ::getgroups(static_cast<int>(groups.size()), groups.data()); n >= 0) groups.resize(static_cast<size_t>(n));
  Json delegated = Json::object();
  for (std::string_view c : linux::kProbedControllers)
    delegated[std::string(c)] = stat_or_null(linux::delegated_cgroup_dir(c, ::geteuid()));
  return Json{
      {"boot_id", *boot_id},
      {"kernel_release", u.release},
      {"kernel_version", u.version},
      {"airlock_build_id", build_id},
      {"uid", ::getuid()},
      {"euid", ::geteuid()},
      {"gid", ::getgid()},
      {"egid", ::getegid()},
      {"groups", groups},
      {"proc_self_cgroup", file_or_null("/proc/self/cgroup")},
      {"cgroup_mounts", cgroup_mounts()},
      {"status_limits", status_limits()},
      {"lsm_label", file_or_null("/proc/self/attr/current")},
      {"namespaces", Json::array({link_or_null("/proc/self/ns/user"), link_or_null("/proc/self/ns/mnt"),
                                  link_or_null("/proc/self/ns/cgroup")})},
      {"max_user_namespaces", file_or_null("/proc/sys/user/max_user_namespaces")},
      {"unprivileged_userns_clone", file_or_null("/proc/sys/kernel/unprivileged_userns_clone")},
      {"apparmor_restrict_unprivileged_userns", file_or_null("/proc/sys/kernel/apparmor_restrict_unprivileged_userns")},
      {"delegated_cgroups", std::move(delegated)},
      {"dev_kvm", stat_or_null("/dev/kvm")},
  };
}

std::optional<CachedFacts> load_cached_facts(const std::string& state_dir, const Json& key) {
  const std::string path = state_dir + "/" + std::string(kFactsCacheFile);
  // Non-blocking: a FIFO planted under the name must not hang the run (it is refused as not regular).
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY));
  struct stat st {};
  if (!fd || ::fstat(fd.get(), &st) < 0 || !S_ISREG(st.st_mode) || st.st_uid != ::geteuid() || (st.st_mode & 022))
    return std::nullopt;
  std::string text(static_cast<size_t>(std::min<off_t>(st.st_size, kMaxJsonBytes)), '\0');
  ssize_t got = ::pread(fd.get(), text.data(), text.size(), 0);
  if (got != static_cast<ssize_t>(text.size()) || st.st_size > static_cast<off_t>(kMaxJsonBytes)) return std::nullopt;
  auto doc = parse_json(text, Code::IoError, path);
  if (!doc || !doc->is_object() || !doc->contains("schema") || (*doc)["schema"] != kSchema || !doc->contains("key") ||
      (*doc)["key"] != key || !doc->contains("measured") || !doc->contains("facts"))
    return std::nullopt;
  auto measured = needs_from_json((*doc)["measured"]);
  auto facts = plan::host_facts_from_json((*doc)["facts"]);
  const Json at = doc->value("measured_at", Json());
  if (!measured || !facts || !at.is_number_integer() || at.get<int64_t>() <= 0) return std::nullopt;
  return CachedFacts{*measured, std::move(*facts), at.get<int64_t>()};
}

void store_cached_facts(const std::string& state_dir, const Json& key, const CachedFacts& entry) {
  // A measurement that failed for a passing cause, or left something behind, is this moment's only.
  if (entry.facts.reasons.contains(std::string(linux::kProbeInconclusive)) || entry.facts.reasons.contains("probe_cleanup"))
    return;
  Json doc{{"schema", kSchema},
           {"key", key},
           {"measured", needs_json(entry.measured)},
           {"measured_at", static_cast<int64_t>(::time(nullptr))},
           {"facts", plan::to_json(entry.facts)}};
  (void)write_file_atomic(state_dir + "/" + std::string(kFactsCacheFile), doc.dump(), 0600);
}

bool covers(const plan::FactNeeds& have, const plan::FactNeeds& want) {
  return (have.user_namespaces || !want.user_namespaces) && (have.overlayfs || !want.overlayfs) &&
         (have.cgroups || !want.cgroups) && (have.kvm || !want.kvm);
}

}  // namespace airlock::exec
