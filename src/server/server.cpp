// The HTTP API: routes, the session table, listeners (unix socket, loopback TCP with a bearer token), shutdown.
#include "exec/planner.h"
#include "server/server.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/crypto.h>

#include <algorithm>
#include <charconv>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <map>
#include <mutex>
#include <thread>

#include <httplib.h>

#include "base/hash.h"
#include "base/unique_fd.h"
#include "broker/approvals.h"
#include "broker/protocol.h"
#include "broker/session.h"
#include "ledger/receipts.h"
#include "server/framing.h"
#include "server/http_status.h"
#include "server/session_handle.h"

namespace airlock::server {

namespace {

constexpr Route kRoutes[] = {
    {"GET", "/v1/health"},
    {"GET", "/v1/executors"},
    {"GET", "/v1/openapi.json"},
    {"POST", "/v1/sessions"},
    {"GET", "/v1/sessions"},
    {"POST", "/v1/sessions/{id}/read_file"},
    {"POST", "/v1/sessions/{id}/write_file"},
    {"POST", "/v1/sessions/{id}/list_dir"},
    {"POST", "/v1/sessions/{id}/http_fetch"},
    {"POST", "/v1/sessions/{id}/run_tool"},
    {"GET", "/v1/sessions/{id}/receipts"},
    {"POST", "/v1/sessions/{id}/close"},
    {"POST", "/v1/sessions/{id}/kill"},
    {"GET", "/v1/approvals"},
    {"POST", "/v1/approvals/{id}"},
    {"GET", "/v1/console/sessions"},
    {"GET", "/v1/console/sessions/{id}/receipts"},
    {"POST", "/v1/console/sessions/{id}/kill"},
    {"GET", "/v1/console/host"},
};

// The approval and console routes answer only the operator's token, on every listener: an agent
// holding the server's own credential (or its socket) must not approve what it asked for, nor
// watch or kill other sessions.
bool operator_route(std::string_view path) {
  return path == "/v1/approvals" || path.starts_with("/v1/approvals/") || path.starts_with("/v1/console/");
}

// The console's own files (GET /ui/…): served to anyone who reaches a listener, since they hold
// no data and every call they make carries the operator's token in a header.
bool console_file_route(std::string_view path) {
  return path == "/ui" || path.starts_with("/ui/") || path == "/favicon.ico";
}

// Whether a request's Host names the loopback listener itself (127.0.0.0/8, [::1] or localhost,
// with any port). A page of another site that has its own name resolve to 127.0.0.1 (DNS
// rebinding) sends that name: the console's files and routes refuse it, so no such page can
// show the console under its own origin and ask for the token.
bool loopback_host(std::string_view host) {
  if (host.starts_with("[::1]")) return host.size() == 5 || host[5] == ':';
  std::string_view name = host.substr(0, host.find(':'));
  if (name == "localhost") return true;
  in_addr v4{};
  std::string literal(name);
  return ::inet_pton(AF_INET, literal.c_str(), &v4) == 1 && (ntohl(v4.s_addr) >> 24) == 127;
}

// What the console's files are served with: nothing but their own origin's script and style runs
// or loads, no frame may hold them, and no referrer leaves.
void console_headers(httplib::Response& res) {
  res.set_header("Content-Security-Policy",
                 "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; "
                 "base-uri 'none'; form-action 'none'; frame-ancestors 'none'");
  res.set_header("X-Content-Type-Options", "nosniff");
  res.set_header("X-Frame-Options", "DENY");
  res.set_header("Referrer-Policy", "no-referrer");
  res.set_header("Cross-Origin-Opener-Policy", "same-origin");
  res.set_header("Cross-Origin-Resource-Policy", "same-origin");
  res.set_header("Cache-Control", "no-store");
}

// The longest a console's receipts request waits for the next receipt, and the bytes of
// receipts one answer carries at most (the next request reads on).
constexpr uint64_t kConsoleMaxWaitMs = 25000;
constexpr uint64_t kConsolePageBytes = 1u << 20;
// How many ended sessions GET /v1/console/sessions lists, newest first.
constexpr size_t kConsoleEndedListed = 50;

// Whether the request's bearer token is `want_sha256`'s, compared as digests in constant time.
bool bearer_matches(const httplib::Request& req, const std::string& want_sha256) {
  std::string auth = req.get_header_value("Authorization");
  constexpr std::string_view kBearer = "Bearer ";
  std::string got = sha256_hex(auth.starts_with(kBearer) ? auth.substr(kBearer.size()) : std::string("\n"));
  return auth.starts_with(kBearer) && CRYPTO_memcmp(got.data(), want_sha256.data(), want_sha256.size()) == 0;
}

// Ended sessions stay answerable (receipts, AIRLOCK_SESSION_CLOSED) until this many more end.
constexpr size_t kEndedKept = 1024;

// The route template as httplib's regex: "{id}" captures a session id, dots are literal.
std::string route_regex(std::string_view path) {
  std::string out;
  for (size_t i = 0; i < path.size(); ++i) {
    if (path.substr(i, 4) == "{id}") {
      out += "([A-Za-z0-9_-]{1,128})";
      i += 3;
    } else if (path[i] == '.') {
      out += "\\.";
    } else {
      out += path[i];
    }
  }
  return out;
}

// The action a session route names: the last path segment ("" for routes without a session).
std::string_view route_action(std::string_view path) {
  if (path.find("{id}") == std::string_view::npos) return "";
  return path.substr(path.rfind('/') + 1);
}

void reply(httplib::Response& res, int status, const Json& body) {
  res.status = status;
  res.set_content(body.dump(-1, ' ', false, Json::error_handler_t::replace), "application/json");
}

void reply_error(httplib::Response& res, const Error& e) {
  reply(res, http_status(e.code), Json{{"error", e.to_json()}});
}

// The request body as a JSON object; an empty body is an empty object.
Result<Json> body_object(const httplib::Request& req) {
  return parse_request_body(req.body);
}

// A connection's bytes as httplib reads them, each checked by a RequestFramer first: httplib
// 0.11 bounds neither the header count nor a chunked body (CVE-2025-46728), so nothing it has
// not been allowed to see reaches it. Buffered like httplib's SocketStream, which its line
// reader reads one byte at a time.
class GuardedStream final : public httplib::Stream {
 public:
  GuardedStream(int fd, const FramingLimits& limits, int read_timeout_ms, int write_timeout_ms)
      : fd_(fd), framer_(limits), request_ms_(limits.request_ms), read_ms_(read_timeout_ms),
        write_ms_(write_timeout_ms) {}

  bool is_readable() const override { return pos_ < len_ || wait(POLLIN, read_ms_); }
  bool is_writable() const override { return wait(POLLOUT, write_ms_); }
  ssize_t read(char* ptr, size_t size) override {
    if (refused()) return -1;
    if (pos_ == len_) {
      int ms = read_ms_;
      bool by_deadline = false;  // the wait ends at the deadline, not at the read timeout
      if (deadline_) {
        auto left = std::chrono::ceil<std::chrono::milliseconds>(*deadline_ - Clock::now()).count();
        if (left <= 0) return expire();
        by_deadline = left <= ms;
        ms = static_cast<int>(std::min<int64_t>(ms, left));
      }
      if (!wait(POLLIN, ms)) return by_deadline ? expire() : -1;
      ssize_t n;
      do n = ::recv(fd_, buf_, sizeof buf_, 0);
      while (n < 0 && errno == EINTR);
      if (n <= 0) return n;
      pos_ = 0;
      len_ = static_cast<size_t>(n);
    }
    // A request's clock starts at its first byte and stops once the framer has seen its last.
    if (!deadline_ && request_ms_ && framer_.idle()) deadline_ = Clock::now() + std::chrono::milliseconds(request_ms_);
    size_t take = std::min(size, len_ - pos_);
    if (!framer_.feed(std::string_view(buf_ + pos_, take))) return -1;
    if (framer_.idle()) deadline_.reset();
    std::memcpy(ptr, buf_ + pos_, take);
    pos_ += take;
    return static_cast<ssize_t>(take);
  }
  ssize_t write(const char* ptr, size_t size) override {
    if (refused()) return static_cast<ssize_t>(size);  // our refusal replaces httplib's answer
    return send_all(ptr, size);
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override { ip.clear(), port = 0; }
  void get_local_ip_and_port(std::string& ip, int& port) const override { ip.clear(), port = 0; }
  int socket() const override { return fd_; }

  // Why the connection is refused: a bound of the framer's, or the request's deadline.
  const std::optional<Error>& refused() const { return late_ ? late_ : framer_.refused(); }
  bool idle() const { return framer_.idle(); }
  bool buffered() const { return pos_ < len_; }
  // A connection carries requests for at most ten request deadlines (none without a deadline):
  // kept alive past that, it could hold a worker for hours a request at a time.
  bool too_old() const { return request_ms_ && Clock::now() - opened_ > std::chrono::milliseconds(10 * request_ms_); }
  ssize_t send_all(const char* ptr, size_t size) {
    size_t sent = 0;
    while (sent < size) {
      if (!wait(POLLOUT, write_ms_)) return -1;
      ssize_t n = ::send(fd_, ptr + sent, size - sent, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return -1;
      sent += static_cast<size_t>(n);
    }
    return static_cast<ssize_t>(sent);
  }

 private:
  bool wait(short events, int ms) const {
    pollfd p{fd_, events, 0};
    int rc;
    do rc = ::poll(&p, 1, ms);
    while (rc < 0 && errno == EINTR);
    return rc > 0;
  }
  using Clock = std::chrono::steady_clock;
  ssize_t expire() {
    late_ = Error{Code::RequestTimeout,
                  fmt::format("the request did not arrive within {} ms of its first byte", request_ms_),
                  {{"request_ms", request_ms_}}};
    return -1;
  }
  int fd_;
  RequestFramer framer_;
  uint64_t request_ms_;
  std::optional<Clock::time_point> deadline_;
  Clock::time_point opened_ = Clock::now();
  std::optional<Error> late_;
  int read_ms_, write_ms_;
  char buf_[4096];
  size_t pos_ = 0, len_ = 0;
};

std::string_view reason_phrase(int status) {
  switch (status) {
    case 413:
      return "Payload Too Large";
    case 431:
      return "Request Header Fields Too Large";
    default:
      return "Bad Request";
  }
}

// An AdoptingServer serves a listening socket made elsewhere (httplib 0.11 binds only TCP),
// and serves each connection through a GuardedStream.
class AdoptingServer : public httplib::Server {
 public:
  void adopt(int fd) { svr_sock_ = fd; }
  void set_framing(FramingLimits limits) { limits_ = limits; }

 private:
  // httplib's keep-alive loop (detail::process_server_socket_core), over a GuardedStream.
  bool process_and_close_socket(int sock) override {
    // Headers and body go out in separate writes: without TCP_NODELAY, Nagle and delayed ACKs
    // add ~40 ms to every kept-alive request (a no-op on the unix socket).
    int one = 1;
    (void)::setsockopt(sock, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    GuardedStream strm(sock, limits_, static_cast<int>(read_timeout_sec_ * 1000 + read_timeout_usec_ / 1000),
                       static_cast<int>(write_timeout_sec_ * 1000 + write_timeout_usec_ / 1000));
    bool ret = false;
    for (size_t count = keep_alive_max_count_; count > 0 && svr_sock_ != INVALID_SOCKET && keep_alive(strm); --count) {
      bool closed = false;
      ret = process_request(strm, count == 1, closed, [](httplib::Request&) {});
      if (strm.refused()) {
        const Error& e = *strm.refused();
        int status = http_status(e.code);
        std::string body = Json{{"error", e.to_json()}}.dump(-1, ' ', false, Json::error_handler_t::replace);
        std::string head = fmt::format(
            "HTTP/1.1 {} {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            status, reason_phrase(status), body.size());
        (void)strm.send_all(head.data(), head.size());
        (void)strm.send_all(body.data(), body.size());
        linger(sock);
        break;
      }
      // A body httplib left unread (a refusal before routing) would be read as the next request.
      if (!ret || closed || !strm.idle()) break;
    }
    ::shutdown(sock, SHUT_RDWR);
    ::close(sock);
    return ret;
  }
  // Closing with unread bytes resets the connection, and a reset can discard the refusal before
  // the client reads it: stop sending, then read and drop what is still coming, for at most
  // 1 s and 4 MiB, so the refusal costs no more than that.
  static void linger(int sock) {
    ::shutdown(sock, SHUT_WR);
    char sink[4096];
    size_t drained = 0;
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(1);
    while (drained < (4u << 20) && std::chrono::steady_clock::now() < until) {
      pollfd p{sock, POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      ssize_t n = ::recv(sock, sink, sizeof sink, 0);
      if (n <= 0) break;
      drained += static_cast<size_t>(n);
    }
  }
  // Waits for the next request, up to the keep-alive timeout, while the server runs.
  bool keep_alive(const GuardedStream& strm) {
    if (strm.too_old()) return false;
    if (strm.buffered()) return true;
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(keep_alive_timeout_sec_);
    while (svr_sock_ != INVALID_SOCKET && std::chrono::steady_clock::now() < until) {
      pollfd p{strm.socket(), POLLIN, 0};
      int rc = ::poll(&p, 1, 50);
      if (rc > 0) return true;
      if (rc < 0 && errno != EINTR) return false;
    }
    return false;
  }
  FramingLimits limits_;
};

struct Listener {
  std::unique_ptr<AdoptingServer> http;
  std::string name;  // "unix:PATH" or "tcp:HOST:PORT"
  std::thread thread;
  std::atomic<bool> done = false;
  std::atomic<size_t> acting = 0;  // requests in a session action here, running or waiting for their session
};

}  // namespace

std::span<const Route> routes() { return kRoutes; }

Result<Json> parse_request_body(std::string_view body, Code code) {
  if (body.find_first_not_of(" \t\r\n") == std::string_view::npos) return Json::object();
  auto j = TRY(parse_json(body, code, "the request body"));
  if (!j.is_object()) return fail(code, "the request body must be a JSON object", {{"path", "$"}});
  return j;
}

Result<std::string> read_token_file(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) return fail_errno(Code::IoError, fmt::format("cannot open the token file {}", path), errno);
  struct stat st{};
  if (::fstat(fd.get(), &st) < 0) return fail_errno(Code::IoError, fmt::format("cannot stat {}", path), errno);
  Json facts = {{"token_file", path}, {"owner_uid", st.st_uid}, {"mode", fmt::format("{:04o}", st.st_mode & 07777)}};
  if (!S_ISREG(st.st_mode))
    return fail(Code::CustodyUnsafe, fmt::format("the token file {} is not a regular file", path), facts);
  if (st.st_uid != ::geteuid())
    return fail(Code::CustodyUnsafe,
                fmt::format("the token file {} is owned by uid {}, not by the caller (uid {})", path, st.st_uid,
                            ::geteuid()),
                facts);
  if (st.st_mode & 077)
    return fail(Code::CustodyUnsafe,
                fmt::format("the token file {} has mode {:04o}: others may read or change it (chmod 600)", path,
                            st.st_mode & 07777),
                facts);
  std::string token;
  char buf[4096];
  for (ssize_t n; (n = ::read(fd.get(), buf, sizeof buf)) != 0;) {
    if (n < 0) {
      if (errno == EINTR) continue;
      return fail_errno(Code::IoError, fmt::format("cannot read {}", path), errno);
    }
    token.append(buf, static_cast<size_t>(n));
    if (token.size() > 4096) return fail(Code::ConfigError, fmt::format("the token file {} is too large", path), facts);
  }
  while (!token.empty() && std::isspace(static_cast<unsigned char>(token.back()))) token.pop_back();
  if (token.size() < 16)
    return fail(Code::ConfigError, fmt::format("the token in {} is shorter than 16 characters", path), facts);
  return token;
}

Result<ListenAddress> parse_listen(const std::string& spec) {
  size_t colon = spec.rfind(':');
  if (colon == std::string::npos)
    return fail(Code::OptionInvalid, fmt::format("--listen {}: expected HOST:PORT", spec), {{"listen", spec}});
  std::string host = spec.substr(0, colon), port_text = spec.substr(colon + 1);
  int port = -1;
  if (!port_text.empty() && port_text.size() <= 5 && port_text.find_first_not_of("0123456789") == std::string::npos)
    port = std::stoi(port_text);
  if (port < 0 || port > 65535)
    return fail(Code::OptionInvalid, fmt::format("--listen {}: the port must be 0..65535", spec), {{"listen", spec}});
  in_addr v4{};
  if (host == "[::1]") return ListenAddress{"::1", port};
  // Only loopback: the token is sent in clear text, so it must not cross a network.
  if (::inet_pton(AF_INET, host.c_str(), &v4) == 1 && (ntohl(v4.s_addr) >> 24) == 127)
    return ListenAddress{host, port};
  return fail(Code::OptionInvalid, fmt::format("--listen {}: only a loopback address (127.0.0.0/8 or [::1])", spec),
              {{"listen", spec}});
}

struct Server::Impl {
  struct Entry {
    std::unique_ptr<SessionHandle> session;
    std::mutex ops;  // actions and close, one at a time; kill and receipts never wait for it
    std::atomic<bool> ended = false;  // written under Impl::mu
    std::atomic<std::chrono::steady_clock::rep> last_used{std::chrono::steady_clock::now().time_since_epoch().count()};
    void touch() { last_used = std::chrono::steady_clock::now().time_since_epoch().count(); }
    // The console's view of the receipts log: verified up to `at`; where each receipt starts
    // and the first 8 bytes of its hash (a line read again must be the line verified); the
    // line that broke the chain, if one did. Read on only by console requests.
    struct Chain {
      std::mutex mu;
      ledger::ChainCursor at;
      std::vector<uint64_t> starts, hashes;
      std::optional<Error> broken;
    } chain;
  };
  std::thread reaper;
  std::condition_variable reaper_cv;
  // Bumped (under mu) and notified whenever a session may have a new receipt: a console's
  // receipts request waits on it.
  uint64_t changes = 0;
  std::condition_variable changed_cv;
  void changed() {
    {
      std::lock_guard lk(mu);
      ++changes;
    }
    changed_cv.notify_all();
  }

  ServerOptions opts;
  std::mutex mu;  // sessions, ended, stopping
  std::map<std::string, std::shared_ptr<Entry>> sessions;
  std::deque<std::string> ended;
  bool stopping = false;
  std::optional<exec::HostProbe> host;  // the facts each session is planned on
  std::vector<std::unique_ptr<Listener>> listeners;
  std::string socket_path;
  dev_t socket_dev = 0;
  ino_t socket_ino = 0;

  size_t opening = 0;  // far sessions being opened (under mu): counted as open
  size_t live() const {
    size_t n = opening;
    for (const auto& [id, e] : sessions)
      if (!e->ended && !e->session->killed()) ++n;
    return n;
  }

  void mark_ended(const std::string& id, Entry& e) {
    std::vector<std::shared_ptr<Entry>> evicted;  // destroyed after the lock: a far session's end may wait
    {
      std::lock_guard lk(mu);
      if (e.ended) return;
      e.ended = true;
      ended.push_back(id);
      while (ended.size() > kEndedKept) {
        if (auto it = sessions.find(ended.front()); it != sessions.end()) {
          evicted.push_back(std::move(it->second));
          sessions.erase(it);
        }
        ended.pop_front();
      }
    }
    changed();
  }

  // `touch`: the request is use of the session (an operator watching it is not).
  Result<std::shared_ptr<Entry>> find(const std::string& id, bool touch = true) {
    std::lock_guard lk(mu);
    auto it = sessions.find(id);
    if (it == sessions.end())
      return fail(Code::SessionUnknown, fmt::format("no session has the id \"{}\"", id), {{"session", id}});
    if (touch) it->second->touch();
    return it->second;
  }

  // Ends what has ended in fact: a spent budget pulls its kill switch, an idle session is killed,
  // and every killed or closed session leaves the count of open ones. A session running an
  // action is left to that action (its budget bounds the run).
  void reap() {
    std::vector<std::pair<std::string, std::shared_ptr<Entry>>> open;
    {
      std::lock_guard lk(mu);
      for (auto& [id, e] : sessions)
        if (!e->ended) open.emplace_back(id, e);
    }
    auto now = std::chrono::steady_clock::now().time_since_epoch().count();
    auto idle_after = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                          std::chrono::seconds(opts.idle_seconds))
                          .count();
    for (auto& [id, e] : open) {
      SessionHandle& s = *e->session;
      if (!s.ended() && e->ops.try_lock()) {
        std::lock_guard one(e->ops, std::adopt_lock);
        (void)s.enforce_budget();
        if (!s.ended() && opts.idle_seconds && now - e->last_used.load() >= idle_after)
          (void)s.kill(fmt::format("idle for {} s", opts.idle_seconds));
      }
      if (s.ended() || s.killed()) mark_ended(id, *e);
    }
  }

  void reap_loop() {
    std::unique_lock lk(mu);
    while (!stopping) {
      reaper_cv.wait_for(lk, std::chrono::milliseconds(opts.reap_interval_ms));
      if (stopping) break;
      lk.unlock();
      reap();
      lk.lock();
    }
  }

  // Bytes under the state directory's receipts/ and sessions/ (bounded walk: errors end it).
  uint64_t state_bytes() const {
    namespace fs = std::filesystem;
    uint64_t total = 0;
    for (const char* sub : {"receipts", "sessions", "ledgers", "approvals"}) {
      std::error_code ec;
      fs::recursive_directory_iterator it(fs::path(opts.state_dir) / sub, fs::directory_options::skip_permission_denied,
                                          ec);
      for (; !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
        std::error_code ec2;
        if (it->is_regular_file(ec2) && !it->is_symlink(ec2)) total += it->file_size(ec2);
      }
    }
    return total;
  }

  // The open sessions, oldest first.
  Result<std::pair<int, Json>> list_sessions() {
    reap();
    std::vector<std::shared_ptr<Entry>> open;
    {
      std::lock_guard lk(mu);
      for (auto& [id, e] : sessions)
        if (!e->ended && !e->session->killed()) open.push_back(e);
    }
    Json list = Json::array();
    for (auto& e : open) list.push_back(e->session->status());
    std::stable_sort(list.begin(), list.end(),
                     [](const Json& a, const Json& b) { return a["age_seconds"] > b["age_seconds"]; });
    return std::pair{200, Json{{"sessions", std::move(list)}}};
  }

  Result<std::pair<int, Json>> open_session(const httplib::Request& req) {
    // Duplicate keys are refused here as in a policy file (parse_json), as a malformed body: 400.
    auto doc = TRY(body_object(req));
    // "machine": the session is opened on that machine of the fleet (docs/store.md), through the
    // same gate as `airlock session --machine`; the rest of the body is its policy.
    std::optional<std::string> machine;
    if (auto m = doc.find("machine"); m != doc.end()) {
      if (!m->is_string() || m->get<std::string>().empty())
        return fail(Code::ProtocolError, "$.machine must be the name of a machine of the fleet", {{"path", "$.machine"}});
      machine = m->get<std::string>();
      doc.erase(m);
    }
    auto pol = TRY(policy::parse_layer(doc, opts.base_policy));
    reap();
    if (opts.max_state_bytes) {
      uint64_t used = state_bytes();
      if (used >= opts.max_state_bytes)
        return fail(Code::CapacityExhausted,
                    fmt::format("the state directory holds {} bytes of receipts, sessions, ledgers and approvals, the most this server "
                                "allows (--max-state-bytes {})",
                                used, opts.max_state_bytes),
                    {{"state_bytes", used}, {"max_state_bytes", opts.max_state_bytes}});
    }
    {
      std::lock_guard lk(mu);
      if (stopping) return fail(Code::CapacityExhausted, "the server is shutting down");
      if (live() >= opts.max_sessions)
        return fail(Code::CapacityExhausted, fmt::format("{} sessions are open, the most this server runs", live()),
                    {{"max_sessions", opts.max_sessions}});
    }
    if (machine) return open_far(*machine, pol);
    plan::HostFacts facts = exec::facts_for(pol, *host);
    broker::SessionOptions so(opts.state_dir, opts.profile);
    so.vm_pool = opts.vm_pool;
    so.keep_warm = true;  // a session runs command after command: each one's sandbox waits, built
    so.credentials = opts.credentials;
    so.max_receipt_bytes = opts.max_session_receipt_bytes;
    if (req.has_param("run_id")) so.run_id = req.get_param_value("run_id");  // resumes that run's tool calls
    auto s = TRY(broker::Session::open(pol, facts, so));
    auto receipts = TRY(s->receipts());
    Json out = {{"session", s->id()},
                {"executor", policy::to_string(s->plan().executor())},
                {"tier", s->plan().tier()},
                {"enforced", exec::to_json(s->enforced())},
                {"receipts", s->receipts_path()},
                {"receipt", receipts.empty() ? Json(nullptr) : receipts.front()}};
    std::lock_guard lk(mu);
    if (stopping) {  // shutdown began while this one opened: it must not outlive the sweep
      (void)s->kill("server shutdown");
      return fail(Code::CapacityExhausted, "the server is shutting down");
    }
    auto e = std::make_shared<Entry>();
    e->session = local_session(std::move(s));
    sessions.emplace(e->session->id(), e);
    ++changes;
    changed_cv.notify_all();
    return std::pair{201, out};
  }

  Result<std::pair<int, Json>> open_far(const std::string& machine, const policy::TaskPolicy& pol) {
    if (!pol.workspace || pol.workspace->empty() || pol.workspace->front() != '/')
      return fail(Code::ProtocolError, "a session on another machine needs $.workspace: the absolute path of its workspace there",
                  {{"path", "$.workspace"}, {"machine", machine}});
    {
      std::lock_guard lk(mu);
      if (stopping) return fail(Code::CapacityExhausted, "the server is shutting down");
      if (live() >= opts.max_sessions)
        return fail(Code::CapacityExhausted, fmt::format("{} sessions are open, the most this server runs", live()),
                    {{"max_sessions", opts.max_sessions}});
      ++opening;
    }
    struct Opened {
      Impl& i;
      bool done = false;  // counted down already, in the section that lists the session
      ~Opened() {
        if (done) return;
        std::lock_guard lk(i.mu);
        --i.opening;
      }
    } counted{*this};
    FarSessionSpec spec;
    spec.command = opts.dispatch_command;
    spec.state_dir = opts.state_dir;
    spec.machine = machine;
    spec.workspace = *pol.workspace;
    spec.policy = policy::to_json(pol);
    spec.task_id = pol.task_id;
    spec.policy_digest = policy::digest(pol);
    Json out;
    auto s = TRY(open_far_session(spec, out));
    std::unique_ptr<SessionHandle> refused;  // declared before the lock: destroyed after it
    std::lock_guard lk(mu);
    --opening;
    counted.done = true;
    if (stopping || sessions.contains(s->id())) {
      bool dup = !stopping;
      (void)s->kill(dup ? "its id is another session's" : "server shutdown");
      refused = std::move(s);
      if (dup)
        return fail(Code::ProtocolError, fmt::format("machine {}: the dispatch named a session id already open here", machine),
                    {{"machine", machine}});
      return fail(Code::CapacityExhausted, "the server is shutting down");
    }
    auto e = std::make_shared<Entry>();
    e->session = std::move(s);
    sessions.emplace(e->session->id(), e);
    ++changes;
    changed_cv.notify_all();
    return std::pair{201, out};
  }

  Result<std::pair<int, Json>> act(const std::string& id, std::string_view action, const httplib::Request& req,
                                   Listener& l) {
    auto e = TRY(find(id));
    SessionHandle& s = *e->session;
    // No body is no arguments: `curl -X POST …/kill` pulls the kill switch, it is not a 400.
    auto body = req.body.empty() ? Result<Json>(Json::object()) : body_object(req);
    if (body) {
      for (const char* key : {"action", "id"})
        if (body->contains(key)) {
          body = fail(Code::ProtocolError, fmt::format("$.{} is not an argument: the route names the action", key),
                      {{"path", fmt::format("$.{}", key)}});
          break;
        }
    }
    if (!body) {
      // Refused before the adapter saw it: recorded like the pipe records an unreadable line.
      if (auto noted = s.note_refusal("protocol.refused", Json{{"body_sha256", sha256_hex(req.body)}}, body.error());
          !noted)
        return std::unexpected(noted.error());
      return std::unexpected(body.error());
    }
    (*body)["action"] = std::string(action);
    Json resp;
    if (action == "kill" || action == "receipts") {
      resp = s.handle(*body);
    } else {
      // An action holds a worker while it runs, and so does each request waiting for its session's
      // turn: past threads - reserve of them on this listener the next is refused, so the kill
      // switch, the console and health always find a worker (an agent queueing requests on a
      // busy session cannot take them all).
      size_t reserve = std::max<size_t>(1, opts.threads / 8), most = opts.threads > reserve ? opts.threads - reserve : 1;
      if (l.acting.fetch_add(1) >= most) {
        l.acting.fetch_sub(1);
        Error busy{Code::CapacityExhausted,
                   fmt::format("{} requests already act or wait in sessions on this listener, the most it takes while it "
                               "keeps {} worker(s) for kill, the console and health (--threads {})",
                               most, reserve, opts.threads),
                   {{"acting", most}, {"reserved", reserve}, {"threads", opts.threads}}};
        if (auto noted = s.note_refusal(action, Json{{"body_sha256", sha256_hex(req.body)}}, busy); !noted)
          return std::unexpected(noted.error());
        return std::unexpected(std::move(busy));
      }
      struct Done {
        std::atomic<size_t>& n;
        ~Done() { n.fetch_sub(1); }
      } done{l.acting};
      std::lock_guard one(e->ops);
      resp = s.handle(*body);
      e->touch();  // the end of an action is use too: a long run_tool is not idleness
    }
    if (s.ended() || s.killed()) mark_ended(id, *e);  // closed, killed, or its budget ran out
    changed();
    if (!resp["ok"].get<bool>()) return std::unexpected(answer_error(resp["error"]));
    return std::pair{200, resp["result"]};
  }

  // GET /v1/approvals (?all for answered ones too), POST /v1/approvals/{id} {"decision": …}.
  // The operator's routes (approvals, the console) need the operator's bearer token.
  Result<void> as_operator(const Route& r, const httplib::Request& req) const {
    std::string_view what = r.path.starts_with("/v1/console/") ? "the console" : "approvals";
    if (opts.operator_token.empty())
      return fail(Code::Unauthorized, fmt::format("this server has no operator: {} needs serve's --operator-token-file", what),
                  {{"route", r.path}});
    if (!bearer_matches(req, sha256_hex(opts.operator_token)))
      return fail(Code::Unauthorized,
                  fmt::format("{} needs Authorization: Bearer <the operator's token>, which is not the agent's", what),
                  {{"route", r.path}});
    return {};
  }

  Result<std::pair<int, Json>> approvals(const Route& r, const httplib::Request& req) {
    broker::ApprovalStore store(opts.state_dir);
    if (r.method == "GET") {
      auto list = TRY(store.list(!req.has_param("all")));
      Json out = Json::array();
      for (const auto& a : list) out.push_back(a.to_json());
      return std::pair{200, Json{{"approvals", std::move(out)}}};
    }
    auto body = TRY(body_object(req));
    for (const auto& [k, v] : body.items())
      if (k != "decision" && k != "attempts" && k != "expires_in_seconds")
        return fail(Code::ProtocolError, fmt::format("$.{} is not an argument of an approval", k),
                    {{"path", "$." + k}});
    std::string decision = body.value("decision", Json()).is_string() ? body["decision"].get<std::string>() : "";
    if (decision != "approve" && decision != "deny")
      return fail(Code::ProtocolError, "$.decision must be \"approve\" or \"deny\"", {{"path", "$.decision"}});
    auto positive = [&](const char* key, uint64_t dflt, uint64_t most) -> Result<uint64_t> {
      if (!body.contains(key)) return dflt;
      if (!body[key].is_number_unsigned() || body[key].get<uint64_t>() == 0 || body[key].get<uint64_t>() > most)
        return fail(Code::ProtocolError, fmt::format("$.{} must be an integer from 1 to {}", key, most),
                    {{"path", fmt::format("$.{}", key)}});
      return body[key].get<uint64_t>();
    };
    auto attempts = TRY(positive("attempts", 1, 1000));
    auto ttl = TRY(positive("expires_in_seconds", broker::kApprovalTtlMs / 1000, 366 * 86400));
    auto a = TRY(store.decide(req.matches[1].str(), decision == "approve", static_cast<uint32_t>(attempts),
                              static_cast<int64_t>(ttl) * 1000, "http (operator token)"));
    return std::pair{200, a.to_json()};
  }

  // GET /v1/console/sessions: the open sessions (status) and the last ended ones, newest first.
  Result<std::pair<int, Json>> console_sessions() {
    reap();
    std::vector<std::shared_ptr<Entry>> open, done;
    {
      std::lock_guard lk(mu);
      for (auto& [id, e] : sessions)
        if (!e->ended && !e->session->killed()) open.push_back(e);
      for (auto it = ended.rbegin(); it != ended.rend() && done.size() < kConsoleEndedListed; ++it)
        if (auto f = sessions.find(*it); f != sessions.end()) done.push_back(f->second);
    }
    Json o = Json::array(), d = Json::array();
    for (auto& e : open) o.push_back(e->session->status());
    std::stable_sort(o.begin(), o.end(), [](const Json& a, const Json& b) { return a["age_seconds"] > b["age_seconds"]; });
    for (auto& e : done) d.push_back(e->session->status());
    return std::pair{200, Json{{"sessions", std::move(o)}, {"ended", std::move(d)}}};
  }

  // The first 8 bytes of a line's sha256 (hex), what the console keeps of each verified line.
  static uint64_t hash_prefix(const std::string& sha256_hex) {
    uint64_t v = 0;
    (void)std::from_chars(sha256_hex.data(), sha256_hex.data() + std::min<size_t>(16, sha256_hex.size()), v, 16);
    return v;
  }

  // Reads the session's receipts log on from where the console's verifier stopped: every
  // receipt is checked against the chain once, whoever asks (e.chain.mu held).
  void verify_on(Entry& e) {
    while (!e.chain.broken) {
      auto page = ledger::read_chain(e.session->receipts_path(), e.chain.at, kConsolePageBytes);
      if (!page) {
        e.chain.broken = page.error();
        break;
      }
      e.chain.starts.insert(e.chain.starts.end(), page->offsets.begin(), page->offsets.end());
      for (const auto& h : page->sha256) e.chain.hashes.push_back(hash_prefix(h));
      e.chain.at = page->next;
      if (page->broken) e.chain.broken = page->broken;
      if (!page->more || page->receipts.empty()) break;
    }
  }

  // The verified receipts from seq `after` on, read again (at most kConsolePageBytes): each must
  // be the line that was verified, else the chain is broken there (e.chain.mu held).
  Json verified_page(Entry& e, uint64_t after) {
    Json out = Json::array();
    if (after >= e.chain.starts.size()) return out;
    auto page = ledger::read_lines(e.session->receipts_path(), e.chain.starts[after], e.chain.at.offset, kConsolePageBytes);
    size_t good = 0;
    if (page) {
      while (good < page->receipts.size() && hash_prefix(page->sha256[good]) == e.chain.hashes[after + good]) ++good;
      if (good < page->receipts.size() || (page->broken && good == page->receipts.size()))
        e.chain.broken = Error{Code::LedgerCorrupt,
                               fmt::format("{}: line {} changed after it was verified", e.session->receipts_path(),
                                           after + good + 1),
                               {{"line", after + good + 1}}};
      for (size_t i = 0; i < good; ++i) out.push_back(std::move(page->receipts[i]));
    } else {
      e.chain.broken = page.error();
    }
    if (e.chain.broken) {  // nothing past the break is shown, now or later
      e.chain.starts.resize(std::min<size_t>(e.chain.starts.size(), after + good));
      e.chain.hashes.resize(e.chain.starts.size());
    }
    return out;
  }

  // GET /v1/console/sessions/{id}/receipts?after=N&wait_ms=M: the receipts from seq N on
  // (those verified so far, at most kConsolePageBytes of them), waiting up to M ms for one
  // when there is none yet; the chain's state, the session's status, and the output tails of
  // the tool runs among them.
  Result<std::pair<int, Json>> console_receipts(const std::string& id, const httplib::Request& req) {
    auto e = TRY(find(id, false));
    auto number = [&](const char* key, uint64_t most) -> Result<uint64_t> {
      if (!req.has_param(key)) return 0;
      std::string v = req.get_param_value(key);
      uint64_t n = 0;
      auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
      if (v.empty() || ec != std::errc() || end != v.data() + v.size() || n > most)
        return fail(Code::ProtocolError, fmt::format("?{} must be an integer from 0 to {}", key, most),
                    {{"parameter", key}});
      return n;
    };
    uint64_t after = TRY(number("after", uint64_t{1} << 53));
    uint64_t wait_ms = TRY(number("wait_ms", kConsoleMaxWaitMs));
    auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(wait_ms);
    for (;;) {
      uint64_t seen;
      {
        std::lock_guard lk(mu);
        seen = changes;
      }
      bool have;
      {
        std::lock_guard lk(e->chain.mu);
        verify_on(*e);
        have = e->chain.starts.size() > after;  // a broken chain has nothing more to give: wait as for none
      }
      // Ended in fact (session.close written), not only marked: a killed action may still run.
      if (have || e->session->ended() || std::chrono::steady_clock::now() >= until) break;
      std::unique_lock lk(mu);
      if (stopping) break;
      // Door requests are recorded from the door's threads, unseen here: look again soon.
      changed_cv.wait_until(lk, std::min(until, std::chrono::steady_clock::now() + std::chrono::milliseconds(250)),
                            [&] { return changes != seen || stopping; });
    }
    // The status first: once it says ended, its session.close is in the log read after it.
    Json status = e->session->status();
    Json chain, receipts;
    {
      std::lock_guard lk(e->chain.mu);
      verify_on(*e);
      receipts = verified_page(*e, after);
      chain = {{"verified", !e->chain.broken}, {"receipts", e->chain.starts.size()}};
      if (e->chain.broken) chain["error"] = e->chain.broken->to_json();
    }
    Json tails = Json::object(), all = e->session->output_tails();
    for (const auto& r : receipts)
      if (auto t = all.find(std::to_string(r.value("seq", uint64_t{0}))); t != all.end()) tails[t.key()] = *t;
    uint64_t next = after + receipts.size();
    return std::pair{200, Json{{"session", std::move(status)},
                               {"receipts", std::move(receipts)},
                               {"next", next},
                               {"chain", std::move(chain)},
                               {"output_tails", std::move(tails)}}};
  }

  Result<std::pair<int, Json>> console(const Route& r, const httplib::Request& req) {
    if (r.path == "/v1/console/sessions") return console_sessions();
    if (r.path == "/v1/console/host") {
      if (!opts.executors_report) return fail(Code::InternalError, "this server has no executors report");
      return std::pair{200, opts.executors_report()};
    }
    std::string id = req.matches[1].str();
    if (r.path.ends_with("/receipts")) return console_receipts(id, req);
    // The kill switch, as POST /v1/sessions/{id}/kill pulls it, named for who pulled it.
    auto e = TRY(find(id, false));
    if (e->session->ended()) {
      Json st = e->session->status();
      std::string how = st["ended"].is_object() ? st["ended"].value("how", "") : "";
      return fail(how == "killed" ? Code::SessionKilled : Code::SessionClosed,
                  fmt::format("the session already ended ({}): there is nothing to kill", how.empty() ? "closed" : how),
                  {{"session", id}, {"ended", st["ended"]}});
    }
    auto killed = e->session->kill("operator console");
    if (e->session->ended() || e->session->killed()) mark_ended(id, *e);
    changed();
    if (!killed) return std::unexpected(killed.error());
    return std::pair{200, Json{{"killed", true}}};
  }

  Result<std::pair<int, Json>> route(const Route& r, const httplib::Request& req, Listener& l) {
    if (operator_route(r.path)) {
      TRY(as_operator(r, req));
      if (r.path.starts_with("/v1/console/")) return console(r, req);
      return approvals(r, req);
    }
    std::string_view action = route_action(r.path);
    if (!action.empty()) return act(req.matches[1].str(), action, req, l);
    if (r.path == "/v1/sessions" && r.method == "GET") return list_sessions();
    if (r.path == "/v1/sessions") return open_session(req);
    if (r.path == "/v1/health") {
      std::lock_guard lk(mu);
      return std::pair{200, Json{{"status", stopping ? "stopping" : "ok"}, {"sessions_open", live()}}};
    }
    if (r.path == "/v1/executors") {
      if (!opts.executors_report) return fail(Code::InternalError, "this server has no executors report");
      return std::pair{200, opts.executors_report()};
    }
    if (r.path == "/v1/openapi.json") return std::pair{200, Json::parse(openapi_json())};
    return fail(Code::NotFound, fmt::format("no handler for {} {}", r.method, r.path));
  }

  void configure(Listener& l) {
    AdoptingServer& http = *l.http;
    for (const Route& r : kRoutes) {
      auto handler = [this, &r, &l](const httplib::Request& req, httplib::Response& res) {
        try {  // nothing thrown leaves a handler (STYLE.md rule 4)
          auto out = route(r, req, l);
          if (out)
            reply(res, out->first, out->second);
          else
            reply_error(res, out.error());
        } catch (const std::exception& ex) {
          reply_error(res, Error{Code::InternalError, fmt::format("internal error: {}", ex.what())});
        }
      };
      if (r.method == "GET")
        http.Get(route_regex(r.path), handler);
      else
        http.Post(route_regex(r.path), handler);
    }
    for (const ConsoleFile& f : console_files())
      http.Get(route_regex(f.path), [&f](const httplib::Request&, httplib::Response& res) {
        console_headers(res);
        res.set_content(f.body.data(), f.body.size(), std::string(f.content_type).c_str());
      });
    http.Get("/favicon.ico", [](const httplib::Request&, httplib::Response& res) {
      console_headers(res);
      res.status = 204;  // none: the browser asks anyway
    });
    http.Get("/ui", [](const httplib::Request&, httplib::Response& res) {
      console_headers(res);
      res.set_redirect("/ui/", 301);
    });
    // httplib's own refusals (no route, oversized body, unreadable request) get our error body.
    http.set_error_handler(httplib::Server::HandlerWithResponse([this](const httplib::Request& req,
                                                                       httplib::Response& res) {
      if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
      Json facts = {{"method", req.method}, {"path", req.path}};
      if (res.status == 413)
        reply_error(res, Error{Code::RequestTooLarge,
                               fmt::format("the request body is larger than {} bytes", opts.max_body_bytes),
                               {{"max_body_bytes", opts.max_body_bytes}}});
      else if (res.status == 404)
        reply_error(res, Error{Code::NotFound,
                               fmt::format("no route {} {} (GET /v1/openapi.json lists them)", req.method, req.path),
                               facts});
      else
        reply_error(res, Error{Code::ProtocolError, fmt::format("the request could not be read (HTTP {})", res.status),
                               facts});
      return httplib::Server::HandlerResponse::Handled;
    }));
    http.set_payload_max_length(opts.max_body_bytes);
    http.set_framing(opts.framing());
    http.set_keep_alive_max_count(1000);
    http.set_keep_alive_timeout(2);  // an idle kept-alive connection holds a worker; shutdown waits for it
    size_t n = opts.threads;
    http.new_task_queue = [n] { return new httplib::ThreadPool(n); };
  }

  Listener& add_listener(std::string name) {
    auto l = std::make_unique<Listener>();
    l->http = std::make_unique<AdoptingServer>();
    l->name = std::move(name);
    configure(*l);
    listeners.push_back(std::move(l));
    return *listeners.back();
  }
};

Server::Server(ServerOptions opts) : impl_(std::make_unique<Impl>()) {
  impl_->opts = std::move(opts);
  impl_->host.emplace(impl_->opts.state_dir);
}

Server::~Server() { shutdown("server destroyed"); }

Result<void> Server::bind_unix(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof addr.sun_path)
    return fail(Code::OptionInvalid,
                fmt::format("the socket path {} is {} bytes; at most {}", path, path.size(), sizeof addr.sun_path - 1),
                {{"socket", path}});
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  struct stat st{};
  if (::lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode))
      return fail(Code::ConfigError, fmt::format("{} exists and is not a socket", path), {{"socket", path}});
    UniqueFd probe(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (probe && ::connect(probe.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0)
      return fail(Code::ConfigError, fmt::format("another server listens on {}", path), {{"socket", path}});
    ::unlink(path.c_str());  // stale: its server is gone
  }
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) return fail_errno(Code::IoError, "cannot create a unix socket", errno);
  // The socket is born 0600: no moment exists when another user could connect. umask is
  // process-wide, which is safe here because listeners are bound before any thread starts.
  mode_t old = ::umask(0177);
  int rc = ::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  int err = errno;
  ::umask(old);
  if (rc < 0) return fail_errno(Code::IoError, fmt::format("cannot bind {}", path), err);
  if (::listen(fd.get(), SOMAXCONN) < 0) return fail_errno(Code::IoError, fmt::format("cannot listen on {}", path), errno);
  if (::lstat(path.c_str(), &st) == 0) {
    impl_->socket_dev = st.st_dev;
    impl_->socket_ino = st.st_ino;
  }
  impl_->socket_path = path;
  impl_->add_listener("unix:" + path).http->adopt(fd.release());
  return {};
}

Result<int> Server::bind_tcp(const ListenAddress& at, std::string token) {
  Listener& l = impl_->add_listener(fmt::format("tcp:{}:{}", at.host, at.port));
  // httplib writes headers and body separately: without TCP_NODELAY, Nagle and delayed ACKs
  // add ~40 ms to every kept-alive request.
  l.http->set_tcp_nodelay(true);
  // Compared as digests with CRYPTO_memcmp: the time taken says nothing about the token.
  std::string want = sha256_hex(token);
  l.http->set_pre_routing_handler([want](const httplib::Request& req, httplib::Response& res) {
    if ((operator_route(req.path) || console_file_route(req.path)) && !loopback_host(req.get_header_value("Host"))) {
      reply_error(res, Error{Code::Unauthorized,
                             "the console answers only a request for a loopback name (127.0.0.1, [::1], localhost): "
                             "this one names another host, as a page of another site reached by DNS rebinding does",
                             {{"listener", "tcp"}, {"path", req.path}}});
      return httplib::Server::HandlerResponse::Handled;
    }
    // The approval and console routes check the operator's token themselves (and refuse this
    // one); the console's files need none.
    if (bearer_matches(req, want) || operator_route(req.path) || console_file_route(req.path))
      return httplib::Server::HandlerResponse::Unhandled;
    std::string auth = req.get_header_value("Authorization");
    reply_error(res, Error{Code::Unauthorized,
                           auth.empty() ? "the TCP listener requires Authorization: Bearer <token>"
                                        : "the bearer token is not the server's",
                           {{"listener", "tcp"}}});
    res.set_header("WWW-Authenticate", "Bearer");
    return httplib::Server::HandlerResponse::Handled;
  });
  int port = at.port;
  if (port == 0) {
    port = l.http->bind_to_any_port(at.host);
    if (port < 0) port = 0;
  } else if (!l.http->bind_to_port(at.host, port)) {
    port = 0;
  }
  if (port == 0) {
    impl_->listeners.pop_back();
    return fail(Code::IoError, fmt::format("cannot listen on {}:{}", at.host, at.port),
                {{"host", at.host}, {"port", at.port}});
  }
  l.name = fmt::format("tcp:{}:{}", at.host, port);
  return port;
}

void Server::start() {
  impl_->reaper = std::thread([impl = impl_.get()] { impl->reap_loop(); });
  for (auto& l : impl_->listeners) {
    Listener* p = l.get();
    p->thread = std::thread([p] {
      p->http->listen_after_bind();
      p->done = true;
    });
  }
}

void Server::shutdown(std::string_view why) {
  std::vector<std::shared_ptr<Impl::Entry>> open;
  {
    std::lock_guard lk(impl_->mu);
    impl_->stopping = true;
    for (auto& [id, e] : impl_->sessions) open.push_back(e);
  }
  impl_->reaper_cv.notify_all();
  if (impl_->reaper.joinable()) impl_->reaper.join();
  // Kill first: a running tool ends now, its handler answers, and the pools can drain.
  for (auto& e : open) (void)e->session->kill(why);
  for (auto& l : impl_->listeners) {
    // stop() is a no-op until the listener runs; repeat until its thread has returned.
    while (l->thread.joinable() && !l->done) {
      l->http->stop();
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    if (l->thread.joinable()) l->thread.join();
  }
  impl_->listeners.clear();
  {
    std::lock_guard lk(impl_->mu);
    impl_->sessions.clear();
    impl_->ended.clear();
  }
  open.clear();
  // Remove the socket only if it is still the one this server made.
  struct stat st{};
  if (!impl_->socket_path.empty() && ::lstat(impl_->socket_path.c_str(), &st) == 0 && st.st_dev == impl_->socket_dev &&
      st.st_ino == impl_->socket_ino)
    ::unlink(impl_->socket_path.c_str());
  impl_->socket_path.clear();
}

}  // namespace airlock::server
