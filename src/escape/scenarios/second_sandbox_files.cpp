// second_sandbox_files: read what another session, running at the same time in the same executor,
// wrote in its own view.
#include <fcntl.h>
#include <fmt/format.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <thread>

#include "escape/scenario.h"

#if !AIRLOCK_PROBE_SIDE
#include "base/fs.h"
#include "base/hash.h"
#include "broker/session.h"
#endif

namespace airlock::escape::scenarios::second_sandbox_files {

// Where the first session writes its token, in out/ of its view (the one path a real tier lets it
// write), and how long it then sleeps unless the suite stops it first.
constexpr std::string_view kNeighbourFile = "neighbour-canary.txt";
constexpr int kNeighbourSleepSeconds = 30;

#if AIRLOCK_PROBE_SIDE

// The same attempt as read_host_file; only the file differs.
ProbeReport probe(const ProbeInput& in) {
  const std::string& path = in.arg(0);
  auto r = read_some(path);
  if (r.err) return {{}, false, fmt::format("read {}: {}", path, err_name(r.err)), r.err, Json::object()};
  return {{},
          true,
          fmt::format("read {} bytes of {}: \"{}\"", r.data.size(), path, printable(r.data)),
          0,
          Json::object()};
}

// The first session's command (kNeighbourProbe): writes its token to out/ in its view, then
// sleeps until the suite stops it.
[[noreturn]] void neighbour(const ProbeInput& in) {
  std::string path = "out/" + std::string(kNeighbourFile);
  int e = write_new(path, in.arg(0) + "\n");
  write_all(1, fmt::format("sandbox_neighbour: wrote {}: {}\n", path, e ? err_name(e) : std::string("ok")));
  timespec ts{kNeighbourSleepSeconds, 0};
  while (::nanosleep(&ts, &ts) < 0 && errno == EINTR) {
  }
  ::_exit(0);
}

#else

// A first session in the same executor, its command writing a token into its own view and sleeping
// while the second session's probe tries to read it. It is stopped and closed (without write-back)
// once the probe's session has closed, or when this scenario ends, whichever comes first.
class SecondSandboxFiles final : public Scenario {
  std::unique_ptr<broker::Session> first_;
  std::thread first_thread_;
  UniqueFd first_out_;
  std::string token_, file_;

  void stop_first() {
    if (!first_) return;
    first_->interrupt();
    if (first_thread_.joinable()) first_thread_.join();
    (void)first_->close(false);
    first_.reset();
  }

 public:
  ~SecondSandboxFiles() override { stop_first(); }

 private:
  Result<std::vector<std::string> > bait(Run& run) override {
    auto ws = TRY(run.canaries.make_workspace(run.name + "-first"));
    first_out_ =
        UniqueFd(::open((run.files + "-first.out").c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
    if (!first_out_) return fail_errno(Code::IoError, "cannot open " + run.files + "-first.out", errno);
    first_ = TRY(run.open_session(ws));
    token_ = "airlock-canary-neighbour-" + random_id();
    file_ = first_->dirs().view + "/out/" + std::string(kNeighbourFile);
    exec::Command c;
    c.argv = {"./.probe/" + std::string(kProbeProgram), std::string(kNeighbourProbe), "--run", run.bait.root,
              token_};
    c.stdin_fd = run.null_fd;
    c.stdout_fd = first_out_.get();
    c.stderr_fd = first_out_.get();
    first_thread_ = std::thread([s = first_.get(), c] { (void)s->run_command(c); });
    // Wait (up to 3 s) until the token is in the first session's view, as the host sees it.
    bool there = false;
    for (int i = 0; i < 300 && !there; ++i) {
      auto text = read_file(file_);
      there = text && has(*text, token_);
      if (!there) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    run.details["first_session"] = first_->id();
    if (!there) {
      stop_first();
      return fail(Code::ToolFailed, "the first session's token never appeared in its view at " + file_);
    }
    return std::vector{file_};
  }
  void observe(Run&, const Observed&) override { stop_first(); }
  Judged judge(Run&, const Observed& o) override {
    bool seen = has(o.output, token_);
    Judged j;
    j.host = {{"neighbour_file", file_}, {"neighbour_token_in_output", seen}};
    j.breached = seen;
    j.evidence = fmt::format("{}; host: the first session's token (in {}) {} the probe's output",
                             o.probe_said(), file_, seen ? "IS IN" : "is not in");
    return j;
  }
};

std::unique_ptr<Scenario> make() { return std::make_unique<SecondSandboxFiles>(); }

#endif

}  // namespace airlock::escape::scenarios::second_sandbox_files
