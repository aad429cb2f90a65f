// Custody checks of the files airlock trusts, with the commands that fix what they find.
#include "base/custody.h"

#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>

#include "base/unique_fd.h"

namespace airlock {
namespace {

std::string quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string user_name(uid_t uid) {
  if (const passwd* pw = ::getpwuid(uid)) return pw->pw_name;
  return std::to_string(uid);
}

std::string mode_text(mode_t m) { return fmt::format("{:04o}", m & 07777); }

std::unexpected<Error> unsafe(std::string what, const std::string& path, const struct stat& st,
                              std::vector<std::string> fix) {
  return fail(Code::CustodyUnsafe,
              fmt::format("{}; fix it with: {}", what, fmt::join(fix, " && ")),
              {{"path", path},
               {"owner", user_name(st.st_uid)},
               {"owner_uid", st.st_uid},
               {"mode", mode_text(st.st_mode)},
               {"fix", fix}});
}

// What an executable's custody check does not look at, said with every refusal of one (the
// runner design states these limits): passing it is no claim about them.
constexpr const char* kNotChecked[] = {"the identity of the binary's publisher",
                                       "the directories above the binary's parent", "ACLs",
                                       "extended attributes"};

std::unexpected<Error> unsafe_executable(std::string what, const std::string& path, const struct stat& st,
                                         std::vector<std::string> fix) {
  auto e = unsafe(fmt::format("{} (this check does not cover {})", what, fmt::join(kNotChecked, ", ")), path, st,
                  std::move(fix));
  e.error().facts["not_checked"] = kNotChecked;
  return e;
}

std::string parent_of(const std::string& p) {
  auto slash = p.rfind('/');
  return slash == 0 ? "/" : p.substr(0, slash);
}

bool custodian(uid_t owner, uid_t uid) { return owner == 0 || owner == uid; }

}  // namespace

Result<void> check_executable_custody(const std::string& path, uid_t uid) {
  char buf[PATH_MAX];
  if (!::realpath(path.c_str(), buf)) return fail_errno(Code::CustodyUnsafe, "resolve the executable " + path, errno);
  std::string exe = buf, dir = parent_of(exe);
  struct stat st{}, dst{};
  if (::stat(exe.c_str(), &st) != 0) return fail_errno(Code::CustodyUnsafe, "stat " + exe, errno);
  if (::stat(dir.c_str(), &dst) != 0) return fail_errno(Code::CustodyUnsafe, "stat " + dir, errno);
  std::string safe_home = uid == 0 ? "/usr/local/bin" : "\"$HOME/.local/bin\"";
  auto move_away = std::vector<std::string>{fmt::format("install -d -m 0755 {}", safe_home),
                                            fmt::format("install -m 0755 {} {}/airlock", quote(exe), safe_home)};
  if (!custodian(st.st_uid, uid))
    return unsafe_executable(fmt::format("the airlock executable {} is owned by {}, neither root nor the running user {}", exe,
                              user_name(st.st_uid), user_name(uid)),
                  exe, st, {fmt::format("chown {} {}", uid == 0 ? "root" : user_name(uid), quote(exe))});
  if (st.st_mode & (S_IWGRP | S_IWOTH))
    return unsafe_executable(fmt::format("the airlock executable {} is writable by {} (mode {})", exe,
                              (st.st_mode & S_IWOTH) ? "everyone" : "its group", mode_text(st.st_mode)),
                  exe, st, {fmt::format("chmod go-w {}", quote(exe))});
  if (st.st_uid != uid && uid != 0 && !(st.st_mode & S_IXOTH))
    return unsafe_executable(fmt::format("the airlock executable {} is run by {} through its group's execute bit; a "
                              "non-owner may run it only through the others' execute bit",
                              exe, user_name(uid)),
                  exe, st, {fmt::format("chmod o+x,g-w {}", quote(exe))});
  if (!custodian(dst.st_uid, uid))
    return unsafe_executable(fmt::format("the directory {} holding the airlock executable is owned by {}, who could replace it",
                              dir, user_name(dst.st_uid)),
                  dir, dst, move_away);
  if (dst.st_mode & (S_IWGRP | S_IWOTH))
    return unsafe_executable(fmt::format("the directory {} holding the airlock executable is writable by {} (mode {}){}", dir,
                              (dst.st_mode & S_IWOTH) ? "everyone" : "its group", mode_text(dst.st_mode),
                              (dst.st_mode & S_ISVTX) ? "; the sticky bit still lets anyone add a file beside it" : ""),
                  dir, dst,
                  (dst.st_mode & S_ISVTX) || !custodian(dst.st_uid, uid) ? move_away
                                                                          : std::vector<std::string>{fmt::format(
                                                                                "chmod go-w {}", quote(dir))});
  return {};
}

Result<void> check_directory_custody(const std::string& path, uid_t uid) {
  struct stat st{};
  if (::lstat(path.c_str(), &st) != 0) return fail_errno(Code::CustodyUnsafe, "lstat " + path, errno);
  if (S_ISLNK(st.st_mode)) {
    char buf[PATH_MAX];
    std::string target = ::realpath(path.c_str(), buf) ? buf : "?";
    return unsafe(fmt::format("the state directory {} is a symlink (to {}); airlock does not follow one there", path,
                              target),
                  path, st, {fmt::format("export AIRLOCK_STATE_DIR={}", quote(target))});
  }
  if (!S_ISDIR(st.st_mode))
    return unsafe(fmt::format("the state directory {} is not a directory", path), path, st,
                  {fmt::format("mv {0} {0}.not-a-directory", quote(path))});
  if (!custodian(st.st_uid, uid))
    return unsafe(fmt::format("the state directory {} is owned by {}, neither root nor the running user {}", path,
                              user_name(st.st_uid), user_name(uid)),
                  path, st, {fmt::format("chown {} {}", user_name(uid), quote(path))});
  if (st.st_mode & (S_IWGRP | S_IWOTH))
    return unsafe(fmt::format("the state directory {} is writable by {} (mode {})", path,
                              (st.st_mode & S_IWOTH) ? "everyone" : "its group", mode_text(st.st_mode)),
                  path, st, {fmt::format("chmod 0700 {}", quote(path))});
  return {};
}

Result<std::string> read_key_file(const std::string& path, uid_t uid, size_t length) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK));
  struct stat st{};
  if (!fd) {
    if (errno == ELOOP && ::lstat(path.c_str(), &st) == 0)
      return unsafe(fmt::format("the key file {} is a symlink; key files are opened without following one", path),
                    path, st, {fmt::format("cp --remove-destination \"$(readlink -f {0})\" {0}", quote(path)),
                               fmt::format("chmod 0600 {}", quote(path))});
    return fail_errno(Code::CustodyUnsafe, "open the key file " + path, errno);
  }
  if (::fstat(fd.get(), &st) != 0) return fail_errno(Code::CustodyUnsafe, "fstat " + path, errno);
  if (!S_ISREG(st.st_mode))
    return unsafe(fmt::format("the key file {} is not a regular file", path), path, st, {"rm " + quote(path)});
  if (st.st_uid != uid)
    return unsafe(fmt::format("the key file {} is owned by {}, not the running user {}", path, user_name(st.st_uid),
                              user_name(uid)),
                  path, st, {fmt::format("chown {} {}", user_name(uid), quote(path))});
  if (st.st_mode & 077)
    return unsafe(fmt::format("the key file {} is open to {} (mode {}); a key is for its owner only", path,
                              (st.st_mode & 007) ? "everyone" : "its group", mode_text(st.st_mode)),
                  path, st, {fmt::format("chmod 0600 {}", quote(path))});
  std::string key(length + 2, '\0');
  size_t got = 0;
  while (got < key.size()) {
    ssize_t n = ::read(fd.get(), key.data() + got, key.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fail_errno(Code::CustodyUnsafe, "read the key file " + path, errno);
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  key.resize(got);
  if (key.size() == length + 1 && key.back() == '\n') key.pop_back();
  if (key.size() != length) {
    ::explicit_bzero(key.data(), key.size());
    return unsafe(fmt::format("the key file {} holds {}{} bytes, not the {} a key has", path,
                              got > length + 1 ? "more than " : "", got > length + 1 ? length + 1 : got, length),
                  path, st, {fmt::format("rm {} # and make it again", quote(path))});
  }
  return key;
}

}  // namespace airlock
