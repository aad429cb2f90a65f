// ApprovalStore: approval requests as files under STATE/approvals/, changed under one flock.
#include "broker/approvals.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <thread>

#include "base/clock.h"
#include "base/fs.h"
#include "base/hash.h"
#include "base/unique_fd.h"
#include "ledger/receipts.h"

namespace airlock::broker {
namespace {

// Held while one request is read, changed and written back. Waits at most five seconds: a
// stopped holder is a named failure, not a hang.
Result<UniqueFd> lock_store(const std::string& dir) {
  TRY(make_dirs(dir, 0700));
  std::string path = dir + "/.lock";
  UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!fd) return fail_errno(Code::LedgerWriteFailed, "open " + path, errno);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK) return fail_errno(Code::LedgerWriteFailed, "flock " + path, errno);
    if (std::chrono::steady_clock::now() > deadline)
      return fail(Code::LedgerWriteFailed, fmt::format("the approvals store {} stayed locked for 5 s", dir),
                  {{"lock", path}});
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return fd;
}

std::string file_of(const std::string& dir, const std::string& id) { return dir + "/" + id + ".json"; }

Result<Approval> load(const std::string& dir, const std::string& id) {
  std::string path = file_of(dir, id);
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode))
    return fail(Code::NotFound, fmt::format("no approval request {}", id), {{"approval_id", id}});
  auto text = TRY(read_file(path, Code::LedgerCorrupt));
  auto j = TRY(parse_json(text, Code::LedgerCorrupt, path));
  auto a = Approval::from_json(j);
  if (!a || a->id != id)
    return fail(Code::LedgerCorrupt, fmt::format("{} is not an approval request airlock wrote", path),
                {{"path", path}});
  return a;
}

Result<void> save(const std::string& dir, const Approval& a) {
  return write_file_atomic(file_of(dir, a.id), a.to_json().dump() + "\n", 0600);
}

Result<std::vector<Approval>> load_all(const std::string& dir) {
  std::vector<Approval> out;
  DIR* d = ::opendir(dir.c_str());
  if (!d) {
    if (errno == ENOENT) return out;
    return fail_errno(Code::IoError, "opendir " + dir, errno);
  }
  std::vector<std::string> ids;
  while (dirent* e = ::readdir(d)) {
    std::string name = e->d_name;
    if (name.size() > 5 && name.ends_with(".json") && valid_approval_id(name.substr(0, name.size() - 5)))
      ids.push_back(name.substr(0, name.size() - 5));
  }
  ::closedir(d);
  for (const auto& id : ids) out.push_back(TRY(load(dir, id)));
  std::sort(out.begin(), out.end(), [](const Approval& a, const Approval& b) {
    return a.requested_at != b.requested_at ? a.requested_at > b.requested_at : a.id > b.id;
  });
  return out;
}

// Pending or approved past its time: expired (returns whether it changed).
// A request's or an approval's own receipt: what happened to it, chained like any receipt (a log
// of one, STATE/approvals/receipts/ID-STATUS.jsonl; each status is reached once).
Result<void> record(const std::string& dir, const Approval& a, std::string_view kind) {
  std::string receipts = dir + "/receipts";
  TRY(make_dirs(receipts, 0700));
  auto log = TRY(ledger::ReceiptLog::create(receipts + "/" + a.id + "-" + a.status + ".jsonl", a.session));
  TRY(log.append(kind, {{"approval", a.to_json(false)}}));
  return {};
}

// Pending or approved past its time: expired, saved and recorded (returns whether it changed).
Result<bool> expire(const std::string& dir, Approval& a, int64_t now) {
  if ((a.status != "pending" && a.status != "approved") || now < a.expires_at) return false;
  a.status = "expired";
  TRY(save(dir, a));
  TRY(record(dir, a, "approval.expired"));
  return true;
}

}  // namespace

bool valid_approval_id(std::string_view id) {
  return id.size() == 32 && id.find_first_not_of("0123456789abcdef") == std::string_view::npos;
}

Json Approval::to_json(bool with_args) const {
  Json j = {{"id", id},
          {"run_id", binding.run_id},
          {"tool", binding.tool},
          {"tool_sha256", binding.tool_sha256},
          {"tool_definition", tool_definition},
          {"args_sha256", binding.args_sha256},
          {"args", args},
          {"session", session},
          {"status", status},
          {"requested_at", requested_at},
          {"expires_at", expires_at},
          {"attempts", attempts},
          {"used", used},
          {"answered", answered}};
  if (!with_args) j.erase("args");
  return j;
}

Result<Approval> Approval::from_json(const Json& j) {
  Approval a;
  try {
    a.id = j.at("id").get<std::string>();
    a.binding = {j.at("run_id").get<std::string>(), j.at("tool").get<std::string>(),
                 j.at("args_sha256").get<std::string>(), j.at("tool_sha256").get<std::string>()};
    a.args = j.at("args");
    a.tool_definition = j.at("tool_definition");
    a.session = j.at("session").get<std::string>();
    a.status = j.at("status").get<std::string>();
    a.requested_at = j.at("requested_at").get<int64_t>();
    a.expires_at = j.at("expires_at").get<int64_t>();
    a.attempts = j.at("attempts").get<uint32_t>();
    a.used = j.at("used").get<uint32_t>();
    a.answered = j.at("answered");
  } catch (const Json::exception& e) {
    return fail(Code::LedgerCorrupt, fmt::format("an approval request is malformed: {}", e.what()));
  }
  static const char* kStatuses[] = {"pending", "approved", "used", "denied", "expired"};
  if (!valid_approval_id(a.id) ||
      std::find(std::begin(kStatuses), std::end(kStatuses), a.status) == std::end(kStatuses))
    return fail(Code::LedgerCorrupt, "an approval request has an unknown id or status");
  return a;
}

ApprovalStore::ApprovalStore(std::string state_dir) : dir_(std::move(state_dir) + "/approvals") {}

Result<ApprovalStore::Check> ApprovalStore::take_or_request(const ApprovalBinding& b,
                                                            const std::string& session, const Json& args,
                                                            const Json& tool_definition) {
  auto lock = TRY(lock_store(dir_));
  int64_t now = now_ms();
  Check c;
  auto all = TRY(load_all(dir_));
  // Oldest first: the approval given first is used first.
  std::reverse(all.begin(), all.end());
  for (auto& a : all) {
    if (!(a.binding == b)) continue;
    if (TRY(expire(dir_, a, now))) {
      c.expired.push_back(a);
      continue;
    }
    if (a.status == "approved" && a.used < a.attempts && !c.approved) {
      a.used += 1;
      if (a.used >= a.attempts) a.status = "used";
      TRY(save(dir_, a));
      c.approved = a;
    } else if (a.status == "pending" && !c.request) {
      c.request = a;
    } else if (a.status == "denied" && now < a.expires_at) {
      c.denied = a;
    }
  }
  if (c.approved) {
    c.request.reset();
    c.denied.reset();
    return c;
  }
  if (c.denied) {  // a person said no to this call: no new request until that answer expires
    c.request.reset();
    return c;
  }
  if (!c.request) {
    Approval a;
    a.id = random_id();
    a.binding = b;
    a.session = session;
    a.args = args;
    a.tool_definition = tool_definition;
    a.requested_at = now;
    a.expires_at = now + kApprovalTtlMs;
    TRY(save(dir_, a));
    c.request = a;
    c.created = true;
  }
  return c;
}

Result<Approval> ApprovalStore::decide(const std::string& id, bool approve, uint32_t attempts, int64_t ttl_ms,
                                       const std::string& channel) {
  if (!valid_approval_id(id))
    return fail(Code::NotFound,
                fmt::format("\"{}\" is not an approval id (32 hexadecimal digits)", id.substr(0, 80)));
  if (approve && attempts == 0) return fail(Code::OptionInvalid, "an approval covers at least one attempt");
  if (approve && (ttl_ms < 1000 || ttl_ms > kMaxApprovalTtlMs))
    return fail(Code::OptionInvalid,
                fmt::format("an approval lasts from 1 s to {} days", kMaxApprovalTtlMs / 86400000));
  auto lock = TRY(lock_store(dir_));
  auto a = TRY(load(dir_, id));
  int64_t now = now_ms();
  TRY(expire(dir_, a, now));
  if (a.status != "pending")
    return fail(Code::OptionInvalid, fmt::format("the approval request {} is {}, not pending", id, a.status),
                {{"approval_id", id}, {"status", a.status}});
  a.status = approve ? "approved" : "denied";
  a.attempts = approve ? attempts : 0;
  if (approve) a.expires_at = now + ttl_ms;
  a.answered = {{"decision", a.status}, {"channel", channel}, {"at", now}};
  TRY(save(dir_, a));
  TRY(record(dir_, a, approve ? "approval.approved" : "approval.denied"));
  return a;
}

Result<std::vector<Approval>> ApprovalStore::list(bool pending_only) {
  auto lock = TRY(lock_store(dir_));
  auto all = TRY(load_all(dir_));
  int64_t now = now_ms();
  for (auto& a : all) TRY(expire(dir_, a, now));  // what ran out is recorded as it is seen
  if (!pending_only) return all;
  std::vector<Approval> out;
  for (auto& a : all)
    if (a.status == "pending") out.push_back(std::move(a));
  return out;
}

}  // namespace airlock::broker
