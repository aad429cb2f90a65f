// HostFacts: its JSON form (strict both ways) and the two synthetic hosts used by tests and `plan`.
#include "plan/host_facts.h"

#include <algorithm>
#include <string_view>

namespace airlock::plan {

bool HostFacts::has_cgroup_controller(std::string_view name) const {
  auto has = [&](const std::vector<std::string>& v) {
    return std::find(v.begin(), v.end(), name) != v.end();
  };
  return has(cgroup_v2_controllers) || has(cgroup_v1_writable);
}

Json to_json(const HostFacts& f) {
  Json reasons = Json::object();
  for (const auto& [k, v] : f.reasons) reasons[k] = v;
  Json j{
      {"kernel_release", f.kernel_release},
      {"running_as_root", f.running_as_root},
      {"landlock_abi", f.landlock_abi},
      {"seccomp_filter", f.seccomp_filter},
      {"no_new_privs", f.no_new_privs},
      {"user_namespaces", f.user_namespaces},
      {"overlayfs_in_userns", f.overlayfs_in_userns},
      {"cgroup_v2_controllers", f.cgroup_v2_controllers},
      {"cgroup_v1_writable", f.cgroup_v1_writable},
      {"kvm_usable", f.kvm_usable},
      {"microvm",
       {{"kernel", f.microvm.kernel},
        {"kernel_sha256", f.microvm.kernel_sha256},
        {"initramfs", f.microvm.initramfs},
        {"initramfs_sha256", f.microvm.initramfs_sha256},
        {"acceleration", f.microvm.acceleration},
        {"verified", f.microvm.verified},
        {"tsc_khz", f.microvm.tsc_khz}}},
      {"reasons", std::move(reasons)},
  };
  if (!f.credential_files.empty()) j["credential_files"] = f.credential_files;
  // Only when set, so the facts of a host that needs neither read as they always did.
  if (!f.cgroup_v1_base.empty()) j["cgroup_v1_base"] = f.cgroup_v1_base;
  if (!f.cgroup_fix.empty()) j["cgroup_fix"] = f.cgroup_fix;
  if (f.container != ContainerFacts{}) {
    Json images = Json::array();
    for (const auto& i : f.container.images)
      images.push_back({{"reference", i.reference},
                        {"image_id", i.image_id},
                        {"ok", i.ok},
                        {"reason", i.reason},
                        {"checked_at", i.checked_at}});
    j["container"] = {{"engine", f.container.engine},
                      {"version", f.container.version},
                      {"runtime", f.container.runtime},
                      {"rootless", f.container.rootless},
                      {"images", std::move(images)}};
  }
  return j;
}

namespace {

// Every refusal names the offending JSON path in facts.path, like the policy parser does.
std::unexpected<Error> refuse(const std::string& path, std::string what) {
  return fail(Code::OptionInvalid, fmt::format("host facts: {} {}", path, what), {{"path", path}});
}

Result<bool> get_bool(const Json& v, const std::string& path) {
  if (!v.is_boolean()) return refuse(path, "must be a boolean");
  return v.get<bool>();
}

Result<std::string> get_string(const Json& v, const std::string& path) {
  if (!v.is_string()) return refuse(path, "must be a string");
  return v.get<std::string>();
}

Result<std::vector<std::string>> get_string_list(const Json& v, const std::string& path) {
  if (!v.is_array()) return refuse(path, "must be an array of strings");
  std::vector<std::string> out;
  for (size_t i = 0; i < v.size(); ++i) out.push_back(TRY(get_string(v[i], path_join(path, i))));
  return out;
}

}  // namespace

// A missing key keeps its default, which is always the "absent" value (false, 0, empty), so an
// omission can only make the host look less capable: fail closed. A misspelt key cannot hide
// behind this, because every unknown key is refused.
Result<HostFacts> host_facts_from_json(const Json& j) {
  if (!j.is_object()) return refuse("$", "must be an object");
  HostFacts f;
  for (const auto& [key, v] : j.items()) {
    const std::string path = path_join("$", key);
    if (key == "kernel_release") {
      f.kernel_release = TRY(get_string(v, path));
    } else if (key == "running_as_root") {
      f.running_as_root = TRY(get_bool(v, path));
    } else if (key == "landlock_abi") {
      // is_number_integer() also admits unsigned; a float such as 3.0 is refused.
      if (!v.is_number_integer()) return refuse(path, "must be an integer");
      if (v.is_number_unsigned() ? v.get<uint64_t>() > 1000
                                 : (v.get<int64_t>() < 0 || v.get<int64_t>() > 1000))
        return refuse(path, "must be between 0 and 1000");
      f.landlock_abi = v.get<int>();
    } else if (key == "seccomp_filter") {
      f.seccomp_filter = TRY(get_bool(v, path));
    } else if (key == "no_new_privs") {
      f.no_new_privs = TRY(get_bool(v, path));
    } else if (key == "user_namespaces") {
      f.user_namespaces = TRY(get_bool(v, path));
    } else if (key == "overlayfs_in_userns") {
      f.overlayfs_in_userns = TRY(get_bool(v, path));
    } else if (key == "cgroup_v2_controllers") {
      f.cgroup_v2_controllers = TRY(get_string_list(v, path));
    } else if (key == "cgroup_v1_writable") {
      f.cgroup_v1_writable = TRY(get_string_list(v, path));
    } else if (key == "cgroup_v1_base") {
      f.cgroup_v1_base = TRY(get_string(v, path));
    } else if (key == "cgroup_fix") {
      f.cgroup_fix = TRY(get_string(v, path));
    } else if (key == "kvm_usable") {
      f.kvm_usable = TRY(get_bool(v, path));
    } else if (key == "microvm") {
      if (!v.is_object()) return refuse(path, "must be an object");
      for (const auto& [mk, mv] : v.items()) {
        const std::string mpath = path_join(path, mk);
        if (mk == "kernel") f.microvm.kernel = TRY(get_string(mv, mpath));
        else if (mk == "kernel_sha256") f.microvm.kernel_sha256 = TRY(get_string(mv, mpath));
        else if (mk == "initramfs") f.microvm.initramfs = TRY(get_string(mv, mpath));
        else if (mk == "initramfs_sha256") f.microvm.initramfs_sha256 = TRY(get_string(mv, mpath));
        else if (mk == "acceleration") {
          f.microvm.acceleration = TRY(get_string(mv, mpath));
          if (f.microvm.acceleration != "" && f.microvm.acceleration != "kvm" && f.microvm.acceleration != "tcg")
            return refuse(mpath, "must be \"kvm\", \"tcg\" or \"\"");
        } else if (mk == "verified") f.microvm.verified = TRY(get_bool(mv, mpath));
        else if (mk == "tsc_khz") {
          if (!mv.is_number_unsigned()) return refuse(mpath, "must be a non-negative integer");
          f.microvm.tsc_khz = mv.get<uint64_t>();
        } else return refuse(mpath, "is not a known host fact");
      }
    } else if (key == "container") {
      if (!v.is_object()) return refuse(path, "must be an object");
      for (const auto& [ck, cv] : v.items()) {
        const std::string cpath = path_join(path, ck);
        if (ck == "engine") f.container.engine = TRY(get_string(cv, cpath));
        else if (ck == "version") f.container.version = TRY(get_string(cv, cpath));
        else if (ck == "runtime") f.container.runtime = TRY(get_string(cv, cpath));
        else if (ck == "rootless") f.container.rootless = TRY(get_bool(cv, cpath));
        else if (ck == "images") {
          if (!cv.is_array()) return refuse(cpath, "must be an array");
          for (size_t i = 0; i < cv.size(); ++i) {
            const std::string ipath = path_join(cpath, i);
            if (!cv[i].is_object()) return refuse(ipath, "must be an object");
            ContainerImageFact img;
            for (const auto& [ik, iv] : cv[i].items()) {
              const std::string kpath = path_join(ipath, ik);
              if (ik == "reference") img.reference = TRY(get_string(iv, kpath));
              else if (ik == "image_id") img.image_id = TRY(get_string(iv, kpath));
              else if (ik == "ok") img.ok = TRY(get_bool(iv, kpath));
              else if (ik == "reason") img.reason = TRY(get_string(iv, kpath));
              else if (ik == "checked_at") {
                if (!iv.is_number_integer()) return refuse(kpath, "must be an integer");
                img.checked_at = iv.get<int64_t>();
              } else return refuse(kpath, "is not a known host fact");
            }
            f.container.images.push_back(std::move(img));
          }
        } else return refuse(cpath, "is not a known host fact");
      }
    } else if (key == "credential_files") {
      f.credential_files = TRY(get_string_list(v, path));
    } else if (key == "reasons") {
      if (!v.is_object()) return refuse(path, "must be an object of strings");
      for (const auto& [rk, rv] : v.items()) f.reasons[rk] = TRY(get_string(rv, path_join(path, rk)));
    } else {
      return refuse(path, "is not a known host fact");
    }
  }
  return f;
}

HostFacts facts_nothing() {
  HostFacts f;
  f.kernel_release = "unknown";
  constexpr std::string_view kAbsent = "absent (synthetic host)";
  for (const char* fact :
       {"landlock_abi", "seccomp_filter", "no_new_privs", "user_namespaces", "overlayfs_in_userns",
        "cgroup_v2_controllers", "cgroup_v1_writable", "kvm_usable", "microvm", "container"})
    f.reasons[fact] = std::string(kAbsent);
  return f;
}

HostFacts facts_everything() {
  HostFacts f;
  f.kernel_release = "synthetic";
  f.running_as_root = false;
  f.landlock_abi = kLandlockAbiKnown;
  f.seccomp_filter = true;
  f.no_new_privs = true;
  f.user_namespaces = true;
  f.overlayfs_in_userns = true;
  f.cgroup_v2_controllers = {"cpu", "memory", "pids"};
  f.kvm_usable = true;
  f.microvm = {"/cache/vm/vmlinux", std::string(64, 'a'), "/cache/vm/initramfs.cpio", std::string(64, 'b'), "kvm", true,
               2000000};
  return f;
}

}  // namespace airlock::plan
