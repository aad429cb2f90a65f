// The sessions a server holds: here (broker::Session) or on another machine of the fleet.
#include "server/session_handle.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include "base/child_process.h"
#include "base/fs.h"
#include "base/hash.h"
#include "base/unique_fd.h"
#include "broker/protocol.h"
#include "ledger/receipts.h"

extern char** environ;

namespace airlock::server {
namespace {

class LocalSession final : public SessionHandle {
 public:
  explicit LocalSession(std::unique_ptr<broker::Session> s) : s_(std::move(s)) {}
  const std::string& id() const override { return s_->id(); }
  bool ended() const override { return s_->ended(); }
  bool killed() const override { return s_->killed(); }
  Result<void> kill(std::string_view why) override { return s_->kill(why); }
  Json status() const override { return s_->status(); }
  Result<void> enforce_budget() override { return s_->enforce_budget(); }
  std::string receipts_path() const override { return s_->receipts_path(); }
  Json output_tails() const override { return s_->output_tails(); }
  Json handle(const Json& request) override { return broker::handle_request(*s_, request); }
  Result<void> note_refusal(std::string_view kind, const Json& args, const Error& e) override {
    return s_->note_refusal(kind, args, e);
  }

 private:
  std::unique_ptr<broker::Session> s_;
};

// How long a far session may take to open (the gate, two ssh connections, the far open), and to
// hand its receipts back once its input is closed.
constexpr auto kOpenWithin = std::chrono::seconds(300);
constexpr auto kEndWithin = std::chrono::seconds(120);
constexpr size_t kLineMost = 64u << 20;  // a read_file answer carries up to its bound, base64'd
constexpr size_t kErrTail = 4096;
constexpr auto kWriteWithin = std::chrono::seconds(30);  // a far side that stops reading is ended

// "ok": true, and nothing else taken for it (a far side's line is anyone's there).
bool is_ok(const Json& j) {
  auto it = j.find("ok");
  return it != j.end() && it->is_boolean() && it->get<bool>();
}
bool plain_id(std::string_view s) {
  return !s.empty() && s.size() <= 128 && std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_';
  });
}

class FarSession final : public SessionHandle {
 public:
  ~FarSession() override {
    if (!reader_.joinable()) return;  // never started: child_ kills and reaps what there is
    close_input();
    {
      std::unique_lock lk(mu_);
      if (!cv_.wait_for(lk, kEndWithin, [&] { return exited_; })) {
        lk.unlock();
        signal_child(SIGTERM);  // the dispatcher stops the far session and collects what it can
        lk.lock();
        if (!cv_.wait_for(lk, std::chrono::seconds(60), [&] { return exited_; })) {
          lk.unlock();
          // The whole group: ssh too, whose ends of the pipes would keep the reader waiting.
          if (pgid_ > 0) ::kill(-pgid_, SIGKILL);
        }
      }
    }
    reader_.join();
  }

  Result<Json> start(const FarSessionSpec& spec, const std::string& policy_file) {
    machine_ = spec.machine;
    int in[2], out[2], err[2];
    if (::pipe2(in, O_CLOEXEC) < 0) return fail_errno(Code::IoError, "pipe2", errno);
    UniqueFd in_rd(in[0]);
    in_.reset(in[1]);
    if (::pipe2(out, O_CLOEXEC) < 0) return fail_errno(Code::IoError, "pipe2", errno);
    out_.reset(out[0]);
    UniqueFd out_wr(out[1]);
    if (::pipe2(err, O_CLOEXEC) < 0) return fail_errno(Code::IoError, "pipe2", errno);
    err_.reset(err[0]);
    UniqueFd err_wr(err[1]);
    std::vector<std::string> args = spec.command;
    for (const char* a : {"session", "--machine"}) args.emplace_back(a);
    args.push_back(spec.machine);
    args.insert(args.end(), {"--policy", policy_file, "--workspace", spec.workspace});
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in_rd.get(), 0);
    posix_spawn_file_actions_adddup2(&fa, out_wr.get(), 1);
    posix_spawn_file_actions_adddup2(&fa, err_wr.get(), 2);
    // Its own signal mask and dispositions: the server's blocked stop signals are not its.
    posix_spawnattr_t at;
    posix_spawnattr_init(&at);
    sigset_t none, dflt;
    sigemptyset(&none);
    sigemptyset(&dflt);
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGPIPE}) sigaddset(&dflt, sig);
    posix_spawnattr_setsigmask(&at, &none);
    posix_spawnattr_setsigdefault(&at, &dflt);
    posix_spawnattr_setpgroup(&at, 0);  // its own group, ssh with it: killed together if need be
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP);
    pid_t pid = -1;
    int rc = ::posix_spawn(&pid, argv[0], &fa, &at, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
    // Only the child holds these ends: its exit is the reader's end of input.
    in_rd.reset();
    out_wr.reset();
    err_wr.reset();
    if (rc != 0) return fail_errno(Code::ConfigError, "cannot start " + args[0], rc);
    auto pidfd = open_pidfd(pid);
    if (!pidfd) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
      return std::unexpected(pidfd.error());
    }
    child_ = ChildProcess(pid, std::move(*pidfd));
    pgid_ = pid;
    // Writes never block a caller for long (kWriteWithin): kill and close must not wait behind one.
    (void)::fcntl(in_.get(), F_SETFL, ::fcntl(in_.get(), F_GETFL) | O_NONBLOCK);
    opened_at_ = std::chrono::steady_clock::now();
    reader_ = std::thread([this] { read_loop(); });

    // First the dispatch (this side's run and chain), then the far session's open; a refusal on
    // either side is a line with "ok": false.
    std::unique_lock lk(mu_);
    Json dispatch, open;
    auto have = [&] {
      for (const auto& e : events_) {
        if (!is_ok(e)) return true;
        Json event = e.value("event", Json());
        if (event == "dispatch.open") dispatch = e.value("result", Json());
        if (event == "session.open") open = e.value("result", Json());
      }
      return eof_ || (dispatch.is_object() && open.is_object());
    };
    bool in_time = cv_.wait_for(lk, kOpenWithin, have);
    opened_ = true;  // from here on, id-null lines are the dispatch's end
    for (const auto& e : events_)
      if (!is_ok(e)) {
        auto err = Error::from_json(e.value("error", Json()));
        return std::unexpected(err ? *err
                                   : Error{Code::ProtocolError, fmt::format("machine {}: a refusal airlock cannot read", machine_),
                                           {{"machine", machine_}}});
      }
    if (!in_time || !dispatch.is_object() || !open.is_object() || !dispatch.value("run", Json()).is_string() ||
        !dispatch.value("receipts", Json()).is_string())
      return fail(Code::ServerUnreachable,
                  fmt::format("machine {}: the session there did not open{}: {}", machine_, in_time ? "" : " in time",
                              err_tail_.empty() ? "nothing said" : err_tail_),
                  {{"machine", machine_}});
    id_ = dispatch["run"].get<std::string>();
    receipts_ = dispatch["receipts"].get<std::string>();
    // The dispatch is this side's: its run is a plain id and its chain is where this state keeps it.
    if (!plain_id(id_) || receipts_ != spec.state_dir + "/receipts/" + id_ + ".jsonl")
      return fail(Code::ProtocolError, fmt::format("machine {}: the dispatch named a run or chain that is not this side's", machine_),
                  {{"machine", machine_}});
    executor_ = open.value("executor", Json(""));
    tier_ = open.value("tier", Json());
    // A far side's word: taken only as the string it must be (anything else would throw here).
    if (Json fs = open.value("session", Json()); fs.is_string()) far_session_ = fs.get<std::string>();
    return Json{{"session", id_},
                {"machine", machine_},
                {"far_session", far_session_},
                {"executor", executor_},
                {"tier", tier_},
                {"enforced", open.value("enforced", Json())},
                {"receipts", receipts_}};
  }

  void describe(std::string task_id, std::string policy_digest) {
    task_id_ = std::move(task_id);
    policy_digest_ = std::move(policy_digest);
  }

  const std::string& id() const override { return id_; }
  bool ended() const override {
    std::lock_guard lk(mu_);
    return exited_;
  }
  bool killed() const override { return killed_; }

  Result<void> kill(std::string_view why) override {
    if (!killed_.exchange(true)) {
      {
        std::lock_guard lk(mu_);
        if (ended_how_.empty()) {
          ended_how_ = "killed";
          ended_reason_ = std::string(why);
        }
      }
      // The dispatcher takes SIGTERM as a stop: the far session is killed there (nothing more is
      // written back) and its receipts still come back. Nothing here waits for the far side.
      signal_child(SIGTERM);
    }
    return {};
  }

  Json status() const override {
    std::lock_guard lk(mu_);
    auto since = [](std::chrono::steady_clock::time_point t) {
      return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t).count();
    };
    Json running = nullptr, ended = nullptr;
    if (!running_kind_.empty()) running = {{"kind", running_kind_}, {"for_ms", since(running_since_)}, {"usage", nullptr}};
    if (exited_ || killed_) ended = {{"how", ended_how_.empty() ? "ended" : ended_how_}, {"reason", ended_reason_}};
    return {{"session", id_},
            {"machine", machine_},
            {"far_session", far_session_},
            {"task_id", task_id_},
            {"policy_digest", policy_digest_},
            {"executor", executor_},
            {"tier", tier_},
            {"age_seconds", since(opened_at_) / 1000},
            {"actions", actions_},
            {"refused", refused_},
            {"receipts", nullptr},
            {"killed", killed_.load()},
            {"running", std::move(running)},
            {"ended", exited_ ? std::move(ended) : Json(nullptr)},
            {"tool_runs", nullptr},
            // How the dispatch ended here: its far receipts verified and bound (dispatch.close), or
            // the refusal it ended with.
            {"dispatch", dispatch_end_}};
  }

  Result<void> enforce_budget() override { return {}; }  // the far session enforces its own
  std::string receipts_path() const override { return receipts_; }
  Json output_tails() const override { return Json::object(); }
  // The far session never saw it: it is answered here, and only the dispatch's chain is ours.
  Result<void> note_refusal(std::string_view, const Json&, const Error&) override { return {}; }

  Json handle(const Json& request) override {
    Json agent_id = request.value("id", Json());
    std::string action = broker::request_action(request);
    auto answer_error = [&](Error e) {
      std::lock_guard lk(mu_);
      ++refused_;
      return Json{{"id", agent_id}, {"ok", false}, {"error", e.to_json()}};
    };
    if (action == "kill") {
      (void)kill("kill switch");
      return Json{{"id", agent_id}, {"ok", true}, {"result", {{"killed", true}}}};
    }
    if (action == "receipts") return Json{{"id", agent_id}, {"ok", true}, {"result", local_receipts()}};
    uint64_t n;
    {
      std::unique_lock lk(mu_);
      if (eof_ || (killed_ && action != "kill") || closed_) {
        Error gone{closed_ ? Code::SessionClosed : Code::SessionKilled,
                   fmt::format("the session on machine {} has ended", machine_), {{"machine", machine_}}};
        lk.unlock();
        return answer_error(std::move(gone));
      }
      n = next_id_++;
      waiting_.insert(n);
      ++actions_;
      running_kind_ = action;
      running_since_ = std::chrono::steady_clock::now();
    }
    Json req = request;
    req["id"] = n;
    if (!send(req)) {
      {
        std::lock_guard lk(mu_);
        running_kind_.clear();
        waiting_.erase(n);
      }
      (void)kill("it does not read its requests");
      return answer_error(Error{Code::SessionKilled,
                                fmt::format("the session on machine {} does not read its requests: it is stopped", machine_),
                                {{"machine", machine_}}});
    }
    std::unique_lock lk(mu_);
    cv_.wait(lk, [&] { return answers_.contains(n) || eof_; });
    running_kind_.clear();
    waiting_.erase(n);
    if (!answers_.contains(n)) {
      lk.unlock();
      return answer_error(Error{Code::SessionKilled,
                                fmt::format("the session on machine {} ended before it answered{}", machine_,
                                            err_tail_.empty() ? "" : ": " + last_line(err_tail_)),
                                {{"machine", machine_}}});
    }
    Json resp = std::move(answers_[n]);
    answers_.erase(n);
    bool ok = is_ok(resp);
    bool shaped = ok ? resp.contains("result")
                     : resp.value("ok", Json()) == Json(false) && Error::from_json(resp.value("error", Json())).has_value();
    lk.unlock();
    if (!shaped)
      return answer_error(Error{Code::ProtocolError,
                                fmt::format("the session on machine {} answered with a line airlock does not write", machine_),
                                {{"machine", machine_}}});
    resp["id"] = agent_id;
    lk.lock();
    if (!ok) ++refused_;
    lk.unlock();
    if (ok && action == "close") {
      {
        std::lock_guard g(mu_);
        closed_ = true;
        if (ended_how_.empty()) ended_how_ = "closed";
      }
      close_input();  // the far session ends; the dispatch brings its receipts back
    }
    return resp;
  }

 private:
  static std::string last_line(std::string s) {
    while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
    if (auto nl = s.rfind('\n'); nl != std::string::npos) s.erase(0, nl + 1);
    return s;
  }

  bool send(const Json& line) {
    std::string text = line.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n";
    std::lock_guard lk(write_mu_);
    if (!in_) return false;
    auto deadline = std::chrono::steady_clock::now() + kWriteWithin;
    for (size_t at = 0; at < text.size();) {
      ssize_t w = ::write(in_.get(), text.data() + at, text.size() - at);
      if (w < 0 && errno == EINTR) continue;
      if (w < 0 && errno == EAGAIN) {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
        if (left.count() <= 0) return false;
        pollfd p{in_.get(), POLLOUT, 0};
        (void)::poll(&p, 1, static_cast<int>(left.count()));
        continue;
      }
      if (w <= 0) return false;
      at += static_cast<size_t>(w);
    }
    return true;
  }

  // Through the pidfd: never a recycled pid; nothing once the reader has reaped it.
  void signal_child(int sig) {
    if (child_.pidfd() >= 0) (void)::syscall(SYS_pidfd_send_signal, child_.pidfd(), sig, nullptr, 0);
  }

  // This server's chain of the dispatch (dispatch.open; the far receipts join it once the session
  // has ended): read here, so it never waits behind a far action.
  Json local_receipts() const {
    Json out = Json::array();
    auto text = read_file(receipts_, Code::LedgerCorrupt);
    if (text)
      for (size_t at = 0; at < text->size();) {
        size_t nl = text->find('\n', at);
        if (nl == std::string::npos) break;
        auto r = parse_json(std::string_view(*text).substr(at, nl - at), Code::LedgerCorrupt, "a receipt",
                            ledger::kReceiptLineLimits);
        if (r) out.push_back(std::move(*r));
        at = nl + 1;
      }
    return {{"receipts", std::move(out)}, {"path", receipts_}, {"far_receipts", "added to this chain when the session ends"}};
  }

  void close_input() {
    std::lock_guard lk(write_mu_);
    in_.reset();
  }

  void take_line(std::string_view text) {
    auto j = parse_json(text, Code::ProtocolError, "a far session's line");
    std::lock_guard lk(mu_);
    if (!j || !j->is_object()) {
      err_tail_ += "an unreadable line from the dispatch\n";
      return;
    }
    const bool first = lines_++ == 0;
    Json id = j->value("id", Json());
    Json event = j->value("event", Json());
    if (id.is_number_unsigned()) {
      if (waiting_.contains(id.get<uint64_t>())) answers_[id.get<uint64_t>()] = std::move(*j);  // nobody else's
    } else if (id.is_null() && event == "dispatch.open" && !first) {
      err_tail_ += "a dispatch.open that was not the first line was dropped\n";
    } else if (id.is_null() && !opened_) {
      if (events_.size() < 64) events_.push_back(std::move(*j));
    } else if (id.is_null()) {
      // After the open, id-null lines end the dispatch: dispatch.close, or the refusal it ended with.
      if (event == "dispatch.close" || !is_ok(*j)) dispatch_end_ = std::move(*j);
    }
    cv_.notify_all();
  }

  void read_loop() {
    std::string buf;
    char chunk[65536];
    while (out_ || err_) {
      pollfd p[2] = {{out_ ? out_.get() : -1, POLLIN, 0}, {err_ ? err_.get() : -1, POLLIN, 0}};
      if (::poll(p, 2, -1) < 0) {
        if (errno == EINTR) continue;
        break;
      }
      for (int i = 0; i < 2; ++i) {
        if (!p[i].revents) continue;
        UniqueFd& fd = i == 0 ? out_ : err_;
        ssize_t got = ::read(fd.get(), chunk, sizeof chunk);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) {
          fd.reset();
          continue;
        }
        if (i == 1) {
          std::lock_guard lk(mu_);
          err_tail_.append(chunk, static_cast<size_t>(got));
          if (err_tail_.size() > kErrTail) err_tail_.erase(0, err_tail_.size() - kErrTail);
          continue;
        }
        buf.append(chunk, static_cast<size_t>(got));
        for (size_t nl; (nl = buf.find('\n')) != std::string::npos;) {
          take_line(std::string_view(buf).substr(0, nl));
          buf.erase(0, nl + 1);
        }
        if (buf.size() > kLineMost) {  // a line past any answer's bound: the dispatch is not believed
          out_.reset();
          (void)child_.signal(SIGTERM);
        }
      }
    }
    {
      std::lock_guard lk(mu_);
      eof_ = true;
      cv_.notify_all();
    }
    (void)child_.wait();
    std::lock_guard lk(mu_);
    exited_ = true;
    if (ended_how_.empty()) {
      ended_how_ = "killed";
      ended_reason_ = "the dispatch ended: " + last_line(err_tail_);
    }
    cv_.notify_all();
  }

  std::string machine_, id_, receipts_, far_session_, task_id_, policy_digest_;
  Json executor_, tier_;
  std::chrono::steady_clock::time_point opened_at_{}, running_since_{};
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<uint64_t, Json> answers_;
  std::vector<Json> events_;
  uint64_t next_id_ = 1, actions_ = 0, refused_ = 0;
  std::string running_kind_, err_tail_, ended_how_, ended_reason_;
  bool eof_ = false, exited_ = false, closed_ = false, opened_ = false;
  uint64_t lines_ = 0;
  std::set<uint64_t> waiting_;
  Json dispatch_end_ = nullptr;
  pid_t pgid_ = -1;
  std::atomic<bool> killed_ = false;
  std::mutex write_mu_;
  UniqueFd in_, out_, err_;
  ChildProcess child_;
  std::thread reader_;
};

}  // namespace

std::unique_ptr<SessionHandle> local_session(std::unique_ptr<broker::Session> s) {
  return std::make_unique<LocalSession>(std::move(s));
}

Result<std::unique_ptr<SessionHandle>> open_far_session(const FarSessionSpec& spec, Json& opened) {
  if (spec.command.empty())
    return fail(Code::ExecutorUnavailable,
                "this server dispatches no session to another machine: no airlock beside airlock-serve",
                {{"machine", spec.machine}});
  // The effective policy, handed to the dispatch in a file of this user's alone; it is read
  // before the dispatch says it is open, and removed then.
  std::string dir = spec.state_dir + "/dispatch";
  TRY(make_dirs(dir, 0700));
  std::string file = fmt::format("{}/{}.policy.json", dir, random_id());
  TRY(write_file_atomic(file, spec.policy.dump(), 0600));
  struct Unlink {
    const std::string& f;
    ~Unlink() { ::unlink(f.c_str()); }
  } unlink_policy{file};
  auto far = std::make_unique<FarSession>();
  auto r = far->start(spec, file);
  if (!r) {
    (void)far->kill("its open failed");  // the dispatch ends now: nothing waits for it to give up
    return std::unexpected(r.error());
  }
  far->describe(spec.task_id, spec.policy_digest);
  opened = std::move(*r);
  return std::unique_ptr<SessionHandle>(std::move(far));
}

}  // namespace airlock::server
